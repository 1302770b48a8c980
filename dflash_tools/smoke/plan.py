"""Resolve drafts, target, K, layout, runner and environment into a launch plan (no GPU, no vLLM).

For each draft: preflight (the `inspect` checks with the target and K; K defaults to the draft's
trained K), then the decisions docs/smoke-test.md describes:

- the layout served (the declared one; `--compare-layouts` adds the flipped one) and its query
  count Q: K anchor-first, K + 1 bonus-anchor;
- what the installed vLLM release needs to run the draft in that layout, as `inspect --engine`
  and `plan` say it (`serving.vllm_runtime`, from the release's table): the speculative method
  with an explicit K; the runner (V2 pinned where the release still ships V1 and the draft needs
  V2, because V1 either refuses it or serves it silently wrong); the config values vLLM must see
  that the file does not state where vLLM reads them (`draft_config_overrides`, served from an
  overlay folder, the checkpoint untouched);
- how anchor-first DFlash is served (`serving.plugin_state`): natively (the upstream change is
  in this vLLM), through the dflash-tools plugin (the releases it patches), or not at all
  (DFT041, refused);
- the compile-cache key: layout and K go into `additional_config`, which vLLM hashes;
- a K sweep (`-k 3,5,7`): one run per K in the declared layout, preflight at the trained K, and
  a K the geometry rules refuse skipped with their reason (DFlash2 serves only its trained K);
- with vLLM, the prefix-caching check on one run per draft (the declared run; a sweep's largest K).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dflash_tools import smoke_contract as contract
from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.draft.description import Algorithm, DraftDescription
from dflash_tools.draft.geometry import Geometry, layout_name, num_query_tokens, resolve_geometry
from dflash_tools.draft.target import TargetDescription
from dflash_tools.errors import DflashToolsError, SourceError, UsageError
from dflash_tools.findings import Finding, Severity, has_errors, sort_findings
from dflash_tools.inspect import InspectReport, inspect_loaded
from dflash_tools.plan.presets import SANITY_FLOOR, DraftEntry, Floor
from dflash_tools.plan.unread import (
    UnreadDraft,
    UnreadTarget,
    unread_draft,
    unread_draft_finding,
    unread_target_finding,
)
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.vllm_capability import VllmCapability
from dflash_tools.serving.vllm_runtime import VllmRuntime
from dflash_tools.smoke.options import Runtime, SmokeOptions
from dflash_tools.smoke.run_plan import Runner, RunPlan, Serving
from dflash_tools.smoke.vllm_plan import (
    V2_ENV,
    engine_env,
    layout_unavailable,
    runtime_for,
    serving_of,
    unavailable_reason,
    vllm_findings,
)

ADDITIONAL_CONFIG_KEY = "dflash_tools"


@dataclass
class DraftPlan(JsonDocument):
    source: str = field(metadata=json_rules(name="draft"))
    label: str
    findings: list[Finding]  # JSON: `preflight.findings`
    report: InspectReport | None = None
    entry: DraftEntry | None = None
    floor: Floor = SANITY_FLOOR
    runs: list[RunPlan] = field(default_factory=list)
    refusal: str | None = field(default=None, metadata=json_rules(omit=True))  # JSON: `refusal_document`
    refusal_kind: str | None = None  # "preflight" | "setup"
    notes: list[str] = field(default_factory=list)
    forced: bool = False
    # A sweep of a DFlash2 draft: why only its trained K can be served.
    single_k_only: str | None = None
    # The draft could not be read at all (no such source, the Hub unreachable): {message, hint}.
    read_error: dict[str, str] | None = None
    # ... only because the Hub could not be asked and nothing bundles its config (DFT091): why,
    # how to get it read, and what a bundled profile records of it.
    not_read: UnreadDraft | None = field(default=None, metadata=json_rules(omit_none=True))

    json_keys: ClassVar[tuple[str, ...]] = (
        "draft",
        "label",
        "dialect",
        "algorithm",
        "geometry",
        "preflight",
        "runnable",
        "refusal",
        "not_read",
        "floor",
        "expect",
        "references",
        "notes",
        "runs",
    )
    json_properties: ClassVar[Mapping[str, Any]] = {
        "dialect": "report.description.dialect.value",
        "algorithm": "report.description.algorithm",
        "geometry": "report.geometry",
        "preflight": {"ok": "preflight_ok", "error": "read_error", "findings": "findings", "forced": "forced"},
        "runnable": "runnable",
        "refusal": "refusal_document",
        "expect": "expect",
        "references": "references",
    }

    @property
    def preflight_ok(self) -> bool:
        return not has_errors(self.findings) and self.read_error is None

    @property
    def refusal_document(self) -> dict[str, str | None] | None:
        return {"kind": self.refusal_kind, "message": self.refusal} if self.refusal else None

    @property
    def expect(self) -> dict[str, Any]:
        """What the preset's entry expects of the run ({} without one)."""
        return dict(self.entry.expect) if self.entry else {}

    @property
    def references(self) -> list[dict[str, Any]]:
        return list(self.entry.references) if self.entry else []

    @property
    def runnable(self) -> bool:
        return self.refusal is None

    @property
    def declared_run(self) -> RunPlan | None:
        return next((run for run in self.runs if run.layout_role == "declared"), None)

    @property
    def sweep(self) -> bool:
        return any(run.sweep for run in self.runs)


