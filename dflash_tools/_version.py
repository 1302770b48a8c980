"""The installed distribution's version: part of the facade (`dflash_tools.__version__`).

Its own module so that the layers that record it (convert's restore record, the Hub user agent,
`--version`) need not import the facade, which imports them back lazily.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dflash-tools")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"
