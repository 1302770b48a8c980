"""Dialect registry: detection by markers (never by repository name) and dispatch.

One module per config format (z-lab, speculators, Open Spec, native DSpark, the Muse Glimmer
assistant). Each exports its `SPEC` (`draft.dialect_spec.DialectSpec`: its dialects, markers,
where its keys sit, its defaults) and the functions of `DialectModule`: `detect`, `read` (into
one `draft.description.DraftDescription`) and `normalize`; the writers also render a description
read from another format (`DialectWriter`). `_MODULES` below is the one place a dialect is
registered (docs/adding-a-dialect.md).

`read` also says what no dialect reads: an architecture an engine release registers but no
dialect reads is refused by name (DFT008, from the engine tables' architecture rows), the
features engines treat differently are reported (`features`, DFT035), and keys nothing explains
are named (`key_census`, DFT009).

Imports: `draft` (description, dialect_spec, geometry, config_keys), `engine_rules`, `findings`. A
dialect module imports `_common` and `draft` only: never another dialect module, nor this registry.
"""

from __future__ import annotations

from typing import Any, Protocol

from dflash_tools.dialects import dspark_native, muse_glimmer, open_spec, speculators, zlab
from dflash_tools.dialects._common import ConfigInvalid, architectures
from dflash_tools.dialects.features import feature_findings
from dflash_tools.dialects.key_census import unknown_key_findings
from dflash_tools.draft.description import Dialect, DraftDescription
from dflash_tools.draft.dialect_spec import DialectSpec
from dflash_tools.draft.geometry import Geometry
from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.findings import make_finding


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
    """A dialect that `convert --to` can translate into (and out of).

    `TRANSLATES_WITH`: the writers it translates to and from without loss (a pair is declared on
    either side: `translates_between`); `cannot_render` says why one description cannot be (None:
    it can).
    """

    TRANSLATES_WITH: frozenset[str]

    def cannot_render(self, desc: DraftDescription) -> str | None:
        """Why `desc` has no lossless form in this dialect, or None."""

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
_MODULES: tuple[DialectModule, ...] = (speculators, open_spec, muse_glimmer, zlab, dspark_native)

# The dialects a config can be translated into (convert --to), by family.
_WRITER_MODULES: tuple[DialectWriter, ...] = (zlab, speculators, muse_glimmer)
WRITERS: dict[str, DialectWriter] = {module.SPEC.family: module for module in _WRITER_MODULES}

SPECS: tuple[DialectSpec, ...] = tuple(module.SPEC for module in _MODULES)

__all__ = [
    "SPECS",
    "WRITERS",
    "ConfigInvalid",
    "DialectModule",
    "DialectWriter",
    "UnknownDialect",
    "UnreadArchitecture",
    "by_name",
    "detect",
    "markers",
    "module_for",
    "normalize",
    "read",
    "read_as",
    "render",
    "render_refusal",
    "spec_for_family",
    "translates_between",
    "unread_architecture",
]


class UnknownDialect(Exception):
    pass


class UnreadArchitecture(ConfigInvalid):
    """A DFlash-family architecture an engine release serves, which no dialect reads (DFT008)."""


def unread_architecture(config: dict[str, Any]) -> str | None:
    """The config's architecture that an engine table registers and no dialect reads, or None.

    An architecture a dialect reads (a row with a `family`) is not one: a config of it that no
    dialect detects is malformed, and the markers say what is missing (DFT002)."""
    for name in architectures(config):
        rows = [row for rules in ENGINE_RULES.values() if (row := rules.architecture(name)) is not None]
        if rows and all(row.family is None for row in rows):
            return name
    return None


def _unread_finding(name: str) -> UnreadArchitecture:
    rows = [(spec, rules.architecture(name)) for spec, rules in ENGINE_RULES.items()]
    served = [(spec, row) for spec, row in rows if row is not None]
    note = next((row.note for _, row in served if row.note), "")
    releases = ", ".join(f"{spec} ({row.loader})" for spec, row in served)
    return UnreadArchitecture(
        [
            make_finding(
                "DFT008",
                f"architectures names {name}, a DFlash-family draft that {releases} serve{'s' if len(served) == 1 else ''}"
                f", but dflash-tools reads no config of it{': ' + note if note else ''}. Its geometry, layout, keys, "
                "layer ids and weights are not checked",
                "serve it with the releases above and check acceptance with `dflash-tools smoke-test`; "
                "docs/engines.md lists every architecture each release registers",
                keys=("architectures",),
                values={"architecture": name, "releases": [spec for spec, _ in served]},
            )
        ]
    )


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
    """Detect and read; raises UnknownDialect, or ConfigInvalid (UnreadArchitecture for an
    architecture an engine serves that no dialect reads). The description's reader findings end
    with the features it uses (DFT035) and the keys nothing explains (DFT009)."""
    return read_as(config, detect(config))


def read_as(config: dict[str, Any], dialect: Dialect | None) -> DraftDescription:
    """`read` of a config whose dialect the caller has detected already (`detect`; None: none
    matched), so that one inspect detects it once."""
    if dialect is None:
        name = unread_architecture(config)
        if name is not None:
            raise _unread_finding(name)
        raise UnknownDialect("; ".join(markers()))
    desc = module_for(dialect).read(config, dialect)
    desc.reader_findings.extend(feature_findings(config, desc))
    desc.reader_findings.extend(unknown_key_findings(config, dialect.spec))
    return desc


def normalize(description: DraftDescription, geometry: Geometry) -> dict[str, Any]:
    """The description's own config with block_size and sample_from_anchor written everywhere."""
    return module_for(description.dialect).normalize(description.raw_config, geometry)


def render_refusal(family: str, description: DraftDescription) -> str | None:
    """Why the description cannot be written as a `family` config without loss (None: it can)."""
    writer = WRITERS.get(family)
    if writer is None:
        return f"dflash-tools writes no {family} config"
    source = description.dialect.family
    if not translates_between(source, family):
        sources = sorted(other for other in WRITERS if translates_between(other, family))
        return f"{writer.SPEC.title} configs are written from {', '.join(sources)} only"
    return writer.cannot_render(description)


def translates_between(source: str, family: str) -> bool:
    """Whether `convert --to family` renders a `source` config without loss: either writer
    declares the other in its `TRANSLATES_WITH`, so a new writer declares its pairs in its own
    module (docs/adding-a-dialect.md)."""
    if source not in WRITERS or family not in WRITERS:
        return False
    return source in WRITERS[family].TRANSLATES_WITH or family in WRITERS[source].TRANSLATES_WITH


def render(family: str, description: DraftDescription, geometry: Geometry, **options: Any) -> dict[str, Any]:
    """The description written as a `family` config (a writer's), whatever its own dialect."""
    decoder = WRITERS[description.dialect.family].decoder_config(description.raw_config)
    return WRITERS[family].render(description, geometry, decoder=decoder, **options)
