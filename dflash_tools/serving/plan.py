"""The serving plan: from a target, a draft and a few serving facts, the launch lines and the checks.

    plan_serving(request)  ->  ServingPlan  (one draft; the CLI runs one per draft)

What it does, in order:

1. reads the target (config.json and safetensors headers) and the draft, and inspects the draft
   against the target with K (the pairing findings of `inspect --target`);
2. for each engine release asked for, applies its table (`engine_view`, as `inspect --engine`
   does) and resolves the serving settings: given on the command line, else the release's
   default (`EngineRules.serving_defaults`, by GPU memory), else what the checks need;
3. checks the settings against the release's serving rules (`EngineRules.serving_rules`, each
   name implemented once below), the memory and the tensor parallelism (`plan_checks`);
4. builds each launch line with those settings (`launch`), whole and copyable.

The memory numbers are vLLM's: KV sized at its default `gpu_memory_utilization` (SGLang sizes its
pool itself, `--mem-fraction-static`). Nothing here imports an engine, typer or rich.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dflash_tools.draft.geometry import layout_name, num_query_tokens
from dflash_tools.draft.target import TargetSpec, target_from_config
from dflash_tools.engine_rules import ENGINE_RULES, EngineRules, Layout, json_key
from dflash_tools.errors import SourceError, UsageError
from dflash_tools.findings import Finding, Severity, make_finding, sort_findings
from dflash_tools.inspect import InspectReport, inspect_loaded
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_model import DraftFacts, EngineView
from dflash_tools.serving.engine_view import engine_view
from dflash_tools.serving.launch import LaunchSettings
from dflash_tools.serving.plan_checks import (
    GIB,
    SLIDING_ATTENTION,
    AttentionDims,
    KvLayout,
    MemoryFit,
    TensorParallelCheck,
    TokenBudget,
    WeightBytes,
    check_memory,
    check_tensor_parallel,
    check_token_budget,
    draft_dims,
    dtype_bytes,
    kv_layout,
    target_dims,
    weight_bytes,
)

SCHEMA_VERSION = 1

# Where a setting's value comes from (JSON `settings.NAME.source`).
GIVEN = "given"  # on the command line
PRESET = "preset"  # the preset's engine arguments
DEFAULT = "default"  # the release's own default, written on the launch line so it is what was checked
RAISED = "raised"  # the release's default breaks a check: the launch line passes the value that holds
CONFIG = "config"  # the target's config.json (max_model_len: max_position_embeddings)


@dataclass(frozen=True)
class PlanRequest:
    """What the user asked for. None: the release's default (or the config's)."""

    target: str
    draft: str
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
    revision: str | None = None
    target_revision: str | None = None
    # The settings above that come from a preset's engine arguments, not the command line.
    from_preset: tuple[str, ...] = ()

    def source(self, setting: str) -> str:
        return PRESET if setting in self.from_preset else GIVEN

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "draft": self.draft,
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
            "revision": self.revision,
            "target_revision": self.target_revision,
            "from_preset": list(self.from_preset),
        }


@dataclass(frozen=True)
class Setting:
    """One resolved serving setting and where its value comes from."""

    value: int | float | str
    source: str  # GIVEN, PRESET, DEFAULT, RAISED, CONFIG
    note: str = ""  # for a default: which of the release's defaults (its table's note)

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "note": self.note}


@dataclass
class EnginePlan:
    """One engine release: how it serves the draft, with which settings, and its launch line."""

    view: EngineView
    settings: dict[str, Setting] = field(default_factory=dict)
    token_budget: TokenBudget | None = None
    runner: str | None = None  # vLLM: which model runner serves the draft
    findings: list[Finding] = field(default_factory=list)

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
        view = self.view
        if view.draft_tokens is None or view.layout is None:
            return None
        return num_query_tokens(view.draft_tokens, view.layout is Layout.ANCHOR_FIRST)

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

    def to_dict(self) -> dict[str, Any]:
        view = self.view
        launch = view.launch
        return {
            "engine": self.rules.engine,
            "version": self.rules.version,
            "serves": self.serves,
            "ok": self.ok,
            "outcome": view.outcome.value,
            "refusal": view.refusal,
            "path": view.path,
            "layout": view.layout.value if view.layout is not None else None,
            "num_speculative_tokens": view.draft_tokens,
            "num_query_tokens": self.num_query_tokens,
            "plugin": view.plugin,
            "runner": self.runner,
            "settings": {name: setting.to_dict() for name, setting in self.settings.items()},
            "token_budget": self.token_budget.to_dict() if self.token_budget is not None else None,
            "launch": launch.to_dict() if launch is not None else None,
            "launch_command": launch.shell() if launch is not None else None,
            "findings": [f.to_dict() for f in sort_findings(self.findings)],
        }


@dataclass
class ServingPlan:
    """One target and draft: the numbers every engine shares, and one `EnginePlan` per release."""

    request: PlanRequest
    target: LoadedCheckpoint
    report: InspectReport  # the draft, inspected against the target with K
    target_name: str  # what a launch line names
    findings: list[Finding] = field(default_factory=list)  # the draft's and the plan's own
    target_dims: AttentionDims | None = None
    draft_dims: AttentionDims | None = None
    serving_dtype: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: Setting | None = None
    weights: tuple[WeightBytes, WeightBytes] | None = None
    kv: tuple[KvLayout, ...] = ()
    tensor_parallel: TensorParallelCheck | None = None
    memory: MemoryFit | None = None
    engines: dict[str, EnginePlan] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No error of the draft or the plan, every launch line printed would work, and at least
        one engine serves the draft as trained. An engine that cannot serve it prints no line:
        it fails the plan only when no engine can."""
        if any(f.severity is Severity.ERROR for f in self.findings):
            return False
        serving = [plan for plan in self.engines.values() if plan.serves]
        return bool(serving) and all(plan.ok for plan in serving)

    def all_findings(self) -> list[Finding]:
        return [*self.findings, *(f for plan in self.engines.values() for f in plan.findings)]

    def to_dict(self) -> dict[str, Any]:
        report, geometry, desc = self.report, self.report.geometry, self.report.description
        weights = self.weights
        return {
            "ok": self.ok,
            "request": self.request.to_dict(),
            "target": {
                "source": self.request.target,
                "location": self.target.location,
                "launch_name": self.target_name,
                "model": self.target_dims.to_dict() if self.target_dims is not None else None,
            },
            "draft": {
                "source": report.loaded.source,
                "location": report.loaded.location,
                "dialect": desc.dialect.value if desc is not None else None,
                "algorithm": desc.algorithm.value if desc is not None else None,
                "model": self.draft_dims.to_dict() if self.draft_dims is not None else None,
            },
            "geometry": geometry.to_dict() if geometry is not None else None,
            "serving_dtype": self.serving_dtype,
            "kv_cache_dtype": self.kv_cache_dtype,
            "max_model_len": self.max_model_len.to_dict() if self.max_model_len is not None else None,
            "weights": {"target": weights[0].to_dict(), "draft": weights[1].to_dict()} if weights else None,
            "kv": [layout.to_dict() for layout in self.kv],
            "tensor_parallel": self.tensor_parallel.to_dict() if self.tensor_parallel is not None else None,
            "memory": self.memory.to_dict() if self.memory is not None else None,
            "engines": {json_key(plan.rules): plan.to_dict() for plan in self.engines.values()},
            "findings": [f.to_dict() for f in sort_findings(self.findings)],
        }


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def plan_serving(request: PlanRequest, *, token: str | None = None, timeout: float | None = None) -> ServingPlan:
    """Read the target and the draft, then `build_plan`. Raises SourceError when either cannot be
    found, or the target has no config."""
    target = load_checkpoint(request.target, revision=request.target_revision, token=token, timeout=timeout)
    draft = load_checkpoint(request.draft, revision=request.revision, token=token, timeout=timeout)
    return build_plan(request, target, draft)