@dataclass
class SmokePlan:
    engine: Runtime
    target: str | None
    target_spec: TargetDescription | None
    capability: VllmCapability | None
    drafts: list[DraftPlan]
    options: SmokeOptions
    target_unread: UnreadTarget | None = None  # a dry run whose target could not be read offline

    def runs(self) -> list[tuple[DraftPlan, RunPlan]]:
        return [
            (draft, run) for draft in self.drafts if draft.runnable for run in draft.runs if run.skip_reason is None
        ]


def slugify(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:80] or "draft"


def _served_path(report: InspectReport, source: str) -> str:
    loaded = report.loaded
    if loaded.kind == "hub":
        return source.removeprefix("hf://")
    if loaded.local_dir is not None:
        return str(Path(loaded.local_dir).resolve())
    return str(Path(source).expanduser().resolve())


def _target_for_engine(target: str | None) -> str:
    if target is None:
        return ""
    from dflash_tools.reading.local import examples_dir
    from dflash_tools.reading.source import EXAMPLE_PREFIX

    if target.startswith(EXAMPLE_PREFIX):
        return str((examples_dir() / target[len(EXAMPLE_PREFIX) :]).resolve())
    path = Path(target).expanduser()
    if path.exists():
        return str((path if path.is_dir() else path.parent).resolve())
    return target.removeprefix("hf://")


# On a CPU both engines compute in float32 unless told otherwise: the cross-check with the
# reference engine then compares like with like (vLLM's CPU default would be bfloat16).
CPU_DTYPE = "float32"


# vLLM's CPU build reserves gpu_memory_utilization (0.92) of the machine's memory unless the KV
# cache size is given, and compiles with inductor unless eager: on a laptop or a 2-core CI machine
# the first fails and the second costs minutes. Its KV blocks are 128 tokens (vllm/platforms/cpu.py),
# and a draft that reads the target's hidden states gives up the last matched block of a cached
# prefix (`replay_boundaries` in vllm/v1/core/kv_cache_coordinator.py), so a prompt needs two full
# blocks before a later request reuses any: with the bundled prompts (about 150 tokens) the
# prefix-caching check would exercise nothing; at 32 tokens (the CPU backend's preferred multiple)
# it does. All stay overridable with --engine-arg.
CPU_ENGINE_ARGS: dict[str, Any] = {
    "kv_cache_memory_bytes": 512 * 1024 * 1024,
    "enforce_eager": True,
    "block_size": 32,
}


def _on_cpu(device: str | None) -> bool:
    return (device or "").startswith("cpu")


