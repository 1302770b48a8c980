"""vLLM general plugin: serve anchor-first DFlash / DFlash2 drafts on the stock vLLM releases it knows.

Registered as `dflash_tools = dflash_tools.vllm_plugin:register` in the `vllm.general_plugins`
entry-point group, so vLLM calls `register()` in every process it starts (front end, engine core,
each worker) before it builds configs, schedulers or model runners.

Because an installed plugin runs in *every* vLLM process on the machine, it is careful:

- On a vLLM whose own code serves anchor-first DFlash drafts (`fingerprints.native_evidence`,
  read from the code, not the version) it does nothing.
- On any vLLM other than a release it was written against (an engine table that names its
  module in `releases/`), or whose fingerprinted functions' source differs from that module's
  `SITES`, it applies nothing of the change: it logs why, and fails the process only when the launcher asked for it
  (`DFLASH_TOOLS_REQUIRE_PLUGIN=1`), so unrelated vLLM use is never broken by an upgrade. Where
  the V1 runner still exists it installs one guard, version-tolerant: V1 refuses anchor-first
  DFlash drafts (`patch.install_v1_refusal`), because stock V1 would otherwise serve them in the
  bonus-anchor layout without an error. Without V1 (0.34.0 on), the V2 runner refuses them itself.
- `DFLASH_TOOLS_PLUGIN_DISABLE=1` leaves vLLM entirely untouched (the escape hatch), and says what
  that means for anchor-first drafts.
- On a release it patches it installs that release's wrappers (`releases/v0_34.py` `apply`, ...);
  they change behaviour only for a `method="dflash"` draft whose `dflash_config.sample_from_anchor`
  is true.

It records what it did in marker files (`markers.py`) and as `SpeculativeConfig._dflash_tools_patch`.
Importing this module is cheap: vLLM itself is only touched inside `register()`.

Imports: its own modules and `engine_rules` (plain data), nothing else of dflash_tools: it runs inside
vLLM's processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from dflash_tools.vllm_plugin.fingerprints import Classification, classify, has_v1_runner
from dflash_tools.vllm_plugin.markers import DISABLE_ENV, REQUIRE_ENV, truthy, write_marker
from dflash_tools.vllm_plugin.sources import SourceReader, directory_reader

__all__ = ["Decision", "decide", "register"]

_registered: dict[str, object] = {}


@dataclass(frozen=True)
class Decision:
    """What `register()` does in a process: `patch`, `skip` (native or disabled), or refuse.

    `raise_error` is set when refusing and the launcher required the patch.
    """

    action: str  # "patch" | "native" | "disabled" | "refuse"
    reason: str
    classification: Classification | None
    raise_error: bool = False

    @property
    def status(self) -> str:
        return {"patch": "patched", "native": "native", "disabled": "disabled", "refuse": "refused"}[self.action]


def decide(vllm_version: str | None, reader: SourceReader, environ: dict[str, str] | os._Environ[str]) -> Decision:
    """Pure decision from the vLLM version, its sources and the environment."""
    required = truthy(environ.get(REQUIRE_ENV))
    if truthy(environ.get(DISABLE_ENV)):
        return Decision("disabled", f"{DISABLE_ENV} is set", None, raise_error=required)
    classification = classify(vllm_version, reader)
    if classification.support == "native":
        return Decision("native", classification.reason, classification)
    if classification.support == "patchable":
        return Decision("patch", classification.reason, classification)
    return Decision("refuse", classification.reason, classification, raise_error=required)


def register() -> None:
    """Entry point vLLM calls (with no arguments) in each of its processes."""
    if _registered:
        return
    import logging

    import vllm

    from dflash_tools.vllm_plugin import patch, releases

    logger = logging.getLogger("vllm.dflash_tools_plugin")
    try:
        vllm_version: str | None = version("vllm")
    except PackageNotFoundError:
        vllm_version = getattr(vllm, "__version__", None)
    root = Path(vllm.__file__).resolve().parent.parent
    reader = directory_reader(root)
    decision = decide(vllm_version, reader, os.environ)
    v1_runner = has_v1_runner(reader)
    _registered["decision"] = decision
    payload: dict[str, object] = {
        "status": decision.status,
        "reason": decision.reason,
        "vllm_version": vllm_version,
        "v1_runner": v1_runner,
    }

    if decision.action == "patch":
        assert decision.classification is not None
        try:
            sites = releases.apply_patches(decision.classification.version, decision.classification.checks)
        except patch.PluginRefused as exc:
            # Nothing half-applied matters for bonus-anchor drafts; anchor-first ones need all of it.
            decision = Decision("refuse", str(exc), decision.classification, truthy(os.environ.get(REQUIRE_ENV)))
            _registered["decision"] = decision
            payload.update(status="refused", reason=str(exc))
        else:
            payload["sites"] = sites
            logger.info("dflash-tools plugin: %s", decision.reason)

    if decision.action == "refuse" and v1_runner:
        # Stock V1 would serve anchor-first DFlash in the wrong layout without a word; make it refuse.
        try:
            payload["v1_refusal"] = patch.install_v1_refusal(decision.reason)
        except Exception as exc:  # an unknown vLLM must never fail to start because of the guard
            logger.error("dflash-tools plugin: could not install the V1 guard: %s", exc)
            payload["v1_refusal"] = []

    from vllm.config.speculative import SpeculativeConfig

    SpeculativeConfig._dflash_tools_patch = dict(payload)
    write_marker("plugin", payload)
    if decision.action in ("refuse", "disabled"):
        message = f"dflash-tools plugin is not patching vLLM: {decision.reason}"
        if decision.raise_error:
            raise patch.PluginRefused(
                message + " (required by the launcher: anchor-first DFlash drafts cannot be served correctly)"
            )
        logger.warning("%s; %s", message, _what_happens_to_anchor_first(decision, payload.get("v1_refusal"), v1_runner))
    elif decision.action == "native":
        logger.info("dflash-tools plugin: nothing to do: %s", decision.reason)


def _what_happens_to_anchor_first(decision: Decision, v1_refusal: object, v1_runner: bool = True) -> str:
    """The truth about anchor-first DFlash drafts in a process the plugin does not patch."""
    v2 = "the V2 runner refuses anchor-first DFlash drafts (stock DFlashSpeculator)"
    if not v1_runner:
        unpatched = "vLLM runs unpatched: " if decision.action == "disabled" else ""
        return f"{unpatched}{v2}, and this vLLM has no V1 runner: they fail to start, never run in the wrong layout"
    if decision.action == "disabled":
        return (
            f"vLLM runs unpatched: {v2}, and the V1 runner serves anchor-first DFlash (not DFlash2) drafts in the "
            "bonus-anchor layout without an error, so acceptance collapses"
        )
    if v1_refusal:
        return f"{v2}, and the plugin's guard makes the V1 runner refuse them too"
    return (
        f"{v2}, but this vLLM has no hook point for the plugin's V1 guard: its V1 runner may serve anchor-first "
        "DFlash drafts in the bonus-anchor layout without an error (acceptance collapses); serve them with "
        "VLLM_USE_V2_MODEL_RUNNER=1 so that they are refused"
    )
