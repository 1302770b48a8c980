"""The vLLM side of a smoke-test plan: how the installed vLLM runs each draft, and what it cannot run.

What the release needs (the method, the runner and its environment, the config overrides) is
`serving.vllm_runtime`'s answer, the one `inspect --engine` and `plan` give; how an anchor-first
draft is served is `serving.plugin_state`'s vocabulary. This module adds what is smoke-test's
own: the environment of the child process (the user's `--env`, the GPU, the plugin's
allowlist) and the DFT041 findings about this environment (docs/findings.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from dflash_tools.draft.description import DraftDescription
from dflash_tools.draft.geometry import layout_name
from dflash_tools.engine_rules import VLLM_V2_ENV, EngineRules, get_rules, vllm_plugin_releases
from dflash_tools.findings import Finding, Severity, make_finding
from dflash_tools.inspect import InspectReport
from dflash_tools.serving.engine_model import DraftFacts
from dflash_tools.serving.plugin_state import PluginState
from dflash_tools.serving.vllm_capability import VllmCapability
from dflash_tools.serving.vllm_runtime import VllmRuntime, reads_of, vllm_runtime
from dflash_tools.smoke.options import Runtime, SmokeOptions
from dflash_tools.smoke.run_plan import Serving
from dflash_tools.vllm_plugin.markers import ENTRY_POINT_NAME, REQUIRE_ENV

V2_ENV = VLLM_V2_ENV


def _explicit_v1(env: Mapping[str, str]) -> bool:
    value = env.get(V2_ENV)
    return value is not None and value.strip().lower() in ("0", "false", "no", "off")


def _vllm_release(capability: VllmCapability | None) -> tuple[EngineRules | None, bool | None]:
    """The installed vLLM's table (None: not inspected, not installed, or a release without one)
    and whether its files ship the V1 runner (None: not read; the runtime then assumes one)."""
    if capability is None or not capability.installed:
        return None, None
    rules = get_rules(f"vllm=={capability.version}") if capability.version else None
    return rules, capability.has_v1_runner


def runtime_for(
    engine: Runtime, report: InspectReport, sample_from_anchor: bool, capability: VllmCapability | None
) -> VllmRuntime | None:
    """How the installed vLLM (not inspected: a vLLM without a table) runs this draft in this
    layout; None for the torch engine."""
    desc = report.description
    if engine is not Runtime.VLLM or desc is None:
        return None
    facts = DraftFacts.of(desc.raw_config, desc, report.geometry, source=report.loaded.source, draft="")
    rules, has_v1_runner = _vllm_release(capability)
    return vllm_runtime(rules, facts, sample_from_anchor, has_v1_runner=has_v1_runner)


def serving_of(runtime: VllmRuntime | None, capability: VllmCapability | None) -> Serving:
    if runtime is None:
        return Serving.NOT_VLLM
    state = capability.plugin_state if capability is not None else PluginState.ABSENT
    return Serving.of(state, needed=runtime.needs_plugin)


def unavailable_reason(capability: VllmCapability | None) -> str:
    if capability is None:
        return "vLLM was not inspected"
    if capability.plugin_state is PluginState.NOT_REGISTERED:
        return "the dflash-tools plugin is not registered with this vLLM installation"
    return capability.reason


def vllm_findings(
    source: str,
    desc: DraftDescription,
    k: int,
    sample_from_anchor: bool,
    runtime: VllmRuntime | None,
    capability: VllmCapability | None,
    options: SmokeOptions,
) -> list[Finding]:
    """DFT041: what the selected vLLM runner cannot serve as declared (docs/findings.md)."""
    if runtime is None:
        return []
    findings = []
    layout = layout_name(sample_from_anchor)
    format_rule = reads_of(_vllm_release(capability)[0]).reads_format(desc.dialect.family)
    if format_rule is not None and not format_rule.read:
        findings.append(
            make_finding(
                "DFT041",
                f"{source} is a {desc.spec.title} config: vLLM reads none ({format_rule.note})",
                desc.spec.unread_hint(desc.algorithm),
                severity=Severity.ERROR,
                keys=desc.spec.format_keys,
                values={"cause": "checkpoint"},
            )
        )
    serving = serving_of(runtime, capability)
    if serving is Serving.UNAVAILABLE:
        findings.append(
            make_finding(
                "DFT041",
                f"{source} is {layout} (sample_from_anchor=true: {k} query positions for K = {k}) but the installed "
                f"vLLM cannot serve that layout: {unavailable_reason(capability)}",
                f"use {vllm_plugin_releases('or')} with dflash-tools installed in the same environment (its "
                "plugin patches the runner), or a vLLM that serves anchor-first DFlash itself; bonus-anchor drafts "
                "are unaffected",
                severity=Severity.ERROR,
                keys=("sample_from_anchor",),
                values={"cause": "environment", "vllm_version": capability.version if capability else None},
            )
        )
    v2 = runtime.v2_reasons
    if not runtime.has_v1_runner and (_explicit_v1(options.env) or _explicit_v1(options.inherited_env)):
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


def engine_env(runtime: VllmRuntime | None, serving: Serving, options: SmokeOptions) -> dict[str, str]:
    if runtime is None:
        return dict(options.env)
    # The runner selector only where V1 exists (a release with V2 alone merely warns that the
    # variable is redundant): the runtime's environment.
    env: dict[str, str] = dict(runtime.environment)
    device = options.device or ""
    if device.startswith("cuda:"):
        env["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
    env.update(options.env)
    if serving is Serving.PLUGIN:
        env[REQUIRE_ENV] = "1"
    if serving.may_load_plugin:
        allowlist = env.get("VLLM_PLUGINS", options.inherited_env.get("VLLM_PLUGINS"))
        if allowlist is not None and ENTRY_POINT_NAME not in [n.strip() for n in allowlist.split(",")]:
            env["VLLM_PLUGINS"] = ",".join([n for n in allowlist.split(",") if n.strip()] + [ENTRY_POINT_NAME])
    return env


def layout_unavailable(finding: Finding) -> bool:
    """The DFT041 error that says this vLLM cannot serve the anchor-first layout."""
    return (
        finding.code == "DFT041"
        and finding.values.get("cause") == "environment"
        and "sample_from_anchor" in finding.keys
    )
