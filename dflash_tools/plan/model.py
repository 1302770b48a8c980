"""What `dflash-tools plan` is asked (`PlanRequest`) and what it answers (`LaunchPlan`: one
`ServingPlan` per draft, one `EnginePlan` per engine release), as plain dataclasses.

The request is built once, with where each value comes from (`request.plan_request`: the
command line, else a preset); `run.plan_launch` fills the answer. Every `to_dict` is the JSON
document of docs/plan.md, "Output and exit codes".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dflash_tools.documents import JsonDocument, document, json_rules
from dflash_tools.draft.target import TargetDescription
from dflash_tools.engine_rules import EngineRules, json_key
from dflash_tools.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from dflash_tools.findings import Finding, Severity, make_finding, sort_findings
from dflash_tools.inspect import InspectReport
from dflash_tools.plan.checks import AttentionDims, TensorParallelCheck, TokenBudget
from dflash_tools.plan.memory import KvLayout, MemoryFit, WeightBytes
from dflash_tools.plan.unread import TARGET_CHECKS, UnreadDraft, UnreadTarget
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.serving.engine_model import EngineView
from dflash_tools.serving.launch import SERVING_SETTINGS

SCHEMA_VERSION = 1

# Where a value comes from (JSON `request.sources` and `settings.NAME.source`).
GIVEN = "given"  # on the command line
PRESET = "preset"  # the preset (its target, drafts, K or engine arguments)
DEFAULT = "default"  # the release's own default, written on the launch line so it is what was checked
RAISED = "raised"  # the release's default breaks a check: the launch line passes the value that holds
CONFIG = "config"  # the target's config.json (max_model_len: max_position_embeddings)

# The serving settings a request may take from a preset's engine arguments (the command line gives
# them too); others in a preset, such as enforce_eager, are not serving facts.
REQUEST_SETTINGS = tuple(setting.name for setting in SERVING_SETTINGS if setting.from_preset)


def _sorted_documents(findings: list[Finding]) -> list[dict[str, Any]]:
    """Findings as JSON writes them: most severe first (`sort_findings`)."""
    return [finding.to_dict() for finding in sort_findings(findings)]


def _weights_document(weights: tuple[WeightBytes, WeightBytes] | None) -> dict[str, Any] | None:
    return {"target": weights[0].to_dict(), "draft": weights[1].to_dict()} if weights else None


def _engines_document(engines: dict[str, EnginePlan]) -> dict[str, Any]:
    """Each release's plan under its JSON key (`engine_rules.json_key`)."""
    return {json_key(plan.rules): plan.to_dict() for plan in engines.values()}


@dataclass(frozen=True)
class PlanDraft:
    """One draft to plan for: a SOURCE and its Hub revision."""

    source: str
    revision: str | None = None


@dataclass(frozen=True)
class PlanRequest:
    """What the user asked for, resolved once. None: the release's default (or the config's)."""

    target: str
    drafts: tuple[PlanDraft, ...]
    engines: tuple[str, ...]  # `engine==version` names of tables in `ENGINE_RULES`
    num_speculative_tokens: int | None = None
    gpu_memory_gib: float | None = None
    tensor_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    target_revision: str | None = None
    preset: str | None = None  # the preset's name as given (`--preset`)
    # Where each value that is set comes from: GIVEN or PRESET (`target`, `drafts`,
    # `num_speculative_tokens` and the settings); a value not listed was given.
    sources: Mapping[str, str] = field(default_factory=dict)

    def source(self, name: str) -> str:
        return self.sources.get(name, GIVEN)

    @property
    def from_preset(self) -> tuple[str, ...]:
        """The serving settings taken from the preset's engine arguments."""
        return tuple(name for name in REQUEST_SETTINGS if self.sources.get(name) == PRESET)

    # Not a declaration: one draft's request, its draft's source and revision among the request's.
    def to_dict(self, draft: PlanDraft) -> dict[str, Any]:
        """The request as one draft's plan states it (JSON `plans[].request`)."""
        return {
            "target": self.target,
            "draft": draft.source,
            "engines": list(self.engines),
            "num_speculative_tokens": self.num_speculative_tokens,
            "gpu_memory_gib": self.gpu_memory_gib,
            "tensor_parallel_size": self.tensor_parallel_size,
            "decode_context_parallel_size": self.decode_context_parallel_size,
            "max_num_seqs": self.max_num_seqs,
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "dtype": self.dtype,
            "kv_cache_dtype": self.kv_cache_dtype,
            "revision": draft.revision,
            "target_revision": self.target_revision,
            "from_preset": list(self.from_preset),
            "sources": dict(self.sources),
        }