def served_name(loaded: LoadedCheckpoint) -> str:
    """What a launch line names: the repo id of a Hub checkpoint, else its folder (resolved)."""
    if loaded.kind == "hub":
        return loaded.source.removeprefix("hf://")
    if loaded.local_dir is not None:
        return str(loaded.local_dir.resolve())
    return loaded.location


def max_position_embeddings(config: Mapping[str, Any]) -> int | None:
    """The context vLLM defaults max_model_len to (the text model's, for a multimodal target)."""
    text = config.get("text_config")
    for holder in (text if isinstance(text, Mapping) else {}, config):
        value = holder.get("max_position_embeddings")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


def build_plan(request: PlanRequest, target: LoadedCheckpoint, draft: LoadedCheckpoint) -> ServingPlan:
    """The plan for an already read target and draft (see the module docstring)."""
    config = target.config
    if config is None:
        raise SourceError(
            f"target {request.target}: no readable config.json ({target.location})",
            "pass the target model's folder or Hub repo id",
        )
    if request.tensor_parallel_size < 1 or request.decode_context_parallel_size < 1:
        raise UsageError("--tensor-parallel-size and --decode-context-parallel-size must be 1 or more")
    target_spec = _target_spec(config, request.target, target.location)
    report = inspect_loaded(draft, target=target_spec, num_speculative_tokens=request.num_speculative_tokens)
    plan = ServingPlan(request, target, report, served_name(target), findings=list(report.findings))
    desc, geometry = report.description, report.geometry
    if desc is None or geometry is None:
        return plan  # the draft's own findings say why; there is nothing to serve yet

    plan.target_dims = target_dims(config, "target", request.target)
    plan.draft_dims = draft_dims(desc, "draft")
    plan.serving_dtype = serving_dtype(request.dtype, plan.target_dims.dtype)
    plan.kv_cache_dtype = plan.serving_dtype if request.kv_cache_dtype in (None, "auto") else request.kv_cache_dtype
    plan.max_model_len = _max_model_len(request, config)
    try:
        kv_bytes = dtype_bytes(plan.kv_cache_dtype)
        dtype_bytes(plan.serving_dtype)
    except ValueError as exc:
        raise UsageError(str(exc), "pass --dtype / --kv-cache-dtype with one of those names") from None

    tp = request.tensor_parallel_size
    plan.tensor_parallel = check_tensor_parallel(plan.target_dims, plan.draft_dims, tp)
    for problem in plan.tensor_parallel.problems:
        plan.findings.append(
            make_finding(
                "DFT083",
                problem.message,
                "choose a --tensor-parallel-size that divides the heads (and the KV heads, or that they divide)",
                keys=(problem.key,),
                values={"model": problem.model, "tensor_parallel_size": tp},
            )
        )
    draft_tp = plan.tensor_parallel.draft_tensor_parallel_size
    plan.kv = (
        kv_layout(plan.target_dims, kv_bytes, tp),
        kv_layout(plan.draft_dims, kv_bytes, draft_tp),
    )

    facts = DraftFacts.from_report(report, target=plan.target_name)
    assert facts is not None  # a description implies a config
    for spec in request.engines:
        plan.engines[spec] = _engine_plan(plan, ENGINE_RULES[spec], facts)

    _memory(plan, draft)
    plan.findings = sort_findings(plan.findings)
    return plan