def _request(
    *,
    options: SmokeOptions,
    engine: Runtime,
    report: InspectReport,
    source: str,
    label: str,
    revision: str | None,
    k: int,
    sample_from_anchor: bool,
    runtime: VllmRuntime | None,
    serving: Serving,
    env: dict[str, str],
) -> contract.SmokeRequest:
    desc = report.description
    geometry = report.geometry
    assert desc is not None and geometry is not None
    served = _served_path(report, source)
    hub = report.loaded.kind == "hub"
    queries = num_query_tokens(k, sample_from_anchor)
    request: contract.SmokeRequest = {
        "schema_version": contract.SCHEMA_VERSION,
        "engine": engine.value,
        "target": _target_for_engine(options.target),
        "draft": served,
        "algorithm": desc.algorithm.value,
        "num_speculative_tokens": k,
        "block_size": geometry.block_size,
        "sample_from_anchor": sample_from_anchor,
        "num_query_tokens": queries,
        "prompts": list(options.prompts),
        "prompt_token_ids": [list(ids) for ids in options.prompt_token_ids] if options.prompt_token_ids else None,
        "max_tokens": options.max_tokens,
        "baseline": False,
        "seed": options.seed,
        "dtype": options.dtype or (CPU_DTYPE if _on_cpu(options.device) else None),
        "device": options.device,
        "engine_args": dict(options.engine_args),
        "env": dict(env),
        "revision": revision if hub else None,
        "chat": options.chat,
        "enable_thinking": options.enable_thinking,
        "label": label,
        "target_revision": options.target_revision,
        # Repetitions stop starting once they have used half the run's wall clock, so that the
        # baseline and the rest of the run still fit in --run-timeout.
        "timing": {**options.timing(), "budget_s": options.run_timeout / 2},
    }
    template = {k: v for k, v in options.resolved_protocol().chat_template_kwargs.items() if k != "enable_thinking"}
    if options.chat and template:
        request["chat_template_kwargs"] = template
    if runtime is not None:
        speculative: dict[str, Any] = {"method": runtime.method, "model": served, "num_speculative_tokens": k}
        if hub and revision:
            speculative["revision"] = revision
        engine_args = dict(options.engine_args)
        if _on_cpu(options.device):
            for key, value in CPU_ENGINE_ARGS.items():
                engine_args.setdefault(key, value)
        additional = dict(engine_args.get("additional_config") or {})
        # vLLM hashes additional_config into the compile-cache key; the layout and K must be in it
        # so a graph compiled for one layout is never reused for the other (`compute_hash` in
        # vllm/config/vllm.py).
        additional[ADDITIONAL_CONFIG_KEY] = {
            "layout": layout_name(sample_from_anchor),
            "num_speculative_tokens": k,
            "num_query_tokens": queries,
        }
        engine_args["additional_config"] = additional
        request["engine_args"] = engine_args
        request["speculative_config"] = speculative
        request["draft_config_overrides"] = dict(runtime.config_overrides)
        request["plugin_required"] = serving is Serving.PLUGIN
    return contract.validate_request(request)