@dataclass(frozen=True)
class Setting(JsonDocument):
    """One resolved serving setting and where its value comes from."""

    value: int | float | str
    source: str  # GIVEN, PRESET, DEFAULT, RAISED, CONFIG
    note: str = ""  # for a default: which of the release's defaults (its table's note)


@dataclass
class EnginePlan(JsonDocument):
    """One engine release: how it serves the draft, with which settings, and its launch line."""

    view: EngineView
    settings: dict[str, Setting] = field(default_factory=dict)
    token_budget: TokenBudget | None = None
    runner: str | None = None  # vLLM: which model runner serves the draft
    findings: list[Finding] = field(default_factory=list, metadata=json_rules(encode=_sorted_documents))

    json_keys: ClassVar[tuple[str, ...]] = (
        "engine",
        "version",
        "serves",
        "ok",
        "outcome",
        "refusal",
        "path",
        "layout",
        "num_speculative_tokens",
        "num_query_tokens",
        "plugin",
        "runner",
        "settings",
        "token_budget",
        "launch",
        "launch_command",
        "findings",
    )
    json_properties: ClassVar[Mapping[str, str]] = {
        "engine": "rules.engine",
        "version": "rules.version",
        "serves": "serves",
        "ok": "ok",
        "outcome": "view.outcome",
        "refusal": "view.refusal",
        "path": "view.path",
        "layout": "view.layout",
        "num_speculative_tokens": "view.draft_tokens",
        "num_query_tokens": "num_query_tokens",
        "plugin": "view.plugin",
        "launch": "view.launch",
        "launch_command": "view.launch.shell()",
    }

    @property
    def rules(self) -> EngineRules:
        return self.view.rules

    @property
    def serves(self) -> bool:
        return self.view.serves_as_trained and self.view.launch is not None

    @property
    def ok(self) -> bool:
        return self.serves and not any(f.severity is Severity.ERROR for f in self.findings)

    @property
    def num_query_tokens(self) -> int | None:
        return self.view.num_query_tokens

    def note(self, code: str, message: str, hint: str = "", **values: Any) -> None:
        self.findings.append(
            make_finding(
                code,
                f"{self.rules.spec}: {message}",
                hint,
                keys=tuple(values.pop("keys", ())),
                values={"engine": self.rules.spec, **values},
            )
        )