def serving_dtype(given: str | None, config_dtype: str | None) -> str:
    """`--dtype`, else the config's; a float32 config is served in bfloat16, as vLLM's `auto`
    does on a GPU with bfloat16 (`_resolve_auto_dtype` in vllm/config/model.py); bfloat16 when
    the config names none."""
    if given is not None and given != "auto":
        return given
    if config_dtype is None or config_dtype.removeprefix("torch.") in ("float32", "float"):
        return "bfloat16"
    return config_dtype


def _target_spec(config: dict[str, Any], source: str, location: str) -> TargetSpec:
    try:
        return target_from_config(config, source, location)
    except SourceError:
        raise
    except (TypeError, ValueError) as exc:  # a config too broken to describe a target
        raise SourceError(f"target {source}: {exc}", "pass the target model's own config.json") from None


def _max_model_len(request: PlanRequest, config: Mapping[str, Any]) -> Setting:
    if request.max_model_len is not None:
        return Setting(request.max_model_len, request.source("max_model_len"))
    value = max_position_embeddings(config)
    if value is None:
        raise UsageError(
            f"target {request.target}: its config has no max_position_embeddings to default max_model_len to",
            "pass --max-model-len",
        )
    return Setting(value, CONFIG, "the target's max_position_embeddings (vLLM's default)")


