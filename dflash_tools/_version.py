"""The package's version: part of the facade (`dflash_tools.__version__`), and the one place it is
written (pyproject.toml reads it from here, `[tool.hatch.version]`).

Its own module so that the layers that record it (convert's restore record, the Hub user agent,
`--version`) need not import the facade, which imports them back lazily; a literal, so that
`dflash-tools --version` costs no scan of the installed distributions (importlib.metadata took
longer than the whole of `--help`).
"""

from __future__ import annotations

__version__ = "0.1.0"
