"""What one engine view is made of: the draft's facts, and the view an engine release takes.

`DraftFacts` is what every view needs to know about one draft, read once from an inspect report
(or from a config that `convert` is about to write); `EngineView` is what one release does with
it (`engine_view.engine_view` fills it in; `engine_checks` reads it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from dflash_tools import dialects
from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.draft.description import Dialect, DraftDescription
from dflash_tools.draft.geometry import Geometry, decide_layout, num_query_tokens
from dflash_tools.draft.target import TargetDescription
from dflash_tools.engine_rules import EngineRules, Layout, Outcome
from dflash_tools.engine_rules.config_loading import Resolution
from dflash_tools.findings import Finding, Severity, make_finding
from dflash_tools.inspect import InspectReport
from dflash_tools.serving.launch import Launch


def layout_for(sample_from_anchor: bool) -> Layout:
    return Layout.ANCHOR_FIRST if sample_from_anchor else Layout.BONUS


# --------------------------------------------------------------------------------------------
# What the view needs to know about the draft
# --------------------------------------------------------------------------------------------


class _Undetected(Enum):
    """`DraftFacts.of`'s default `dialect`: not detected by the caller (None: detected, no match)."""

    TOKEN = 0


UNDETECTED = _Undetected.TOKEN


@dataclass(frozen=True)
class DraftFacts:
    """One draft as every engine view needs it, read once from an inspect report.

    `trained_*` are what the draft was trained with, as inspect decided it (None: unknown);
    `trained_layout_unknown`: the evidence about the layout disagrees (both readings are possible),
    `trained_layout_stated`: the file declares it (a layout only inferred never raises an error);
    `target_*` come from `--target` (None without it). `draft` is what the launch line names.
    """

    source: str
    config: dict[str, Any]
    family: str | None
    algorithm: str | None
    architecture: str | None
    domino: bool
    trained_sample_from_anchor: bool | None
    trained_block_size: int | None
    trained_max_tokens: int | None
    requested_tokens: int | None
    trained_layer_ids: list[int] | None
    num_draft_layers: int | None
    hidden_size: int | None
    trained_mask_token_id: int | None
    target_num_layers: int | None = None
    target_vocab_size: int | None = None
    target: str | None = None
    draft: str = ""
    draft_revision: str | None = None
    layout_evidence: tuple[str, ...] = ()
    # The decoder's attention per layer as the dialect reads it (speculators: from
    # transformer_layer_config), not the config's top level; None when unknown.
    layer_types: tuple[str, ...] | None = None
    trained_layout_unknown: bool = False
    trained_layout_stated: bool = True

    @property
    def trained_layout(self) -> Layout | None:
        return None if self.trained_sample_from_anchor is None else layout_for(self.trained_sample_from_anchor)

    @classmethod
    def from_report(cls, report: InspectReport, *, target: str | None = None) -> DraftFacts | None:
        """None when there is no config to read (the view has nothing to apply its rules to)."""
        loaded = report.loaded
        if loaded.config is None:
            return None
        return cls.of(
            loaded.config,
            report.description,
            report.geometry,
            source=loaded.source,
            draft=_draft_name(report),
            draft_revision=loaded.revision if loaded.kind == "hub" else None,
            target_spec=report.target,
            target=target,
            dialect=report.dialect,
        )

    @classmethod
    def of(
        cls,
        config: dict[str, Any],
        desc: DraftDescription | None,
        geometry: Geometry | None,
        *,
        source: str,
        draft: str,
        draft_revision: str | None = None,
        target_spec: TargetDescription | None = None,
        target: str | None = None,
        dialect: Dialect | None | _Undetected = UNDETECTED,
    ) -> DraftFacts:
        """The facts of a config and what inspect made of it (`desc`, `geometry`: None when
        unknown; `dialect`: the config's as inspect detected it, else detected here)."""
        if desc is not None:
            dialect = desc.dialect
        elif dialect is UNDETECTED:
            dialect = dialects.detect(config)
        # Without a description (a config too broken to read) the dialect still says what its drafts are.
        algorithm = desc.algorithm if desc is not None else (dialect.algorithm if dialect else None)
        sfa: bool | None = None
        unknown, stated = False, True
        if geometry is not None:
            sfa = geometry.sample_from_anchor if geometry.layout_known else None
            unknown, stated = not geometry.layout_known, geometry.layout_stated
        elif desc is not None:
            layout = decide_layout(desc)
            sfa, unknown, stated = layout.sample_from_anchor, not layout.known, layout.stated
        architectures = config.get("architectures")
        architecture = architectures[0] if isinstance(architectures, list) and architectures else None
        nested = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
        assert isinstance(nested, dict)
        domino = nested.get("projector_type", config.get("projector_type")) == "domino"
        verifier = desc.verifier_name if desc is not None else None
        # K asked for: a -k equal to K_max, the default, is not a request (it changes no column).
        requested = (
            geometry.num_speculative_tokens
            if geometry
            and geometry.speculative_tokens_requested
            and geometry.num_speculative_tokens != geometry.max_speculative_tokens
            else None
        )
        return cls(
            source=source,
            config=config,
            family=dialect.family if dialect is not None else None,
            algorithm=algorithm.value if algorithm is not None else None,
            architecture=architecture if isinstance(architecture, str) else None,
            domino=domino,
            trained_sample_from_anchor=sfa,
            trained_block_size=geometry.block_size if geometry else None,
            # An unknown layout leaves K_max unknown: B - 1 or B.
            trained_max_tokens=geometry.max_speculative_tokens if geometry and geometry.layout_known else None,
            requested_tokens=requested,
            trained_layer_ids=list(desc.target_layer_ids) if desc is not None else None,
            num_draft_layers=desc.decoder.num_hidden_layers if desc is not None else None,
            hidden_size=desc.decoder.hidden_size if desc is not None else None,
            trained_mask_token_id=desc.mask_token_id if desc is not None else None,
            target_num_layers=target_spec.num_hidden_layers if target_spec is not None else None,
            target_vocab_size=target_spec.vocab_size if target_spec is not None else None,
            target=target or (target_spec.source if target_spec is not None else None) or verifier,
            draft=draft,
            draft_revision=draft_revision,
            layout_evidence=tuple(e.why for e in desc.layout_evidence) if desc is not None else (),
            layer_types=tuple(desc.decoder.layer_types)
            if desc is not None and desc.decoder.layer_types is not None
            else None,
            trained_layout_unknown=unknown,
            trained_layout_stated=stated,
        )