def _vllm_reference(plan: ServingPlan) -> EngineRules:
    """The vLLM release whose defaults size the memory check: the newest one asked for, else the
    newest the tool has a table for (the checks need a utilization even for an SGLang-only plan)."""
    asked = [plan.engines[spec].rules for spec in plan.engines if plan.engines[spec].rules.engine == "vllm"]
    if asked:
        return asked[-1]
    return [rules for rules in ENGINE_RULES.values() if rules.engine == "vllm"][-1]


def _memory(plan: ServingPlan, draft: LoadedCheckpoint) -> None:
    request, target = plan.request, plan.target
    assert plan.serving_dtype is not None and plan.tensor_parallel is not None and plan.max_model_len is not None
    tp, draft_tp = request.tensor_parallel_size, plan.tensor_parallel.draft_tensor_parallel_size
    plan.weights = (
        weight_bytes(target.tensors, tp, plan.serving_dtype),
        weight_bytes(draft.tensors, draft_tp, plan.serving_dtype),
    )
    uncounted = {kind: count for layout in plan.kv for kind, count in layout.uncounted_layers.items()}
    if uncounted:
        kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(uncounted.items()))
        plan.findings.append(
            make_finding(
                "DFT087",
                f"layers that keep a fixed state per request instead of KV per token are not counted: {kinds}",
                "leave room for that state: vLLM sizes it at start-up",
                keys=("layer_types",),
                values={"uncounted_layers": uncounted},
            )
        )
    if request.gpu_memory_gib is None:
        return
    missing = [name for name, loaded in (("target", target), ("draft", draft)) if not loaded.tensors]
    if missing:
        plan.findings.append(
            make_finding(
                "DFT087",
                f"no safetensors headers for the {' and the '.join(missing)} here: the weights are unknown and "
                "the memory is not checked",
                "pass a folder or a Hub repo whose safetensors can be read (online, or in the local Hub cache)",
                values={"without_weights": missing},
            )
        )
        return
    reference = _vllm_reference(plan)
    utilization = request.gpu_memory_utilization
    if utilization is None:
        default = reference.serving_default("gpu_memory_utilization")
        assert default is not None, f"{reference.spec} has no gpu_memory_utilization default"
        utilization = float(default.value)
    batched = next(
        (
            int(engine.settings["max_num_batched_tokens"].value)
            for engine in plan.engines.values()
            if "max_num_batched_tokens" in engine.settings
        ),
        request.max_num_batched_tokens or 0,
    )
    plan.memory = check_memory(
        gpu_memory_bytes=int(request.gpu_memory_gib * GIB),
        weights=list(plan.weights),
        layouts=list(plan.kv),
        max_model_len=int(plan.max_model_len.value),
        gpu_memory_utilization=utilization,
        in_flight_tokens=batched,
    )
    if not plan.memory.fits:
        fit = plan.memory
        plan.findings.append(
            make_finding(
                "DFT082",
                fit.message,
                _larger_tensor_parallel(plan, draft, utilization, batched),
                keys=("gpu_memory", "max_model_len"),
                values={
                    "usable_bytes": fit.usable_bytes,
                    "weights_bytes": fit.weights_bytes,
                    "kv_budget_bytes": fit.kv_budget_bytes,
                    "sequence_bytes": fit.sequence_bytes,
                },
            )
        )


