"""Plan resolution (no GPU): K, query positions, runner, patch or native, environment, the request.

Every fixture dialect in both layouts, against each kind of vLLM: none installed, stock 0.33.0
(patched by the plugin; the real installed one is read in tests/real_vllm), one with the upstream
change, and one the plugin was not written for.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import dflash_tools_testing as testing
from dflash_tools.draft.target import load_target
from dflash_tools.engine_rules import vllm_plugin_releases
from dflash_tools.errors import UsageError
from dflash_tools.plan.presets import SANITY_FLOOR, DraftEntry, Floor
from dflash_tools.serving.vllm_capability import VllmCapability
from dflash_tools.smoke.options import SmokeOptions
from dflash_tools.smoke.plan import DraftPlan, resolve_plan


def capability(support: str, *, registered: bool = True, version: str | None = None) -> VllmCapability:
    # Releases no table can ever be stand for a vLLM with the upstream change (native) and for one
    # the plugin does not know (unsupported).
    version = version or {"native": "999.1.0", "unsupported": "999.0.0"}.get(support, "0.33.0")
    return VllmCapability(
        installed=support != "absent",
        version=version,
        location=None,
        support=support,
        reason=f"vLLM is {support}",
        plugin_registered=registered,
        plugin_allowed=True,
        has_v1_runner=version == "0.33.0",  # 0.34.0 removed the V1 runner
    )


PATCHABLE = capability("patchable")
NATIVE = capability("native")
UNSUPPORTED = capability("unsupported")


def plan_for(
    tmp_path: Path,
    dialect: str,
    spec: testing.DraftSpec,
    cap: VllmCapability | None = PATCHABLE,
    **overrides: Any,
) -> DraftPlan:
    draft = testing.write_checkpoint(tmp_path / "draft", dialect, spec)
    target = tmp_path / "target"
    testing.write_target(target, spec)
    fields: dict[str, Any] = {
        "target": str(target),
        "drafts": [DraftEntry(str(draft))],
        "prompts": ["p"],
        "engine": "vllm",
    }
    fields.update(overrides)
    plan = resolve_plan(SmokeOptions(**fields), cap, load_target(str(target)))
    return plan.drafts[0]


ANCHOR = replace(testing.TINY, sample_from_anchor=True)  # B 8 anchor-first: K_max 8
ANCHOR_DFLASH2 = replace(testing.TINY_DFLASH2, block_size=7, sample_from_anchor=True)

# dialect, spec, K, Q, runner, serving (stock 0.33.0 + plugin), vLLM method
CASES = [
    ("zlab-dflash", testing.TINY, 7, 8, "auto", "stock", "dflash"),
    ("zlab-dflash", ANCHOR, 8, 8, "v2", "plugin", "dflash"),
    ("zlab-dflash2", testing.TINY_DFLASH2, 7, 8, "v2", "stock", "dflash"),
    ("zlab-dflash2", ANCHOR_DFLASH2, 7, 7, "v2", "plugin", "dflash"),
    ("speculators-dflash", testing.TINY, 7, 8, "auto", "stock", "dflash"),
    ("speculators-dflash", ANCHOR, 8, 8, "v2", "plugin", "dflash"),
    ("speculators-dflash2", testing.TINY_DFLASH2, 7, 8, "v2", "stock", "dflash"),
    ("speculators-dflash2", ANCHOR_DFLASH2, 7, 7, "v2", "plugin", "dflash"),
    ("speculators-dspark", testing.TINY_DSPARK, 7, 7, "v2", "stock", "dspark"),
    ("dspark-native", replace(testing.TINY_DSPARK, sample_from_anchor=None), 7, 7, "v2", "stock", "dspark"),
]


@pytest.mark.parametrize(("dialect", "spec", "k", "queries", "runner", "serving", "method"), CASES)
def test_every_dialect_and_layout(
    tmp_path: Path, dialect: str, spec: testing.DraftSpec, k: int, queries: int, runner: str, serving: str, method: str
) -> None:
    draft = plan_for(tmp_path, dialect, spec)
    assert draft.runnable, draft.refusal
    (run,) = draft.runs
    assert (run.num_speculative_tokens, run.num_query_tokens, run.runner, run.serving) == (k, queries, runner, serving)
    assert run.env.get("VLLM_USE_V2_MODEL_RUNNER") == ("1" if runner == "v2" else None)
    assert run.env.get("DFLASH_TOOLS_REQUIRE_PLUGIN") == ("1" if serving == "plugin" else None)
    request = run.request
    assert request is not None
    assert request["speculative_config"] == {
        "method": method,
        "model": str((tmp_path / "draft").resolve()),
        "num_speculative_tokens": k,
    }
    assert (request["num_speculative_tokens"], request["num_query_tokens"], request["block_size"]) == (
        k,
        queries,
        spec.block_size,
    )
    assert request["plugin_required"] is (serving == "plugin")
    assert request["engine_args"]["additional_config"]["dflash_tools"] == {
        "layout": "anchor-first" if queries == k else "bonus-anchor",
        "num_speculative_tokens": k,
        "num_query_tokens": queries,
    }
    assert request["baseline"] is True  # the first run measures the target alone
    assert request["draft_config_overrides"] == {}
    assert request["target"] == str((tmp_path / "target").resolve())


@pytest.mark.parametrize(("cap", "serving"), [(NATIVE, "native"), (None, "unknown"), (capability("absent"), "unknown")])
def test_anchor_first_on_other_vllms(tmp_path: Path, cap: VllmCapability | None, serving: str) -> None:
    draft = plan_for(tmp_path, "zlab-dflash2", ANCHOR_DFLASH2, cap)
    assert draft.runnable
    (run,) = draft.runs
    assert run.serving == serving
    assert "DFLASH_TOOLS_REQUIRE_PLUGIN" not in run.env
    # Pinned to V2 unless the installed vLLM is known to have no V1 runner (the native one here).
    assert run.env.get("VLLM_USE_V2_MODEL_RUNNER") == (None if cap is NATIVE else "1")


def test_anchor_first_on_a_vllm_that_cannot_serve_it_is_refused(tmp_path: Path) -> None:
    draft = plan_for(tmp_path, "zlab-dflash2", ANCHOR_DFLASH2, UNSUPPORTED)
    assert not draft.runnable and draft.refusal_kind == "setup"
    (finding,) = [f for f in draft.findings if f.code == "DFT041"]
    assert finding.severity.value == "error"
    assert "anchor-first (sample_from_anchor=true: 7 query positions for K = 7)" in finding.message
    assert f"use {vllm_plugin_releases()} with dflash-tools installed" in finding.hint
    bonus = plan_for(tmp_path / "b", "zlab-dflash2", testing.TINY_DFLASH2, UNSUPPORTED)
    assert bonus.runnable and bonus.runs[0].serving == "stock"  # bonus-anchor drafts still run


def test_on_a_vllm_without_v1_the_plan_does_not_pin_the_runner(tmp_path: Path) -> None:
    """0.34.0: V2 is the only runner; VLLM_USE_V2_MODEL_RUNNER=1 is redundant and =0 refuses to start."""
    v034 = capability("patchable", version="0.34.0")
    draft = plan_for(tmp_path, "zlab-dflash2", ANCHOR_DFLASH2, v034)
    (run,) = draft.runs
    assert draft.runnable and run.serving == "plugin"
    assert "VLLM_USE_V2_MODEL_RUNNER" not in run.env and run.env["DFLASH_TOOLS_REQUIRE_PLUGIN"] == "1"
    v1 = plan_for(tmp_path / "v1", "zlab-dflash2", ANCHOR_DFLASH2, v034, env={"VLLM_USE_V2_MODEL_RUNNER": "0"})
    (finding,) = [f for f in v1.findings if f.code == "DFT041"]
    assert finding.severity.value == "error" and not v1.runnable
    assert "which vLLM 0.34.0 no longer has" in finding.message


def test_unregistered_plugin_is_a_setup_refusal(tmp_path: Path) -> None:
    draft = plan_for(tmp_path, "zlab-dflash", ANCHOR, capability("patchable", registered=False))
    assert draft.refusal_kind == "setup"
    assert "not registered" in next(f.message for f in draft.findings if f.code == "DFT041")
    forced = plan_for(tmp_path / "f", "zlab-dflash", ANCHOR, capability("patchable", registered=False), force=True)
    assert forced.runnable and forced.forced and forced.runs[0].serving == "unavailable"


def test_open_spec_is_a_checkpoint_refusal(tmp_path: Path) -> None:
    draft = plan_for(tmp_path, "open-spec", testing.TINY)
    assert draft.refusal_kind == "preflight"
    assert any(f.code == "DFT041" and "Open Spec" in f.message for f in draft.findings)
    torch = plan_for(tmp_path / "t", "open-spec", testing.TINY, None, engine="torch")
    assert torch.runnable and torch.runs[0].serving == "n/a"


def test_layout_only_where_vllm_does_not_read_it_is_served_through_overrides(tmp_path: Path) -> None:
    top_level_only = replace(testing.TINY, sample_from_anchor=None, extra_config={"sample_from_anchor": True})
    draft = plan_for(tmp_path, "zlab-dflash", top_level_only)
    run = draft.runs[0]
    assert run.sample_from_anchor is True and run.num_query_tokens == 8
    assert run.request is not None
    assert run.request["draft_config_overrides"] == {"dflash_config.sample_from_anchor": True}
    assert "DFT011" in [f.code for f in draft.findings]
    # speculators DSpark without the key: our default is anchor-first (docs/rules.md), vLLM 0.33.0's is not.
    dspark = plan_for(tmp_path / "d", "speculators-dspark", replace(testing.TINY_DSPARK, sample_from_anchor=None))
    assert dspark.runs[0].request is not None
    assert dspark.runs[0].request["draft_config_overrides"] == {"sample_from_anchor": True}


def test_where_vllm_reads_the_layout() -> None:
    """The table says where each release reads the layout, per dialect family (smoke-test's overlay
    writes it there): z-lab in dflash_config, speculators and native DSpark at the top level."""
    from dflash_tools import dialects
    from dflash_tools.engine_rules import get_rules
    from dflash_tools.serving.engine_model import DraftFacts
    from dflash_tools.serving.vllm_runtime import vllm_runtime

    def overrides(dialect: str, spec: testing.DraftSpec, sample_from_anchor: bool) -> dict[str, Any]:
        config = testing.make_config(dialect, spec)
        facts = DraftFacts.of(config, dialects.read(config), None, source="d", draft="d")
        return vllm_runtime(get_rules("vllm==0.33.0"), facts, sample_from_anchor).config_overrides

    assert overrides("zlab-dflash2", testing.TINY_DFLASH2, False) == {}
    assert overrides("zlab-dflash2", testing.TINY_DFLASH2, True) == {"dflash_config.sample_from_anchor": True}
    assert overrides("speculators-dflash", testing.TINY, True) == {"sample_from_anchor": True}
    native = replace(testing.TINY_DSPARK, sample_from_anchor=None)
    assert overrides("dspark-native", native, True) == {}  # absent: true on its path
    assert overrides("dspark-native", native, False) == {"sample_from_anchor": False}
    assert overrides("open-spec", testing.TINY, True) == {}  # vLLM reads no Open Spec config


def test_compare_layouts_adds_the_flipped_run(tmp_path: Path) -> None:
    draft = plan_for(tmp_path, "zlab-dflash2", testing.TINY_DFLASH2, compare_layouts=True)
    declared, flipped = draft.runs
    assert (declared.layout_role, declared.sample_from_anchor, declared.num_query_tokens) == ("declared", False, 8)
    assert (flipped.layout_role, flipped.sample_from_anchor, flipped.num_query_tokens) == ("flipped", True, 7)
    assert flipped.serving == "plugin" and flipped.slug.endswith("-flipped")
    assert flipped.request is not None and declared.request is not None
    assert flipped.request["draft_config_overrides"] == {"dflash_config.sample_from_anchor": True}
    assert flipped.request["baseline"] is False and declared.request["baseline"] is True
    assert "convolution block from 8 to 7" in draft.notes[0]
    blocked = plan_for(tmp_path / "u", "zlab-dflash2", testing.TINY_DFLASH2, UNSUPPORTED, compare_layouts=True)
    assert blocked.runnable and blocked.runs[1].skip_reason is not None


def test_requested_k_and_preflight_refusal(tmp_path: Path) -> None:
    draft = plan_for(tmp_path, "zlab-dflash", testing.TINY, num_speculative_tokens=5)
    assert (draft.runs[0].num_speculative_tokens, draft.runs[0].num_query_tokens) == (5, 6)
    assert "DFT016" in [f.code for f in draft.findings]
    dflash2 = plan_for(tmp_path / "d2", "zlab-dflash2", testing.TINY_DFLASH2, num_speculative_tokens=5)
    assert not dflash2.runnable and dflash2.refusal_kind == "preflight"
    assert "DFT013" in (dflash2.refusal or "")
    forced = plan_for(tmp_path / "f", "zlab-dflash2", testing.TINY_DFLASH2, num_speculative_tokens=5, force=True)
    assert forced.runnable and forced.notes == ["--force: launching despite 1 error finding(s)"]


def test_preflight_pairs_with_the_target(tmp_path: Path) -> None:
    draft = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", testing.TINY)
    target = tmp_path / "target"
    testing.write_target(target, replace(testing.TINY, hidden_size=128))
    options = SmokeOptions(target=str(target), drafts=[DraftEntry(str(draft))], prompts=["p"], engine="vllm")
    (plan,) = resolve_plan(options, PATCHABLE, load_target(str(target))).drafts
    assert "DFT031" in [f.code for f in plan.findings] and plan.refusal_kind == "preflight"


def test_environment(tmp_path: Path) -> None:
    run = plan_for(
        tmp_path, "zlab-dflash2", ANCHOR_DFLASH2, env={"VLLM_PLUGINS": "lora_filesystem_resolver"}, device="cuda:1"
    ).runs[0]
    assert run.env == {
        "VLLM_USE_V2_MODEL_RUNNER": "1",
        "CUDA_VISIBLE_DEVICES": "1",
        "VLLM_PLUGINS": "lora_filesystem_resolver,dflash_tools",
        "DFLASH_TOOLS_REQUIRE_PLUGIN": "1",
    }
    inherited = plan_for(
        tmp_path / "i",
        "zlab-dflash2",
        ANCHOR_DFLASH2,
        inherited_env={"VLLM_PLUGINS": "", "VLLM_USE_V2_MODEL_RUNNER": "0"},
    )
    assert inherited.runs[0].env["VLLM_PLUGINS"] == "dflash_tools"
    assert inherited.runs[0].env["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    warning = next(f for f in inherited.findings if f.code == "DFT041")
    assert warning.severity.value == "warning" and "overrides it" in warning.message
    assert inherited.runnable


def test_explicit_v1_runner_for_dflash2_is_refused(tmp_path: Path) -> None:
    draft = plan_for(tmp_path, "zlab-dflash2", testing.TINY_DFLASH2, env={"VLLM_USE_V2_MODEL_RUNNER": "0"})
    assert draft.refusal_kind == "setup"
    finding = next(f for f in draft.findings if f.code == "DFT041")
    assert "DFlash2 (V1 drafts it as plain DFlash" in finding.message
    forced = plan_for(
        tmp_path / "f", "zlab-dflash2", testing.TINY_DFLASH2, env={"VLLM_USE_V2_MODEL_RUNNER": "0"}, force=True
    )
    assert forced.runs[0].env["VLLM_USE_V2_MODEL_RUNNER"] == "0"  # --force honours what the user asked for


def test_torch_engine_plan(tmp_path: Path) -> None:
    run = plan_for(tmp_path, "zlab-dflash2", ANCHOR_DFLASH2, None, engine="torch", device="cpu", dtype="float32").runs[
        0
    ]
    assert (run.runner, run.serving, run.env) == ("n/a", "n/a", {})
    assert run.request is not None
    assert run.request["engine"] == "torch"
    assert (run.request["device"], run.request["dtype"]) == ("cpu", "float32")
    assert "speculative_config" not in run.request


def test_floors_and_expectations(tmp_path: Path) -> None:
    floor = Floor(mean_acceptance_length=4.0, provenance="docs/rules.md, Reference numbers")
    entry_floor = plan_for(tmp_path, "zlab-dflash", testing.TINY)
    assert entry_floor.floor == SANITY_FLOOR
    draft = testing.write_checkpoint(tmp_path / "d2", "zlab-dflash", testing.TINY)
    target = tmp_path / "target"
    entry = DraftEntry(str(draft), floor=floor, expect={"layout": "anchor-first", "num_query_tokens": 8})
    options = SmokeOptions(target=str(target), drafts=[entry], prompts=["p"], engine="vllm")
    (plan,) = resolve_plan(options, PATCHABLE, load_target(str(target))).drafts
    assert plan.floor == floor
    assert plan.notes == [
        "expected layout 'anchor-first' (preset) but the draft's config resolves to 'bonus-anchor': "
        "the published config may have changed"
    ]


def test_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no draft"):
        resolve_plan(SmokeOptions(target="x", drafts=[], prompts=["p"]), None, None)
    missing = SmokeOptions(target=str(tmp_path), drafts=[DraftEntry(str(tmp_path / "nope"))], prompts=["p"])
    (plan,) = resolve_plan(missing, None, None).drafts
    assert plan.refusal_kind == "setup" and not plan.runs