def _draft_name(report: InspectReport) -> str:
    """What the engine is told to load: the folder of a local draft, the repo id of a Hub one."""
    loaded = report.loaded
    if loaded.kind == "hub":
        return loaded.source.removeprefix("hf://")
    folder = loaded.local_dir
    return str(folder) if folder is not None else loaded.location


# --------------------------------------------------------------------------------------------
# The view
# --------------------------------------------------------------------------------------------


def _codes(findings: list[Finding]) -> list[str]:
    """An engine column's findings, by code (the report lists them in full)."""
    return [finding.code for finding in findings]


@dataclass
class EngineView(JsonDocument):
    """What one engine release does with the draft (JSON: one entry of `engines`)."""

    rules: EngineRules
    path: str | None = None
    reads_format: bool = False
    outcome: Outcome = Outcome.SERVED  # until a rule says otherwise (`fail`)
    refusal: str | None = None
    layout: Layout | None = None
    # Where the release reads the layout on its path (the spellings it reads, in order; empty:
    # none, its layout is fixed), and the one it found ("default" when none is set).
    layout_read_from: tuple[str, ...] = ()
    layout_source: str | None = None
    block_size: int | None = None
    block_size_source: str | None = None
    draft_tokens: int | None = field(default=None, metadata=json_rules(name="num_speculative_tokens"))
    target_layer_ids: list[int] | None = None
    target_layer_ids_source: str | None = None
    num_target_layers: int | None = None
    num_target_layers_source: str | None = None
    mask_token_id: int | None = None
    mask_token_id_source: str | None = None
    matches_training: bool = False
    launch: Launch | None = field(default=None, metadata=json_rules(omit=True))  # JSON: `launch*`, flat
    plugin: str | None = None  # vLLM: `plugin_state.engine_column_word` ("not needed", "needed", ...)
    installed: bool = False
    findings: list[Finding] = field(default_factory=list, metadata=json_rules(encode=_codes))
    # The release's load path, step by step (`serving.load_path`), and how it resolved the config.
    load_path: list[dict[str, Any]] = field(default_factory=list)
    resolution: Resolution | None = None

    json_keys: ClassVar[tuple[str, ...]] = (
        "engine",
        "version",
        "installed",
        "path",
        "reads_format",
        "outcome",
        "refusal",
        "layout",
        "layout_read_from",
        "layout_source",
        "block_size",
        "block_size_source",
        "num_speculative_tokens",
        "num_query_tokens",
        "target_layer_ids",
        "target_layer_ids_source",
        "num_target_layers",
        "num_target_layers_source",
        "mask_token_id",
        "mask_token_id_source",
        "matches_training",
        "plugin",
        "launch",
        "launch_environment",
        "launch_placeholders",
        "launch_command",
        "findings",
        "config_class",
        "filled_defaults",
        "stopped_at",
        "load_path",
    )
    json_properties: ClassVar[Mapping[str, str]] = {
        "engine": "rules.engine",
        "version": "rules.version",
        "num_query_tokens": "num_query_tokens",
        "launch": "launch.argv",
        "launch_environment": "launch.environment",
        "launch_placeholders": "launch.placeholders",
        "launch_command": "launch.shell()",
        "config_class": "resolution.config_class",
        "filled_defaults": "filled_defaults()",
        "stopped_at": "stopped_at",
    }

    @property
    def spec(self) -> str:
        return self.rules.spec

    @property
    def serves_as_trained(self) -> bool:
        return self.outcome in AS_TRAINED

    @property
    def num_query_tokens(self) -> int | None:
        """The query positions the K it drafts takes in the layout it serves (K + 1 bonus, K anchor-first)."""
        if self.draft_tokens is None or self.layout is None:
            return None
        return num_query_tokens(self.draft_tokens, self.layout is Layout.ANCHOR_FIRST)

    @property
    def stopped_at(self) -> str | None:
        """The load-path step the engine stops at (None: it gets through, whatever it serves)."""
        return next((step["step"] for step in self.load_path if step["status"] in ("stopped", "unchecked")), None)

    def filled_defaults(self) -> dict[str, Any] | None:
        """What the config class filled in (JSON `filled_defaults`); None before it loads."""
        resolution = self.resolution
        if resolution is None or not resolution.loads:
            return None
        return {
            "by": resolution.config_class,
            "transformers": resolution.transformers,
            "source": resolution.source if resolution.by_transformers else None,
            "values": resolution.filled,
            "not_tabulated": list(resolution.not_tabulated),
        }

    # -- how the view records what it found ----------------------------------------------

    def fail(self, outcome: Outcome, reason: str) -> None:
        """The worst outcome found wins, and its first reason is the refusal."""
        if RANK[outcome] > RANK[self.outcome]:
            self.outcome, self.refusal = outcome, reason

    def note(
        self,
        code: str,
        message: str,
        hint: str = "",
        *,
        keys: tuple[str, ...] = (),
        values: dict[str, Any] | None = None,
        severity: Severity | None = None,
    ) -> None:
        self.findings.append(
            make_finding(
                code,
                f"{self.spec}: {message}",
                hint,
                severity=severity,
                keys=keys,
                values={"engine": self.spec, **(values or {})},
            )
        )


# The outcomes that serve the draft as it was trained.
AS_TRAINED = frozenset({Outcome.SERVED, Outcome.SERVED_WITH_PLUGIN})

# How bad an outcome is: a view keeps the worst it found.
RANK = {
    Outcome.SERVED: 0,
    Outcome.SERVED_WITH_PLUGIN: 1,
    Outcome.UNCHECKED: 2,
    Outcome.SERVED_WRONG: 3,
    Outcome.MISALIGNED: 4,
    Outcome.REFUSED: 5,
    Outcome.UNSUPPORTED: 6,
    Outcome.WONT_LOAD: 7,
}