def _larger_tensor_parallel(plan: ServingPlan, draft: LoadedCheckpoint, utilization: float, batched: int) -> str:
    """The smallest larger tensor-parallel size (up to 16) whose heads split and whose rank holds
    the weights and one request of max_model_len, said as the hint of a plan that does not fit."""
    request = plan.request
    assert plan.target_dims is not None and plan.draft_dims is not None and plan.max_model_len is not None
    assert plan.serving_dtype is not None and plan.kv_cache_dtype is not None and request.gpu_memory_gib is not None
    for size in (2, 4, 8, 16):
        if size <= request.tensor_parallel_size:
            continue
        split = check_tensor_parallel(plan.target_dims, plan.draft_dims, size)
        if not split.ok:
            continue
        kv_bytes = dtype_bytes(plan.kv_cache_dtype)
        fit = check_memory(
            gpu_memory_bytes=int(request.gpu_memory_gib * GIB),
            weights=[
                weight_bytes(plan.target.tensors, size, plan.serving_dtype),
                weight_bytes(draft.tensors, split.draft_tensor_parallel_size, plan.serving_dtype),
            ],
            layouts=[
                kv_layout(plan.target_dims, kv_bytes, size),
                kv_layout(plan.draft_dims, kv_bytes, split.draft_tensor_parallel_size),
            ],
            max_model_len=int(plan.max_model_len.value),
            gpu_memory_utilization=utilization,
            in_flight_tokens=batched,
        )
        if fit.fits:
            return (
                f"--tensor-parallel-size {size} fits: {fit.weights_bytes / GIB:.2f} GiB of weights per rank, "
                f"{fit.kv_tokens:,} tokens of KV; or a shorter --max-model-len, a smaller --dtype or "
                "--kv-cache-dtype, a larger GPU"
            )
    return "no tensor-parallel size up to 16 fits on this GPU: a smaller --dtype or --kv-cache-dtype, or a larger GPU"


# --------------------------------------------------------------------------------------------
# One engine release
# --------------------------------------------------------------------------------------------


def _engine_plan(plan: ServingPlan, rules: EngineRules, facts: DraftFacts) -> EnginePlan:
    """The view without settings first (what the engine serves: K, the layout), then the settings
    that view needs, then the view again with them on its launch line."""
    bare = EnginePlan(engine_view(rules, facts))
    settings = _settings(plan, bare)
    launch_settings = _launch_settings(plan, bare, settings)
    engine = EnginePlan(engine_view(rules, facts, settings=launch_settings))
    engine.settings = settings
    engine.findings = list(engine.view.findings) + bare.findings
    engine.token_budget = bare.token_budget
    for rule in rules.serving_rules:
        SERVING_RULES[rule.name](plan, engine)
    _runner(engine)
    if rules.engine == "sglang" and plan.request.max_num_seqs is None:
        default = rules.serving_default("max_running_requests", path=engine.view.path)
        if default is not None and engine.serves:
            engine.note(
                "DFT086",
                f"it runs at most {default.value} requests at once with {engine.view.path} unless the launch "
                "line passes --max-running-requests (vLLM's default is larger)",
                "pass --max-num-seqs N to the plan to put the same limit on every launch line",
                keys=("max_running_requests",),
                max_running_requests=default.value,
            )
    return engine


def _settings(plan: ServingPlan, engine: EnginePlan) -> dict[str, Setting]:
    """The settings written on the release's launch line, each with where it comes from."""
    request, rules = plan.request, engine.rules
    assert plan.max_model_len is not None
    settings: dict[str, Setting] = {"max_model_len": plan.max_model_len}
    if request.tensor_parallel_size > 1:
        settings["tensor_parallel_size"] = Setting(request.tensor_parallel_size, GIVEN)
    if request.decode_context_parallel_size > 1:
        settings["decode_context_parallel_size"] = Setting(request.decode_context_parallel_size, GIVEN)
    if request.dtype is not None:
        settings["dtype"] = Setting(request.dtype, request.source("dtype"))
    if request.kv_cache_dtype not in (None, "auto"):
        settings["kv_cache_dtype"] = Setting(str(request.kv_cache_dtype), request.source("kv_cache_dtype"))
    if request.gpu_memory_utilization is not None and rules.flag("gpu-memory-utilization") is not None:
        utilization = request.gpu_memory_utilization
        settings["gpu_memory_utilization"] = Setting(utilization, request.source("gpu_memory_utilization"))
    if rules.engine == "sglang":
        if request.max_num_seqs is not None:
            settings["max_num_seqs"] = Setting(request.max_num_seqs, request.source("max_num_seqs"))
        return settings
    memory = request.gpu_memory_gib
    settings["max_num_seqs"] = _given_or_default(request, rules, "max_num_seqs", request.max_num_seqs, memory)
    batched = _given_or_default(request, rules, "max_num_batched_tokens", request.max_num_batched_tokens, memory)
    queries = engine.num_query_tokens
    if queries is not None and engine.view.draft_tokens is not None:
        layout_first = engine.view.layout is Layout.ANCHOR_FIRST
        sequences = int(settings["max_num_seqs"].value)
        budget = check_token_budget(sequences, engine.view.draft_tokens, layout_first, int(batched.value))
        if not budget.ok and batched.source == DEFAULT:
            # The release's default would cap the draft pass: write the value that holds instead.
            engine.note(
                "DFT081",
                f"its default max_num_batched_tokens {batched.value} ({batched.note}) is below max_num_seqs "
                f"{sequences} x {queries} query positions = {budget.required}: the launch line passes "
                f"--max-num-batched-tokens {budget.required}",
                "keep --max-num-batched-tokens on the launch line",
                keys=("max_num_batched_tokens",),
                default=batched.value,
                required=budget.required,
            )
            batched = Setting(budget.required, RAISED, batched.note)
            budget = check_token_budget(sequences, engine.view.draft_tokens, layout_first, budget.required)
        engine.token_budget = budget
    settings["max_num_batched_tokens"] = batched
    return settings


