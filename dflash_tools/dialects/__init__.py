"""Dialect registry: detection by markers (never by repository name) and dispatch.

One module per config format (z-lab, speculators, Open Spec, native DSpark). Each exports its
`SPEC` (`draft.dialect_spec.DialectSpec`: its dialects, markers, where its keys sit, its
defaults) and the functions of `DialectModule`: `detect`, `read` (into one
`draft.description.DraftDescription`) and `normalize`; z-lab and speculators also render a
description read from the other (`DialectWriter`). `_MODULES` below is the one place a dialect
is registered (docs/adding-a-dialect.md).

Imports: `draft` (description, dialect_spec, geometry, config_keys), `findings`. A dialect module
imports `_common` and `draft` only: never another dialect module, nor this registry.
"""

from __future__ import annotations

from typing import Any, Protocol

from dflash_tools.dialects import dspark_native, open_spec, speculators, zlab
from dflash_tools.dialects._common import ConfigInvalid
from dflash_tools.draft.description import Dialect, DraftDescription
from dflash_tools.draft.dialect_spec import DialectSpec
from dflash_tools.draft.geometry import Geometry


class DialectModule(Protocol):
    """What a dialect module provides (the registry holds the modules, typed by this)."""

    SPEC: DialectSpec

    def detect(self, config: dict[str, Any]) -> Dialect | None:
        """One of `SPEC.dialects` when the config carries the format's markers, else None."""

    def read(self, config: dict[str, Any], dialect: Dialect) -> DraftDescription:
        """The description; raises `ConfigInvalid` when the config cannot describe a draft."""

    def normalize(self, config: dict[str, Any], geometry: Geometry) -> dict[str, Any]:
        """The config with block_size and sample_from_anchor written where engines read them."""


class DialectWriter(DialectModule, Protocol):
    """A dialect that `convert --to` can translate into (and out of)."""

    def decoder_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The decoder fields of a config in this dialect."""

    def render(
        self,
        desc: DraftDescription,
        geometry: Geometry,
        *,
        decoder: dict[str, Any],
        base_config: dict[str, Any] | None = None,
        verifier: dict[str, Any] | None = None,
        num_target_layers: int | None = None,
    ) -> dict[str, Any]:
        """A description from any translatable dialect, written in this one."""


# Order matters: speculators and Open Spec configs may also carry z-lab architecture names.
_MODULES: tuple[DialectModule, ...] = (speculators, open_spec, zlab, dspark_native)

# The dialects a config can be translated into (convert --to), by family.
_WRITER_MODULES: tuple[DialectWriter, ...] = (zlab, speculators)
WRITERS: dict[str, DialectWriter] = {module.SPEC.family: module for module in _WRITER_MODULES}

SPECS: tuple[DialectSpec, ...] = tuple(module.SPEC for module in _MODULES)

__all__ = [
    "SPECS",
    "WRITERS",
    "ConfigInvalid",
    "DialectModule",
    "DialectWriter",
    "UnknownDialect",
    "by_name",
    "detect",
    "markers",
    "module_for",
    "normalize",
    "read",
    "render",
    "spec_for_family",
]


class UnknownDialect(Exception):
    pass


def markers() -> list[str]:
    return [spec.markers for spec in SPECS]


def spec_for_family(family: str) -> DialectSpec | None:
    """The spec of a family name (`zlab`, `speculators`, ...), as JSON and the engine tables spell it."""
    return next((spec for spec in SPECS if spec.family == family), None)


def by_name(value: str) -> Dialect | None:
    """The dialect a JSON `dialect` value names (`zlab-dflash`), or None."""
    return next((d for spec in SPECS for d in spec.dialects if d.value == value), None)


def detect(config: dict[str, Any]) -> Dialect | None:
    for module in _MODULES:
        dialect = module.detect(config)
        if dialect is not None:
            return dialect
    return None


def module_for(dialect: Dialect) -> DialectModule:
    for module in _MODULES:
        if module.SPEC.family == dialect.family:
            return module
    raise KeyError(dialect.value)  # pragma: no cover - every dialect belongs to a registered spec


def read(config: dict[str, Any]) -> DraftDescription:
    """Detect and read; raises UnknownDialect or ConfigInvalid."""
    dialect = detect(config)
    if dialect is None:
        raise UnknownDialect("; ".join(markers()))
    return module_for(dialect).read(config, dialect)


def normalize(description: DraftDescription, geometry: Geometry) -> dict[str, Any]:
    """The description's own config with block_size and sample_from_anchor written everywhere."""
    return module_for(description.dialect).normalize(description.raw_config, geometry)


def render(family: str, description: DraftDescription, geometry: Geometry, **options: Any) -> dict[str, Any]:
    """The description written as a `family` config ("zlab" or "speculators"), whatever its own dialect."""
    decoder = WRITERS[description.dialect.family].decoder_config(description.raw_config)
    return WRITERS[family].render(description, geometry, decoder=decoder, **options)
