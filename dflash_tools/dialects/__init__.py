"""Dialect registry: detection by markers (never by repository name) and dispatch.

One module per config format (z-lab, speculators, Open Spec, native DSpark), each reading its
format into one `draft.description.DraftDescription` and writing it back (`normalize`; z-lab and
speculators also `render` a description read from the other). Adding a dialect is one module with
`DIALECTS`, `MARKERS`, `detect`, `read` and `normalize`, listed in `_MODULES`, plus fixtures.

Imports: `draft` (description, geometry, findings). A dialect module imports `_common` and
`draft` only: never another dialect module, nor this registry.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from dflash_tools.dialects import dspark_native, open_spec, speculators, zlab
from dflash_tools.dialects._common import ConfigInvalid
from dflash_tools.draft.description import Dialect, DraftDescription
from dflash_tools.draft.geometry import Geometry

# Order matters: speculators and Open Spec configs may also carry z-lab architecture names.
_MODULES: tuple[ModuleType, ...] = (speculators, open_spec, zlab, dspark_native)

# The dialects a config can be translated into (convert --to), by family.
WRITERS: dict[str, ModuleType] = {"zlab": zlab, "speculators": speculators}

__all__ = [
    "WRITERS",
    "ConfigInvalid",
    "UnknownDialect",
    "detect",
    "markers",
    "module_for",
    "normalize",
    "read",
    "render",
]


class UnknownDialect(Exception):
    pass


def markers() -> list[str]:
    return [m.MARKERS for m in _MODULES]


def detect(config: dict[str, Any]) -> Dialect | None:
    for module in _MODULES:
        dialect: Dialect | None = module.detect(config)
        if dialect is not None:
            return dialect
    return None


def module_for(dialect: Dialect) -> ModuleType:
    for module in _MODULES:
        if dialect in module.DIALECTS:
            return module
    raise KeyError(dialect)  # pragma: no cover - every Dialect member has a module


def read(config: dict[str, Any]) -> DraftDescription:
    """Detect and read; raises UnknownDialect or ConfigInvalid."""
    dialect = detect(config)
    if dialect is None:
        raise UnknownDialect("; ".join(markers()))
    description: DraftDescription = module_for(dialect).read(config, dialect)
    return description


def normalize(description: DraftDescription, geometry: Geometry) -> dict[str, Any]:
    """The description's own config with block_size and sample_from_anchor written everywhere."""
    result: dict[str, Any] = module_for(description.dialect).normalize(description.raw_config, geometry)
    return result


def render(family: str, description: DraftDescription, geometry: Geometry, **options: Any) -> dict[str, Any]:
    """The description written as a `family` config ("zlab" or "speculators"), whatever its own dialect."""
    decoder = module_for(description.dialect).decoder_config(description.raw_config)
    result: dict[str, Any] = WRITERS[family].render(description, geometry, decoder=decoder, **options)
    return result
