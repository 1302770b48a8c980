"""What the vLLM in this environment will do with a draft: `inspect --engine vllm`.

`inspect_for_vllm` is the inspect walk plus these serving checks (they live with smoke-test's
view of vLLM, above the inspect layer).

The engine is classified from its files (`serving.vllm_capability.detect_vllm`, no import, no GPU). Only
anchor-first DFlash-family drafts depend on it (docs/tier-vllm.md):

- served as declared: natively, or by the dflash-tools plugin on the releases it patches
  (`engine_rules.vllm_plugin_versions`);
- refused: the V2 runner always refuses what it cannot serve; the V1 runner (where a release still
  ships it) refuses DFlash2 (candidate head) on its own and DFlash1 only with the plugin's guard
  (DFT041, an error in this context);
- served *silently wrong*: stock V1 accepts an anchor-first DFlash1 draft and drafts it in the
  bonus-anchor layout without an error; acceptance collapses while the output stays correct
  (DFT051). V1 is what such a release picks with `VLLM_USE_V2_MODEL_RUNNER=0`, or on its own where
  Triton is missing. A release without a V1 runner cannot do this.

Every anchor-first DFlash-family draft also gets DFT053 (info): the installed version and what it
does with the draft (served by the plugin, natively, refused).
"""

from __future__ import annotations

from dflash_tools.draft.description import Algorithm, DraftDescription
from dflash_tools.draft.geometry import Geometry
from dflash_tools.draft.target import TargetDescription
from dflash_tools.engine_rules import vllm_plugin_releases
from dflash_tools.findings import Finding, Severity, make_finding, sort_findings
from dflash_tools.inspect import InspectReport, inspect_loaded
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.serving.vllm_capability import VllmCapability

ENGINES = ("vllm",)


def inspect_for_vllm(
    loaded: LoadedCheckpoint,
    vllm: VllmCapability,
    *,
    target: TargetDescription | None = None,
    num_speculative_tokens: int | None = None,
) -> InspectReport:
    """`inspect_loaded`, then how this vLLM will serve the draft (findings, and `vllm` in the document)."""
    report = inspect_loaded(loaded, target=target, num_speculative_tokens=num_speculative_tokens)
    if report.description is not None and report.geometry is not None:
        serving = vllm_serving_findings(loaded.source, report.description, report.geometry, vllm)
        report.findings = sort_findings([*report.findings, *serving])
    report.extra["vllm"] = vllm.to_dict()  # what the serving verdict was based on
    return report


def _why_the_plugin_is_inactive(capability: VllmCapability) -> str:
    if not capability.plugin_registered:
        return "the dflash-tools plugin is not installed with this vLLM"
    if capability.plugin_disabled:
        return "the dflash-tools plugin is disabled (DFLASH_TOOLS_PLUGIN_DISABLE)"
    if not capability.plugin_allowed:
        return "VLLM_PLUGINS does not list dflash_tools, so vLLM does not load the plugin"
    return "this vLLM has no hook point for the plugin's V1 guard"


def vllm_serving_findings(
    source: str, desc: DraftDescription, geometry: Geometry, capability: VllmCapability
) -> list[Finding]:
    """DFT052 (no vLLM here), DFT041 (refused), DFT051 (served silently in the wrong layout)."""
    if not capability.installed:
        return [
            make_finding(
                "DFT052",
                "--engine vllm: vLLM is not installed in this Python environment, so how it serves the draft "
                "was not checked",
                "run inspect with the Python environment that runs vLLM",
            )
        ]
    if capability.unreadable:
        return [
            make_finding(
                "DFT052",
                f"--engine vllm: vLLM's installed source files cannot be read ({capability.unreadable}), so how it "
                "serves the draft was not checked",
                "repair the vLLM install (pip install --force-reinstall vllm) in the environment that runs it",
            )
        ]
    if desc.algorithm is Algorithm.DSPARK or not geometry.sample_from_anchor:
        return []
    version = capability.version or "(unknown version)"
    status = capability.anchor_first_status
    if status in ("native", "patched"):
        how = (
            "serves it itself"
            if status == "native"
            else f"serves it with {geometry.num_query_tokens} query positions through the dflash-tools plugin"
        )
        return [
            make_finding(
                "DFT053",
                f"vLLM {version} (installed here) {how}",
                "",
                severity=Severity.INFO,
                keys=("sample_from_anchor",),
                values={"vllm_version": capability.version, "support": capability.support, "anchor_first": status},
            )
        ]
    values = {"vllm_version": capability.version, "support": capability.support}
    if desc.algorithm is Algorithm.DFLASH2 or capability.v1_refuses_anchor_first:
        return [
            make_finding(
                "DFT041",
                f"{source} is anchor-first (sample_from_anchor=true) and vLLM {version} refuses it: "
                f"{capability.reason if capability.support != 'patchable' else _why_the_plugin_is_inactive(capability)}",
                f"serve it with {vllm_plugin_releases('or')} and dflash-tools in the same environment "
                "(the plugin patches the runner), or with a vLLM that serves anchor-first DFlash drafts itself",
                severity=Severity.ERROR,
                keys=("sample_from_anchor",),
                values={**values, "cause": "environment"},
            )
        ]
    why = _why_the_plugin_is_inactive(capability) + (
        "" if capability.support == "patchable" else f" ({capability.reason})"
    )
    return [
        make_finding(
            "DFT051",
            f"{source} is an anchor-first DFlash draft and vLLM {version}'s V1 runner would serve it in the "
            f"bonus-anchor layout without an error (acceptance collapses, the output stays correct): {why}",
            "let vLLM load the dflash-tools plugin (install dflash-tools with vLLM; VLLM_PLUGINS unset or listing "
            f"dflash_tools): it serves the draft on {vllm_plugin_releases('and')} and makes V1 refuse it "
            "elsewhere; or serve with VLLM_USE_V2_MODEL_RUNNER=1, which refuses it",
            keys=("sample_from_anchor",),
            values=values,
        )
    ]