def _given_or_default(
    request: PlanRequest, rules: EngineRules, setting: str, given: int | None, memory: float | None
) -> Setting:
    if given is not None:
        return Setting(given, request.source(setting))
    default = rules.serving_default(setting, memory)
    assert default is not None, f"{rules.spec} has no default for {setting}"
    where = f"on {memory:g} GiB" if memory is not None else "without --gpu-memory"
    return Setting(default.value, DEFAULT, f"{rules.spec}'s default {where}: {default.note}")


def _launch_settings(plan: ServingPlan, engine: EnginePlan, settings: dict[str, Setting]) -> LaunchSettings:
    """The resolved settings as the launch line writes them, plus what a release's serving rules
    add to the line itself (the draft's DCP)."""

    def number(name: str) -> int | None:
        setting = settings.get(name)
        return int(setting.value) if setting is not None else None

    def text(name: str) -> str | None:
        setting = settings.get(name)
        return str(setting.value) if setting is not None else None

    utilization = settings.get("gpu_memory_utilization")
    launch = LaunchSettings(
        target_revision=plan.request.target_revision,
        max_model_len=number("max_model_len"),
        max_num_seqs=number("max_num_seqs"),
        max_num_batched_tokens=number("max_num_batched_tokens"),
        tensor_parallel_size=number("tensor_parallel_size"),
        decode_context_parallel_size=number("decode_context_parallel_size"),
        dtype=text("dtype"),
        kv_cache_dtype=text("kv_cache_dtype"),
        gpu_memory_utilization=float(utilization.value) if utilization is not None else None,
    )
    if engine.rules.serving_rule("draft-dcp-sliding-window") is not None and _pins_draft_dcp(plan, engine):
        launch = replace(launch, draft_decode_context_parallel_size=1)
    return launch


def _pins_draft_dcp(plan: ServingPlan, engine: EnginePlan) -> bool:
    draft = plan.draft_dims
    sliding = draft is not None and SLIDING_ATTENTION in draft.layer_types
    return plan.request.decode_context_parallel_size > 1 and sliding and engine.rules.flag("draft-dcp") is not None


def _runner(engine: EnginePlan) -> None:
    """vLLM: which model runner serves the draft, and why the launch line selects it."""
    rules, launch = engine.rules, engine.view.launch
    if rules.engine != "vllm":
        return
    if not rules.has_v1_runner:
        engine.runner = "V2 (the only one)"
        return
    selected = launch is not None and launch.environment.get("VLLM_USE_V2_MODEL_RUNNER") == "1"
    if not selected:
        engine.runner = "V2, or V1 without Triton"
        return
    engine.runner = "V2 (set on the line)"
    engine.note(
        "DFT085",
        "the launch line sets VLLM_USE_V2_MODEL_RUNNER=1: this draft (DFlash2, anchor-first or mixed "
        "attention) is served only by the V2 model runner, and the release falls back to V1 where Triton is "
        "missing",
        "keep the variable on the launch line (0.34.0 has no V1 runner and needs none)",
        keys=("VLLM_USE_V2_MODEL_RUNNER",),
    )


