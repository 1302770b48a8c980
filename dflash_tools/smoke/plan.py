"""Resolve drafts, target, K, layout, runner and environment into a launch plan (no GPU, no vLLM).

For each draft: preflight (the `inspect` checks with the target and K; K defaults to the draft's
trained K), then the decisions docs/smoke-test.md describes:

- the layout served (the declared one; `--compare-layouts` adds the flipped one) and its query
  count Q: K anchor-first, K + 1 bonus-anchor;
- vLLM's speculative method (`dflash` for DFlash and DFlash2, `dspark` for DSpark) with an
  explicit K;
- the runner: V2 forced (`VLLM_USE_V2_MODEL_RUNNER=1`) for DFlash2, anchor-first, DSpark and
  mixed sliding/full drafts, because V1 either refuses them or serves them silently wrong;
- how anchor-first DFlash is served: natively (the upstream change is in this vLLM), through the
  dflash-tools plugin (stock 0.33.0), or not at all (DFT041, refused);
- the config values vLLM must see that the file does not state where vLLM reads them
  (`draft_config_overrides`, served from an overlay folder, the checkpoint untouched);
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
from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.draft.description import Algorithm, DraftDescription
from dflash_tools.draft.geometry import Geometry, layout_name, num_query_tokens, resolve_geometry
from dflash_tools.draft.target import TargetSpec
from dflash_tools.errors import DflashToolsError, SourceError, UsageError
from dflash_tools.findings import Finding, Severity, has_errors, make_finding, sort_findings
from dflash_tools.inspect import InspectReport, inspect_loaded
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.presets import SANITY_FLOOR, DraftEntry, Floor
from dflash_tools.serving.vllm_capability import VllmCapability
from dflash_tools.smoke.options import SmokeOptions
from dflash_tools.vllm_plugin.fingerprints import SUPPORTED_VERSIONS
from dflash_tools.vllm_plugin.markers import ENTRY_POINT_NAME, REQUIRE_ENV

V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
ADDITIONAL_CONFIG_KEY = "dflash_tools"


@dataclass
class RunPlan:
    """One child process: one draft served in one layout."""

    label: str
    slug: str
    layout_role: str  # "declared" | "flipped"
    sample_from_anchor: bool | None  # None: not known (a server measured without its draft)
    num_speculative_tokens: int
    num_query_tokens: int | None
    runner: str  # "v2" | "auto" | "n/a"
    serving: str  # "stock" | "native" | "plugin" | "unknown" | "unavailable" | "n/a" | "server"
    env: dict[str, str]
    request: contract.SmokeRequest | None
    skip_reason: str | None = None
    sweep: bool = False  # one K of a `-k` sweep
    # Warnings about this K from the geometry rules (a sweep's K above the trained K, unused taps).
    notes: list[str] = field(default_factory=list)

    @property
    def prefix_caching_check(self) -> bool:
        return bool(self.request and self.request.get("prefix_caching_check"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "slug": self.slug,
            "layout_role": self.layout_role,
            "layout": layout_name(self.sample_from_anchor) if self.sample_from_anchor is not None else None,
            "sample_from_anchor": self.sample_from_anchor,
            "num_speculative_tokens": self.num_speculative_tokens,
            "num_query_tokens": self.num_query_tokens,
            "runner": self.runner,
            "serving": self.serving,
            "env": dict(self.env),
            "skip_reason": self.skip_reason,
            "sweep": self.sweep,
            "notes": list(self.notes),
            "prefix_caching_check": self.prefix_caching_check,
            "request": dict(self.request) if self.request is not None else None,
        }


@dataclass
class DraftPlan:
    source: str
    label: str
    findings: list[Finding]
    report: InspectReport | None = None
    entry: DraftEntry | None = None
    floor: Floor = SANITY_FLOOR
    runs: list[RunPlan] = field(default_factory=list)
    refusal: str | None = None
    refusal_kind: str | None = None  # "preflight" | "setup"
    notes: list[str] = field(default_factory=list)
    forced: bool = False
    # A sweep of a DFlash2 draft: why only its trained K can be served.
    single_k_only: str | None = None

    @property
    def runnable(self) -> bool:
        return self.refusal is None

    @property
    def declared_run(self) -> RunPlan | None:
        return next((run for run in self.runs if run.layout_role == "declared"), None)

    @property
    def sweep(self) -> bool:
        return any(run.sweep for run in self.runs)

    def to_dict(self) -> dict[str, Any]:
        report = self.report
        geometry = report.geometry if report else None
        desc = report.description if report else None
        return {
            "draft": self.source,
            "label": self.label,
            "dialect": desc.dialect.value if desc else None,
            "algorithm": desc.algorithm.value if desc else None,
            "geometry": geometry.to_dict() if geometry else None,
            "preflight": {
                "ok": not has_errors(self.findings),
                "findings": [f.to_dict() for f in self.findings],
                "forced": self.forced,
            },
            "runnable": self.runnable,
            "refusal": {"kind": self.refusal_kind, "message": self.refusal} if self.refusal else None,
            "floor": self.floor.to_dict(),
            "expect": dict(self.entry.expect) if self.entry else {},
            "references": list(self.entry.references) if self.entry else [],
            "notes": list(self.notes),
            "runs": [run.to_dict() for run in self.runs],
        }


@dataclass
class SmokePlan:
    engine: str
    target: str | None
    target_spec: TargetSpec | None
    capability: VllmCapability | None
    drafts: list[DraftPlan]
    options: SmokeOptions

    def runs(self) -> list[tuple[DraftPlan, RunPlan]]:
        return [
            (draft, run) for draft in self.drafts if draft.runnable for run in draft.runs if run.skip_reason is None
        ]


def slugify(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:80] or "draft"


def _mixed_attention(desc: DraftDescription) -> bool:
    types = set(desc.decoder.layer_types or [])
    return {"sliding_attention", "full_attention"} <= types


def vllm_sample_from_anchor(desc: DraftDescription) -> tuple[str, bool] | None:
    """The config key vLLM 0.33.0 reads the layout from, and the value it would see.

    z-lab: `dflash_config.sample_from_anchor` (the top level is ignored). speculators: the top
    level, copied into `dflash_config` (dflash, dflash2) or the config (dspark), default false
    for all three in 0.33.0. Native DSpark: the top level, default true.
    """
    config = desc.raw_config
    family = desc.dialect.family
    if family == "zlab":
        inner = config.get("dflash_config")
        value = inner.get("sample_from_anchor", False) if isinstance(inner, dict) else False
        return "dflash_config.sample_from_anchor", value is True
    if family == "speculators":
        return "sample_from_anchor", config.get("sample_from_anchor", False) is True
    if family == "dspark-native":
        return "sample_from_anchor", config.get("sample_from_anchor", True) is True
    return None


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


def _has_v1_runner(capability: VllmCapability | None) -> bool:
    """Unknown (no vLLM inspected) counts as having one: the plan then pins V2 to be safe."""
    return capability is None or not capability.installed or capability.has_v1_runner


def _explicit_v1(env: Mapping[str, str]) -> bool:
    value = env.get(V2_ENV)
    return value is not None and value.strip().lower() in ("0", "false", "no", "off")


def _v2_reasons(desc: DraftDescription, sample_from_anchor: bool) -> list[str]:
    reasons = []
    if desc.algorithm is Algorithm.DFLASH2:
        reasons.append("DFlash2 (V1 drafts it as plain DFlash without its candidate selector)")
    if desc.algorithm is Algorithm.DSPARK:
        reasons.append("DSpark (implemented by the V2 runner only)")
    if sample_from_anchor and desc.algorithm is not Algorithm.DSPARK:
        reasons.append("anchor-first layout (V1 hard-codes K + 1 queries and drafts it wrongly)")
    if _mixed_attention(desc):
        reasons.append("mixed sliding/full attention layers")
    return reasons


def _serving(engine: str, desc: DraftDescription, sample_from_anchor: bool, capability: VllmCapability | None) -> str:
    if engine != "vllm":
        return "n/a"
    if desc.algorithm is Algorithm.DSPARK or not sample_from_anchor:
        return "stock"
    if capability is None or capability.support == "absent":
        return "unknown"
    if capability.support == "native":
        return "native"
    if capability.support == "patchable" and capability.plugin_registered:
        return "plugin"
    return "unavailable"


def _unavailable_reason(capability: VllmCapability | None) -> str:
    if capability is None:
        return "vLLM was not inspected"
    if capability.support == "patchable" and not capability.plugin_registered:
        return "the dflash-tools plugin is not registered with this vLLM installation"
    return capability.reason


def _smoke_findings(
    source: str,
    desc: DraftDescription,
    k: int,
    sample_from_anchor: bool,
    engine: str,
    capability: VllmCapability | None,
    options: SmokeOptions,
) -> list[Finding]:
    """DFT041: what the selected vLLM runner cannot serve as declared (docs/findings.md)."""
    if engine != "vllm":
        return []
    findings = []
    layout = layout_name(sample_from_anchor)
    if desc.dialect.family == "open-spec":
        findings.append(
            make_finding(
                "DFT041",
                f"{source} is an Open Spec config (architecture DflashDraftModel): vLLM has no loader for it",
                "convert it to the z-lab or speculators form first (`dflash-tools convert`)",
                severity=Severity.ERROR,
                keys=("open_spec_config_version",),
                values={"cause": "checkpoint"},
            )
        )
    serving = _serving(engine, desc, sample_from_anchor, capability)
    if serving == "unavailable":
        findings.append(
            make_finding(
                "DFT041",
                f"{source} is {layout} (sample_from_anchor=true: {k} query positions for K = {k}) but the installed "
                f"vLLM cannot serve that layout: {_unavailable_reason(capability)}",
                f"use vLLM {' or '.join(SUPPORTED_VERSIONS)} with dflash-tools installed in the same environment (its "
                "plugin patches the runner), or a vLLM that serves anchor-first DFlash itself; bonus-anchor drafts "
                "are unaffected",
                severity=Severity.ERROR,
                keys=("sample_from_anchor",),
                values={"cause": "environment", "vllm_version": capability.version if capability else None},
            )
        )
    v2 = _v2_reasons(desc, sample_from_anchor)
    if not _has_v1_runner(capability) and (_explicit_v1(options.env) or _explicit_v1(options.inherited_env)):
        version = capability.version if capability else None
        findings.append(
            make_finding(
                "DFT041",
                f"{V2_ENV}=0 asks for the V1 model runner, which vLLM {version} no longer has: it refuses to start",
                f"unset {V2_ENV} (drop --env {V2_ENV}=0)",
                severity=Severity.ERROR,
                keys=(V2_ENV,),
                values={"cause": "environment", "vllm_version": version},
            )
        )
    elif v2 and _explicit_v1(options.env):
        findings.append(
            make_finding(
                "DFT041",
                f"{source} needs the V2 model runner ({'; '.join(v2)}), but --env {V2_ENV}=0 selects V1",
                f"drop --env {V2_ENV}=0: smoke-test sets {V2_ENV}=1 for this draft",
                severity=Severity.ERROR,
                keys=(V2_ENV,),
                values={"cause": "environment"},
            )
        )
    elif v2 and _explicit_v1(options.inherited_env):
        findings.append(
            make_finding(
                "DFT041",
                f"{V2_ENV}=0 in the environment would run {source} on the V1 runner ({'; '.join(v2)}); "
                f"smoke-test overrides it with {V2_ENV}=1 for this run",
                f"unset {V2_ENV} (or set it to 1) when you serve this draft",
                keys=(V2_ENV,),
                values={"cause": "environment"},
            )
        )
    return findings


def _engine_env(
    engine: str,
    desc: DraftDescription,
    sample_from_anchor: bool,
    serving: str,
    options: SmokeOptions,
    capability: VllmCapability | None = None,
) -> dict[str, str]:
    env: dict[str, str] = {}
    if engine != "vllm":
        return dict(options.env)
    if _v2_reasons(desc, sample_from_anchor) and _has_v1_runner(capability):
        # Only where V1 exists: 0.34.0 runs V2 alone and merely warns that the variable is redundant.
        env[V2_ENV] = "1"
    device = options.device or ""
    if device.startswith("cuda:"):
        env["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
    env.update(options.env)
    if serving == "plugin":
        env[REQUIRE_ENV] = "1"
    if serving in ("plugin", "unknown"):
        allowlist = env.get("VLLM_PLUGINS", options.inherited_env.get("VLLM_PLUGINS"))
        if allowlist is not None and ENTRY_POINT_NAME not in [n.strip() for n in allowlist.split(",")]:
            env["VLLM_PLUGINS"] = ",".join([n for n in allowlist.split(",") if n.strip()] + [ENTRY_POINT_NAME])
    return env


def _request(
    *,
    options: SmokeOptions,
    engine: str,
    report: InspectReport,
    source: str,
    label: str,
    revision: str | None,
    k: int,
    sample_from_anchor: bool,
    serving: str,
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
        "engine": engine,
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
    }
    if engine == "vllm":
        speculative: dict[str, Any] = {
            "method": "dspark" if desc.algorithm is Algorithm.DSPARK else "dflash",
            "model": served,
            "num_speculative_tokens": k,
        }
        if hub and revision:
            speculative["revision"] = revision
        overrides: dict[str, Any] = {}
        reads = vllm_sample_from_anchor(desc)
        if reads is not None and reads[1] != sample_from_anchor:
            overrides[reads[0]] = sample_from_anchor
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
        request["draft_config_overrides"] = overrides
        request["plugin_required"] = serving == "plugin"
    return contract.validate_request(request)


def plan_draft(
    index: int,
    entry: DraftEntry,
    options: SmokeOptions,
    engine: str,
    target_spec: TargetSpec | None,
    capability: VllmCapability | None,
) -> DraftPlan:
    source = entry.draft
    label = entry.label or source
    revision = entry.revision or options.revision
    floor = options.floor or entry.floor or SANITY_FLOOR
    try:
        loaded = load_checkpoint(source, revision=revision, token=options.token, timeout=options.hub_timeout)
    except DflashToolsError as exc:
        return DraftPlan(source, label, [], entry=entry, floor=floor, refusal=exc.message, refusal_kind="setup")
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
    smoke = _smoke_findings(source, desc, k, declared, engine, capability, options)
    plan.findings = sort_findings(plan.findings + smoke)
    _check_expectations(plan, entry, k, declared, geometry.num_query_tokens)

    def make_run(role: str, sample_from_anchor: bool, run_k: int, run_label: str, slug: str) -> RunPlan:
        serving = _serving(engine, desc, sample_from_anchor, capability)
        env = _engine_env(engine, desc, sample_from_anchor, serving, options, capability)
        return RunPlan(
            label=run_label,
            slug=slug,
            layout_role=role,
            sample_from_anchor=sample_from_anchor,
            num_speculative_tokens=run_k,
            num_query_tokens=num_query_tokens(run_k, sample_from_anchor),
            runner=("v2" if _v2_reasons(desc, sample_from_anchor) else "auto") if engine == "vllm" else "n/a",
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
            if role == "flipped" and run.serving == "unavailable":
                run.skip_reason = f"the installed vLLM cannot serve the flipped ({layout_name(sample_from_anchor)}) layout: {_unavailable_reason(capability)}"
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
        and declared_run.serving == "unavailable"
        and all(_layout_unavailable(f) for f in errors)
    ):
        # --compare-layouts asks what this vLLM does with the draft as published: launch the
        # declared layout anyway and judge what actually happened (a refusal, or a silent
        # change of layout the observed query positions and the acceptance show).
        declared_run.serving = "unsupported"
        # With this vLLM's own runner choice, as a user's plain launch would get: forcing V2 here
        # would only show that runner's refusal (on CPU: "Model Runner V2 requires Triton").
        declared_run.runner = "auto"
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


def _layout_unavailable(finding: Finding) -> bool:
    """The DFT041 error that says this vLLM cannot serve the anchor-first layout."""
    return (
        finding.code == "DFT041"
        and finding.values.get("cause") == "environment"
        and "sample_from_anchor" in finding.keys
    )


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
    "example:engine-demo/target (--engine torch)",
    "example:vllm-cpu-demo/target (--engine vllm --device cpu)",
)


def require_runnable_target(target_spec: TargetSpec) -> None:
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
    target_spec: TargetSpec | None,
) -> SmokePlan:
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
    first = next((run for draft in drafts if draft.runnable for run in draft.runs if run.skip_reason is None), None)
    if first is not None and first.request is not None and options.baseline:
        first.request["baseline"] = True
    return SmokePlan(options.engine, options.target, target_spec, capability, drafts, options)