def plan_draft(
    index: int,
    entry: DraftEntry,
    options: SmokeOptions,
    engine: Runtime,
    target_spec: TargetDescription | None,
    capability: VllmCapability | None,
) -> DraftPlan:
    source = entry.draft
    label = entry.label or source
    revision = entry.revision or options.revision
    floor = options.floor or entry.floor or SANITY_FLOOR
    try:
        loaded = load_checkpoint(source, revision=revision, token=options.token, timeout=options.hub_timeout)
    except DflashToolsError as exc:
        # Nothing of the draft was read: the preflight failed (not "ok, no findings"). Offline
        # with nothing bundled of it, DFT091 says why and what a bundled profile records.
        unread = unread_draft(source, revision, exc)
        return DraftPlan(
            source,
            label,
            [] if unread is None else [unread_draft_finding(source, unread)],
            entry=entry,
            floor=floor,
            refusal=exc.message if unread is None else f"not read (DFT091): {unread.reason}",
            refusal_kind="setup",
            read_error={"kind": exc.kind, "message": exc.message, "hint": exc.hint},
            not_read=unread,
        )
    # A sweep's preflight is at the trained K; each K's own geometry findings go with its run.
    preflight_k = None if options.sweep else options.num_speculative_tokens
    report = inspect_loaded(loaded, target=target_spec, num_speculative_tokens=preflight_k)
    plan = DraftPlan(source, label, list(report.findings), report=report, entry=entry, floor=floor)
    desc, geometry = report.description, report.geometry
    if desc is None or geometry is None:
        plan.refusal = "preflight could not establish the draft's dialect and geometry (see the findings)"
        plan.refusal_kind = "preflight"
        return plan
    k = geometry.num_speculative_tokens
    declared = geometry.sample_from_anchor
    smoke = vllm_findings(
        source, desc, k, declared, runtime_for(engine, report, declared, capability), capability, options
    )
    plan.findings = sort_findings(plan.findings + smoke)
    _check_expectations(plan, entry, k, declared, geometry.num_query_tokens)

    def make_run(role: str, sample_from_anchor: bool, run_k: int, run_label: str, slug: str) -> RunPlan:
        runtime = runtime_for(engine, report, sample_from_anchor, capability)
        serving = serving_of(runtime, capability)
        env = engine_env(runtime, serving, options)
        return RunPlan(
            label=run_label,
            slug=slug,
            layout_role=role,
            sample_from_anchor=sample_from_anchor,
            num_speculative_tokens=run_k,
            num_query_tokens=num_query_tokens(run_k, sample_from_anchor),
            runner=Runner.of(runtime),
            serving=serving,
            env=env,
            request=_request(
                options=options,
                engine=engine,
                report=report,
                source=source,
                label=run_label,
                revision=revision,
                k=run_k,
                sample_from_anchor=sample_from_anchor,
                runtime=runtime,
                serving=serving,
                env=env,
            ),
        )

    base = f"{index + 1:02d}-{slugify(label)}"
    if options.sweep:
        _plan_sweep(plan, options, desc, geometry, make_run, base)
    else:
        layouts = [("declared", declared)] + ([("flipped", not declared)] if options.compare_layouts else [])
        for role, sample_from_anchor in layouts:
            flipped_label = f"{label} [flipped: {layout_name(sample_from_anchor)}]"
            run = make_run(
                role,
                sample_from_anchor,
                k,
                label if role == "declared" else flipped_label,
                base + ("" if role == "declared" else "-flipped"),
            )
            if role == "flipped" and run.serving is Serving.UNAVAILABLE:
                run.skip_reason = f"the installed vLLM cannot serve the flipped ({layout_name(sample_from_anchor)}) layout: {unavailable_reason(capability)}"
            plan.runs.append(run)
        _ask_prefix_caching_check(plan.declared_run, options)
    if options.compare_layouts and desc.algorithm is Algorithm.DFLASH2:
        plan.notes.append(
            "the flipped layout of a DFlash2 draft changes the convolution block from "
            f"{geometry.block_size} to {num_query_tokens(k, not declared)} query positions: expect it to score far lower"
        )

    errors = [f for f in plan.findings if f.severity is Severity.ERROR]
    declared_run = plan.declared_run
    if (
        errors
        and options.compare_layouts
        and declared_run is not None
        and declared_run.serving is Serving.UNAVAILABLE
        and all(layout_unavailable(f) for f in errors)
    ):
        # --compare-layouts asks what this vLLM does with the draft as published: launch the
        # declared layout anyway and judge what actually happened (a refusal, or a silent
        # change of layout the observed query positions and the acceptance show).
        declared_run.serving = Serving.UNSUPPORTED
        # With this vLLM's own runner choice, as a user's plain launch would get: forcing V2 here
        # would only show that runner's refusal (on CPU: "Model Runner V2 requires Triton").
        declared_run.runner = Runner.AUTO
        declared_run.env = {k: v for k, v in declared_run.env.items() if k != V2_ENV or V2_ENV in options.env}
        if declared_run.request is not None:
            declared_run.request["env"] = dict(declared_run.env)
        plan.notes.append(
            "--compare-layouts: launching the declared layout as published on a vLLM that cannot serve it "
            "(its default runner), to show what it does"
        )
        errors = []
    if errors and options.force:
        plan.forced = True
        plan.notes.append(f"--force: launching despite {len(errors)} error finding(s)")
    elif errors:
        # A vLLM that cannot serve the draft is a setup problem (exit 2); the checkpoint's own
        # errors are findings (exit 1), as with `inspect`.
        setup_only = all(f.code == "DFT041" and f.values.get("cause") == "environment" for f in errors)
        codes = " ".join(sorted({f.code for f in errors}))
        plan.refusal = (
            f"preflight found {len(errors)} error finding(s) ({codes}); not launching (--force to launch anyway)"
        )
        plan.refusal_kind = "setup" if setup_only else "preflight"
    return plan


def _ask_prefix_caching_check(run: RunPlan | None, options: SmokeOptions) -> None:
    """One run per draft (the declared one; a sweep's largest K) also checks prefix caching."""
    if run is not None and run.request is not None and options.checks_prefix_caching:
        run.request["prefix_caching_check"] = True


def _k_findings(desc: DraftDescription, k: int, trained: list[Finding]) -> list[Finding]:
    """What the geometry rules say about serving K that they do not say about the trained K."""
    _geometry, findings = resolve_geometry(desc, k)
    seen = {(f.code, f.message) for f in trained}
    return [f for f in findings if (f.code, f.message) not in seen and f.severity is not Severity.INFO]


