"""`dflash-tools plan`: from a target, drafts and a few serving facts, the launch lines and the checks.

    plan_launch(request)  ->  LaunchPlan  (one ServingPlan per draft)

The request is built once (`request.plan_request`: the command line, else the preset, each
value with its source); the CLI only parses, calls `plan_launch` and renders. For each draft, in
order:

1. reads the target (config.json, once, into a `TargetDescription`; safetensors headers) and the
   draft, and inspects the draft against the target with K (the pairing findings of
   `inspect --target`);
2. for each engine release asked for, applies its table (`engine_view`, as `inspect --engine`
   does) and resolves the serving settings: given (or the preset's), else the release's default
   (`EngineRules.serving_defaults`, by GPU memory), else what the checks need;
3. checks the settings against the release's serving rules (`EngineRules.serving_rules`, each name
   implemented once in `rules`), the memory (`memory`) and the tensor parallelism
   (`checks`);
4. builds each launch line with those settings (`serving.launch`), whole and copyable.

The memory numbers are vLLM's: KV sized at its default `gpu_memory_utilization` (SGLang sizes its
pool itself, `--mem-fraction-static`). Nothing here imports an engine, typer or rich.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dflash_tools.draft.target import TargetDescription, target_config, target_from_config
from dflash_tools.engine_rules import ENGINE_RULES, VLLM_V2_ENV, EngineRules, Layout
from dflash_tools.errors import SourceError, UsageError
from dflash_tools.findings import make_finding, sort_findings
from dflash_tools.inspect import inspect_loaded
from dflash_tools.plan.checks import (
    check_tensor_parallel,
    check_token_budget,
    draft_dims,
    target_dims,
)
from dflash_tools.plan.memory import GIB, check_memory, dtype_bytes, kv_layout, weight_bytes
from dflash_tools.plan.model import (
    CONFIG,
    DEFAULT,
    GIVEN,
    RAISED,
    EnginePlan,
    LaunchPlan,
    PlanDraft,
    PlanRequest,
    ServingPlan,
    Setting,
)
from dflash_tools.plan.request import check_request
from dflash_tools.plan.rules import SERVING_RULES, check_startup, pins_draft_dcp
from dflash_tools.plan.unread import (
    UnreadDraft,
    UnreadTarget,
    unread_draft,
    unread_draft_finding,
    unread_target,
    unread_target_finding,
)
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_model import DraftFacts
from dflash_tools.serving.engine_view import engine_view
from dflash_tools.serving.launch import LaunchSettings, served_model_name


def plan_launch(request: PlanRequest, *, token: str | None = None, timeout: float | None = None) -> LaunchPlan:
    """Read the target once and each draft, and plan each draft's launch. Raises SourceError when
    a source cannot be found or read, UsageError for settings that cannot work."""
    request = check_request(request)  # a request built in Python is checked as the CLI's is
    target: LoadedCheckpoint | None = None
    unread: UnreadTarget | None = None
    try:
        target = load_checkpoint(request.target, revision=request.target_revision, token=token, timeout=timeout)
    except SourceError as exc:
        # Offline or the Hub unreachable, the target not cached: plan what needs no target (DFT090).
        unread = unread_target(request.target, request.target_revision, exc)
        if unread is None:
            raise
    plans = []
    for entry in request.drafts:
        try:
            draft = load_checkpoint(entry.source, revision=entry.revision, token=token, timeout=timeout)
        except SourceError as exc:
            # Offline or the Hub unreachable, the draft not cached and no bundled config of it:
            # an entry saying so (DFT091); the other drafts are planned as they are.
            draft_unread = unread_draft(entry.source, entry.revision, exc)
            if draft_unread is None:
                raise
            plans.append(plan_unread_draft(request, entry, target, unread, draft_unread))
            continue
        if target is None:
            assert unread is not None
            plans.append(plan_without_target(request, entry, unread, draft))
        else:
            plans.append(build_plan(request, entry, target, draft))
    return LaunchPlan(request, plans)


def served_name(loaded: LoadedCheckpoint) -> str:
    """What a launch line names: the repo id of a Hub checkpoint, else its folder (resolved)."""
    if loaded.kind == "hub":
        return served_model_name(loaded.source, None)
    if loaded.local_dir is not None:
        return served_model_name(loaded.source, loaded.local_dir)
    return loaded.location


def build_plan(
    request: PlanRequest, entry: PlanDraft, target: LoadedCheckpoint, draft: LoadedCheckpoint
) -> ServingPlan:
    """The plan for an already read target and draft (see the module docstring)."""
    config = target_config(target, request.target)
    _check_parallel_sizes(request)
    description = _target_description(config, request.target, target.location)
    report = inspect_loaded(draft, target=description, num_speculative_tokens=request.num_speculative_tokens)
    plan = ServingPlan(request, entry, target, description, report, served_name(target), findings=list(report.findings))
    desc, geometry = report.description, report.geometry
    if desc is None or geometry is None:
        return plan  # the draft's own findings say why; there is nothing to serve yet

    plan.target_dims = target_dims(description, "target")
    plan.draft_dims = draft_dims(desc, "draft")
    plan.serving_dtype = serving_dtype(request.dtype, plan.target_dims.dtype)
    plan.kv_cache_dtype = plan.serving_dtype if request.kv_cache_dtype in (None, "auto") else request.kv_cache_dtype
    plan.max_model_len = _max_model_len(request, description)
    try:
        kv_bytes = dtype_bytes(plan.kv_cache_dtype)
        dtype_bytes(plan.serving_dtype)
    except ValueError as exc:
        # --dtype and --kv-cache-dtype were checked with the request: this dtype is the target config's.
        raise SourceError(
            f"target {request.target}: its config's dtype {plan.target_dims.dtype!r}: {exc}",
            "pass --dtype with one of those names to serve it in that dtype",
        ) from None

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
    check_startup(plan)
    plan.findings = sort_findings(plan.findings)
    return plan


def plan_without_target(
    request: PlanRequest, entry: PlanDraft, unread: UnreadTarget, draft: LoadedCheckpoint
) -> ServingPlan:
    """The plan of a draft whose target could not be read offline: the draft inspected alone,
    each release's outcome, K and query positions, settings, token budget and launch line (the
    target named as given); memory, parallelism, max_model_len and pairing named as not checked
    (DFT090). The settings given (or the preset's) go on the launch lines as they are."""
    _check_parallel_sizes(request)
    report = inspect_loaded(draft, num_speculative_tokens=request.num_speculative_tokens)
    name = served_model_name(request.target, None)
    plan = ServingPlan(request, entry, None, None, report, name, findings=list(report.findings), target_unread=unread)
    plan.findings.append(unread_target_finding(request.target, unread))
    desc = report.description
    if desc is not None and report.geometry is not None:
        plan.draft_dims = draft_dims(desc, "draft")
        if request.dtype not in (None, "auto"):
            plan.serving_dtype = request.dtype
        if request.kv_cache_dtype not in (None, "auto"):
            plan.kv_cache_dtype = request.kv_cache_dtype
        if request.max_model_len is not None:
            plan.max_model_len = Setting(request.max_model_len, request.source("max_model_len"))
        facts = DraftFacts.from_report(report, target=name)
        assert facts is not None  # a description implies a config
        for spec in request.engines:
            plan.engines[spec] = _engine_plan(plan, ENGINE_RULES[spec], facts)
        check_startup(plan)
    plan.findings = sort_findings(plan.findings)
    return plan


def plan_unread_draft(
    request: PlanRequest,
    entry: PlanDraft,
    target: LoadedCheckpoint | None,
    target_unread: UnreadTarget | None,
    unread: UnreadDraft,
) -> ServingPlan:
    """The entry of a draft that could not be read offline: the target as read (or not), the
    draft named as not read with what a bundled profile records of it (DFT091, an error), and
    nothing else: no engine is planned and no launch line written for a draft nothing is known of."""
    _check_parallel_sizes(request)
    if target is None:
        plan = ServingPlan(request, entry, None, None, None, served_model_name(request.target, None))
        plan.target_unread = target_unread
    else:
        description = _target_description(target_config(target, request.target), request.target, target.location)
        plan = ServingPlan(request, entry, target, description, None, served_name(target))
        plan.target_dims = target_dims(description, "target")
    plan.draft_unread = unread
    plan.findings = [unread_draft_finding(entry.source, unread)]
    return plan


def _check_parallel_sizes(request: PlanRequest) -> None:
    if request.tensor_parallel_size < 1 or request.decode_context_parallel_size < 1:
        raise UsageError("--tensor-parallel-size and --decode-context-parallel-size must be 1 or more")


def serving_dtype(given: str | None, config_dtype: str | None) -> str:
    """`--dtype`, else the config's; a float32 config is served in bfloat16, as vLLM's `auto`
    does on a GPU with bfloat16 (`_resolve_auto_dtype` in vllm/config/model.py); bfloat16 when
    the config names none."""
    if given is not None and given != "auto":
        return given
    if config_dtype is None or config_dtype.removeprefix("torch.") in ("float32", "float"):
        return "bfloat16"
    return config_dtype


def _target_description(config: dict[str, Any], source: str, location: str) -> TargetDescription:
    try:
        return target_from_config(config, source, location)
    except SourceError:
        raise
    except (TypeError, ValueError) as exc:  # a config too broken to describe a target
        raise SourceError(f"target {source}: {exc}", "pass the target model's own config.json") from None


def _max_model_len(request: PlanRequest, target: TargetDescription) -> Setting:
    if request.max_model_len is not None:
        return Setting(request.max_model_len, request.source("max_model_len"))
    value = target.max_position_embeddings  # vLLM's default (the text model's, for a multimodal target)
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
    assert target is not None  # a plan without its target checks no memory (`plan_without_target`)
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
                "the memory is not checked, although --gpu-memory was given",
                _headers_hint(
                    [(name, loaded) for name, loaded in (("target", target), ("draft", draft)) if name in missing]
                ),
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


def _headers_hint(missing: list[tuple[str, LoadedCheckpoint]]) -> str:
    """How to get the headers the memory check needs: a Hub repo's are read by range requests
    online (nothing downloaded), or from its .safetensors in the local Hub cache; a folder needs
    its .safetensors files (a `--include '*.json'` download, the offline hint, has none)."""
    steps = []
    for name, loaded in missing:
        if loaded.kind == "hub":
            repo = loaded.source.removeprefix("hf://")
            steps.append(
                f"the {name}: run the plan online (HF_HUB_OFFLINE unset: only the headers are read), or download "
                f"its weights (`hf download {repo} --include '*.safetensors'`)"
            )
        else:
            steps.append(f"the {name}: pass a folder that holds its .safetensors files")
    return "; ".join(steps)


def _larger_tensor_parallel(plan: ServingPlan, draft: LoadedCheckpoint, utilization: float, batched: int) -> str:
    """The smallest larger tensor-parallel size (up to 16) whose heads split and whose rank holds
    the weights and one request of max_model_len, said as the hint of a plan that does not fit."""
    request = plan.request
    assert plan.target is not None and plan.target_dims is not None and plan.draft_dims is not None
    assert plan.max_model_len is not None
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
    settings: dict[str, Setting] = {}
    if plan.max_model_len is not None:  # None: the target unread and none given (the engine's default)
        settings["max_model_len"] = plan.max_model_len
    if request.tensor_parallel_size > 1:
        settings["tensor_parallel_size"] = Setting(request.tensor_parallel_size, GIVEN)
    if request.decode_context_parallel_size > 1:
        settings["decode_context_parallel_size"] = Setting(request.decode_context_parallel_size, GIVEN)
    if request.dtype not in (None, "auto"):  # `auto` is every engine's default: nothing to write
        settings["dtype"] = Setting(str(request.dtype), request.source("dtype"))
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

    values = {name: setting.value for name, setting in settings.items()}
    launch = LaunchSettings.from_values({"target_revision": plan.request.target_revision, **values})
    if engine.rules.serving_rule("draft-dcp-sliding-window") is not None and pins_draft_dcp(plan, engine):
        launch = replace(launch, draft_decode_context_parallel_size=1)
    return launch


def _runner(engine: EnginePlan) -> None:
    """vLLM: which model runner serves the draft, and why the launch line selects it."""
    rules, launch = engine.rules, engine.view.launch
    if rules.engine != "vllm":
        return
    if not rules.has_v1_runner:
        engine.runner = "V2 (the only one)"
        return
    selected = launch is not None and launch.environment.get(VLLM_V2_ENV) == "1"
    if not selected:
        engine.runner = "V2, or V1 without Triton"
        return
    engine.runner = "V2 (set on the line)"
    # The releases that have no V1 runner, from the tables (a new release changes its table only).
    without_v1 = [
        other.version for other in ENGINE_RULES.values() if other.engine == "vllm" and not other.has_v1_runner
    ]
    needs_none = (
        f" ({' and '.join(without_v1)} {'has' if len(without_v1) == 1 else 'have'} no V1 runner and needs none)"
    )
    engine.note(
        "DFT085",
        f"the launch line sets {VLLM_V2_ENV}=1: this draft (DFlash2, anchor-first or mixed "
        "attention) is served only by the V2 model runner, and the release falls back to V1 where Triton is "
        "missing",
        "keep the variable on the launch line" + (needs_none if without_v1 else ""),
        keys=(VLLM_V2_ENV,),
    )