# --------------------------------------------------------------------------------------------
# The serving rules of the tables, one function per `ServingRule.name`
# --------------------------------------------------------------------------------------------


def _draft_pass_budget(plan: ServingPlan, engine: EnginePlan) -> None:
    budget = engine.token_budget
    if budget is None or budget.ok:
        return
    rule = engine.rules.serving_rule("draft-pass-budget")
    assert rule is not None and budget.max_num_batched_tokens is not None
    queries, batched = budget.num_query_tokens, budget.max_num_batched_tokens
    capped = batched // queries
    layout = layout_name(budget.sample_from_anchor)
    engine.note(
        "DFT080",
        f"max_num_batched_tokens {batched} < max_num_seqs {budget.max_num_seqs} × {queries} query positions "
        f"({layout}, K = {budget.num_speculative_tokens}) = {budget.required}: it runs at most {capped} requests "
        f"at once instead of {budget.max_num_seqs} (it lowers max_num_active_seqs to {capped})",
        f"pass --max-num-batched-tokens {budget.required}, or --max-num-seqs {capped}",
        keys=("max_num_batched_tokens", "max_num_seqs"),
        required=budget.required,
        max_num_active_seqs=capped,
        rule=rule.cite,
    )


def _dcp_divides_tp(plan: ServingPlan, engine: EnginePlan) -> None:
    tp, dcp = plan.request.tensor_parallel_size, plan.request.decode_context_parallel_size
    if dcp > 1 and tp % dcp:
        engine.note(
            "DFT083",
            f"tensor_parallel_size {tp} is not a multiple of decode_context_parallel_size {dcp}: refused at start-up",
            "choose a --decode-context-parallel-size that divides --tensor-parallel-size",
            keys=("decode_context_parallel_size",),
        )


def _dcp_gqa_target(plan: ServingPlan, engine: EnginePlan) -> None:
    tp, dcp, dims = plan.request.tensor_parallel_size, plan.request.decode_context_parallel_size, plan.target_dims
    config = plan.target.config or {}
    text = config.get("text_config")
    mla = "kv_lora_rank" in (text if isinstance(text, Mapping) else config)
    if dcp == 1 or dims is None or mla:
        return
    kv, heads = dims.num_key_value_heads, dims.num_attention_heads
    problem = None
    if tp <= kv:
        problem = f"tensor_parallel_size {tp} is not above the target's {kv} KV heads"
    elif dcp > tp // kv:
        problem = f"decode_context_parallel_size {dcp} exceeds tensor_parallel_size // KV heads = {tp // kv}"
    elif (heads // kv) % dcp:
        problem = f"the target's {heads // kv} query heads per KV head do not divide by {dcp}"
    if problem is not None:
        engine.note(
            "DFT083",
            f"decode context parallelism with a GQA target: {problem}; refused at start-up",
            "raise --tensor-parallel-size or lower --decode-context-parallel-size (1 turns it off)",
            keys=("decode_context_parallel_size", "tensor_parallel_size"),
        )


def _draft_dcp_sliding_window(plan: ServingPlan, engine: EnginePlan) -> None:
    if not _pins_draft_dcp(plan, engine):
        return
    assert plan.draft_dims is not None
    sliding = sum(1 for kind in plan.draft_dims.layer_types if kind == SLIDING_ATTENTION)
    engine.note(
        "DFT084",
        f"the draft has {sliding} sliding-window layers, which cannot run at decode_context_parallel_size "
        f"{plan.request.decode_context_parallel_size}: the launch line pins the draft's "
        "draft_decode_context_parallel_size to 1",
        "keep draft_decode_context_parallel_size 1 in --speculative-config",
        keys=("draft_decode_context_parallel_size",),
    )


SERVING_RULES: dict[str, Callable[[ServingPlan, EnginePlan], None]] = {
    "draft-pass-budget": _draft_pass_budget,
    "dcp-divides-tp": _dcp_divides_tp,
    "dcp-gqa-target": _dcp_gqa_target,
    "draft-dcp-sliding-window": _draft_dcp_sliding_window,
}