def _plan_sweep(
    plan: DraftPlan,
    options: SmokeOptions,
    desc: DraftDescription,
    geometry: Geometry,
    make_run: Callable[[str, bool, int, str, str], RunPlan],
    base: str,
) -> None:
    """One run per K of `-k`, in the declared layout; a K the geometry rules refuse is skipped
    (run anyway with --force), with the rule's own words."""
    assert options.k_values
    trained = resolve_geometry(desc, None)[1]
    k_max = geometry.max_speculative_tokens
    if desc.algorithm is Algorithm.DFLASH2:
        plan.single_k_only = (
            f"DFlash2 serves only its trained K = {k_max}: its convolution block is the {geometry.block_size} "
            f"query positions of a {geometry.layout} step, so any other K misaligns the taps (DFT013)"
        )
    for k in options.k_values:
        run = make_run("declared", geometry.sample_from_anchor, k, f"{plan.label} [K={k}]", f"{base}-k{k}")
        run.sweep = True
        for finding in _k_findings(desc, k, trained):
            text = f"{finding.code}: {finding.message}"
            if finding.severity is Severity.ERROR and not options.force:
                run.skip_reason = f"K = {k} is not servable ({text}); --force runs it anyway"
            else:
                run.notes.append(text)
        plan.runs.append(run)
    runnable = [run for run in plan.runs if run.skip_reason is None]
    if not runnable:
        ks = ", ".join(str(k) for k in options.k_values)
        plan.refusal = (
            f"no K of the sweep ({ks}) can be served: "
            + (plan.single_k_only or "see each K's reason")
            + f"; add K = {k_max} to -k"
        )
        plan.refusal_kind = "setup"
        return
    _ask_prefix_caching_check(max(runnable, key=lambda run: run.num_speculative_tokens), options)


def _check_expectations(plan: DraftPlan, entry: DraftEntry, k: int, sample_from_anchor: bool, queries: int) -> None:
    expect = entry.expect
    actual = {"layout": layout_name(sample_from_anchor), "num_speculative_tokens": k, "num_query_tokens": queries}
    for key, want in expect.items():
        if key in actual and actual[key] != want:
            plan.notes.append(
                f"expected {key} {want!r} (preset) but the draft's config resolves to {actual[key]!r}: "
                "the published config may have changed"
            )


# What an engine loads a target's weights from (transformers and vLLM alike).
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")
RUNNABLE_EXAMPLE_TARGETS = (
    "example:engine-demo/target (--runtime torch)",
    "example:vllm-cpu-demo/target (--runtime vllm --device cpu)",
)


def require_runnable_target(target_spec: TargetDescription) -> None:
    """Refuse at plan time a local target that has a config but no weights (a config-only example
    such as example:tiny-target): the plan would say PLANNED and the engine fail at load time.
    A Hub target is not listed here (that would cost a request); its engine reports a missing file."""
    config = Path(target_spec.location)
    if not config.is_file():
        return
    folder = config.parent
    if any(next(folder.glob(pattern), None) is not None for pattern in WEIGHT_PATTERNS):
        return
    raise SourceError(
        f"target {target_spec.source}: config only, no weights in {folder} (no *.safetensors or *.bin): "
        "an engine cannot run it",
        "pass a target with its weights (a model folder or a Hub repo id); bundled targets that run on a CPU: "
        + ", ".join(RUNNABLE_EXAMPLE_TARGETS),
    )


def resolve_plan(
    options: SmokeOptions,
    capability: VllmCapability | None,
    target_spec: TargetDescription | None,
    *,
    target_unread: UnreadTarget | None = None,
) -> SmokePlan:
    """Each draft's plan; `target_unread`: a dry run whose target could not be read offline, each
    draft's preflight without it and DFT090 saying that the pairing is not checked."""
    if not options.drafts:
        raise UsageError("no draft given", "pass --draft (repeatable) or --preset")
    if options.target is None:
        raise UsageError("no target given", "pass --target (the model the drafts were trained for) or --preset")
    if options.sweep and options.compare_layouts:
        raise UsageError(
            "--compare-layouts and a K sweep (-k with several values) cannot run together",
            "compare layouts at one K first, then sweep K in the layout that wins",
        )
    if target_spec is not None:
        require_runnable_target(target_spec)
    drafts = [
        plan_draft(index, entry, options, options.engine, target_spec, capability)
        for index, entry in enumerate(options.drafts)
    ]
    if target_unread is not None:
        unread = unread_target_finding(options.target, target_unread, TARGET_PAIRING)
        for draft in drafts:
            if draft.read_error is None:  # a draft not read was not paired with anything either
                draft.findings = sort_findings([*draft.findings, unread])
    first = next((run for draft in drafts if draft.runnable for run in draft.runs if run.skip_reason is None), None)
    if first is not None and first.request is not None and options.baseline:
        first.request["baseline"] = True
    return SmokePlan(options.engine, options.target, target_spec, capability, drafts, options, target_unread)


# What a smoke-test plan checks with the target's config (the inspect pairing checks): what a dry
# run without it leaves unchecked (`plan.unread.TARGET_CHECKS` keys).
TARGET_PAIRING = ("pairing",)