@dataclass
class ServingPlan(JsonDocument):
    """One target and draft: the numbers every engine shares, and one `EnginePlan` per release."""

    request: PlanRequest = field(metadata=json_rules(omit=True))  # JSON `request`: `request_document`
    draft_request: PlanDraft
    # JSON `target`: the request's and these; None: not read (`target_unread` says why)
    target: LoadedCheckpoint | None = field(metadata=json_rules(omit=True))
    target_description: TargetDescription | None  # the target's config, read once
    report: InspectReport | None  # the draft, inspected against the target with K; None: not read
    target_name: str  # what a launch line names
    # The draft's and the plan's own.
    findings: list[Finding] = field(default_factory=list, metadata=json_rules(encode=_sorted_documents))
    target_dims: AttentionDims | None = None
    draft_dims: AttentionDims | None = None
    serving_dtype: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: Setting | None = None
    weights: tuple[WeightBytes, WeightBytes] | None = field(default=None, metadata=json_rules(encode=_weights_document))
    kv: tuple[KvLayout, ...] = ()
    tensor_parallel: TensorParallelCheck | None = None
    memory: MemoryFit | None = None
    engines: dict[str, EnginePlan] = field(default_factory=dict, metadata=json_rules(encode=_engines_document))
    target_unread: UnreadTarget | None = field(default=None, metadata=json_rules(omit=True))
    # The draft not read offline (DFT091): JSON `draft.not_read`; nothing else of it is known.
    draft_unread: UnreadDraft | None = field(default=None, metadata=json_rules(omit=True))

    json_keys: ClassVar[tuple[str, ...]] = (
        "ok",
        "request",
        "target",
        "draft",
        "geometry",
        "serving_dtype",
        "kv_cache_dtype",
        "max_model_len",
        "weights",
        "kv",
        "tensor_parallel",
        "memory",
        "engines",
        "findings",
    )
    json_properties: ClassVar[Mapping[str, Any]] = {
        "ok": "ok",
        "request": "request_document",
        "target": {
            "source": "request.target",
            "location": "target.location",
            "launch_name": "target_name",
            "model": "target_dims",
        },
        "draft": {
            "source": "draft_source",
            "location": "report.loaded.location",
            "dialect": "report.description.dialect.value",
            "algorithm": "report.description.algorithm",
            "model": "draft_dims",
        },
        "geometry": "report.geometry",
    }

    @property
    def request_document(self) -> dict[str, Any]:
        return self.request.to_dict(self.draft_request)

    @property
    def draft_source(self) -> str:
        return self.report.loaded.source if self.report is not None else self.draft_request.source

    @property
    def ok(self) -> bool:
        """No error of the draft or the plan, and every engine release asked for serves the draft
        as trained with a launch line that works: the one verdict policy of `inspect --engine` and
        `plan` (`serving.verdict`). An engine that cannot serve the draft fails the plan; the
        verdict names it, and `--engine` asks for the releases that can."""
        if any(f.severity is Severity.ERROR for f in self.findings):
            return False
        return bool(self.engines) and all(plan.ok for plan in self.engines.values())

    def to_dict(self) -> dict[str, Any]:
        # An unread target adds `not_read` to `target` (why, how to get it) and `not_checked`
        # (what the plan could not check without it) after the findings; an unread draft adds
        # `not_read` to `draft` (and what a bundled profile records of it).
        out = document(self)
        if self.target_unread is not None:
            out["target"]["not_read"] = self.target_unread.to_dict()
            out["not_checked"] = list(TARGET_CHECKS)
        if self.draft_unread is not None:
            out["draft"]["not_read"] = self.draft_unread.to_dict()
        return out


@dataclass
class LaunchPlan(JsonDocument):
    """`dflash-tools plan`'s answer: the request and one `ServingPlan` per draft."""

    request: PlanRequest  # JSON: each plan states it (`plans[].request`)
    plans: list[ServingPlan]

    json_keys: ClassVar[tuple[str, ...]] = ("schema_version", "command", "ok", "exit_code", "preset", "plans")
    json_properties: ClassVar[Mapping[str, str]] = {
        "schema_version": "schema_version",
        "command": "command",
        "ok": "ok",
        "exit_code": "exit_code",
        "preset": "request.preset",
    }
    schema_version: ClassVar[int] = SCHEMA_VERSION
    command: ClassVar[str] = "plan"

    @property
    def ok(self) -> bool:
        return all(plan.ok for plan in self.plans)

    @property
    def exit_code(self) -> int:
        """0 ok; 2 when a draft could not be read (DFT091: a source that cannot be read, as the
        error it was; the other drafts are planned all the same); else 1 (docs/plan.md)."""
        if any(plan.draft_unread is not None for plan in self.plans):
            return EXIT_USAGE
        return EXIT_OK if self.ok else EXIT_FINDINGS
