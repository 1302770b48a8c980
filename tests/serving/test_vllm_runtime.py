"""One answer to "how does this vLLM release run this draft": `inspect --engine`, `plan` and
smoke-test all take the method, the runner and its environment from `serving.vllm_runtime`.

The regression: a speculators DFlash draft whose `transformer_layer_config.layer_types` mixes
sliding and full attention needs vLLM 0.33.0's V2 runner (its V1 runner refuses "mixed
sliding/full dflash drafts", docs/engines.md), so every launch line for it selects V2. The engine
column once read the config's top-level `layer_types`, which a speculators config does not have.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import dflash_tools_testing as testing
from dflash_tools import dialects
from dflash_tools.cli import app
from dflash_tools.draft.target import load_target
from dflash_tools.engine_rules import ENGINE_RULES, VLLM_V2_ENV, get_rules
from dflash_tools.plan.presets import DraftEntry
from dflash_tools.serving.engine_model import DraftFacts
from dflash_tools.serving.vllm_capability import VllmCapability
from dflash_tools.serving.vllm_runtime import mixed_attention, vllm_runtime
from dflash_tools.smoke.options import SmokeOptions
from dflash_tools.smoke.plan import resolve_plan

VLLM33, VLLM34 = "vllm==0.33.0", "vllm==0.34.0"
MIXED = replace(testing.TINY, layer_types=("sliding_attention", "full_attention"))


def installed(version: str, *, has_v1_runner: bool) -> VllmCapability:
    return VllmCapability(
        installed=True,
        version=version,
        location=None,
        support="patchable",
        reason="stock",
        plugin_registered=True,
        plugin_allowed=True,
        has_v1_runner=has_v1_runner,
    )


@pytest.fixture
def mixed_pair(tmp_path: Path) -> tuple[Path, Path]:
    draft = testing.write_checkpoint(tmp_path / "specmix", "speculators-dflash", MIXED)
    target = testing.write_target(tmp_path / "target", MIXED)
    config = json.loads((draft / "config.json").read_text())
    # What makes it the regression: the layer types live in transformer_layer_config only.
    assert "layer_types" not in config
    assert config["transformer_layer_config"]["layer_types"] == ["sliding_attention", "full_attention"]
    return draft, target


def test_inspect_engine_selects_v2_for_a_mixed_speculators_draft(mixed_pair: tuple[Path, Path]) -> None:
    draft, target = mixed_pair
    result = CliRunner().invoke(app, ["inspect", str(draft), "--engine", f"{VLLM33},{VLLM34}", "--json"])
    assert result.exit_code == 0, result.output
    engines = json.loads(result.stdout)["engines"]
    assert engines[VLLM33]["outcome"] == "served"
    assert engines[VLLM33]["launch_environment"] == {VLLM_V2_ENV: "1"}
    assert engines[VLLM33]["launch_command"].startswith(f"{VLLM_V2_ENV}=1 vllm serve")
    assert engines[VLLM34]["launch_environment"] == {}  # V2 is its only runner


def test_smoke_dry_run_agrees(mixed_pair: tuple[Path, Path]) -> None:
    draft, target = mixed_pair
    result = CliRunner().invoke(
        app, ["smoke-test", "-t", str(target), "-d", str(draft), "--engine", "vllm", "--dry-run", "--json"]
    )
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.stdout)["drafts"][0]["runs"]
    assert (run["runner"], run["env"].get(VLLM_V2_ENV)) == ("v2", "1")
    assert run["request"]["speculative_config"]["method"] == "dflash"


def test_smoke_plan_on_the_installed_release_agrees(mixed_pair: tuple[Path, Path]) -> None:
    draft, target = mixed_pair
    options = SmokeOptions(target=str(target), drafts=[DraftEntry(str(draft))], prompts=["p"], engine="vllm")
    for version, has_v1_runner, env in (("0.33.0", True, {VLLM_V2_ENV: "1"}), ("0.34.0", False, {})):
        plan = resolve_plan(options, installed(version, has_v1_runner=has_v1_runner), load_target(str(target)))
        (run,) = plan.drafts[0].runs
        assert {k: v for k, v in run.env.items() if k == VLLM_V2_ENV} == env, version
        assert run.runner == "v2", version


CASES = [
    ("zlab-dflash", testing.TINY),
    ("zlab-dflash", replace(testing.TINY, sample_from_anchor=True)),
    ("zlab-dflash", MIXED),
    ("zlab-dflash2", testing.TINY_DFLASH2),
    ("speculators-dflash", testing.TINY),
    ("speculators-dflash", MIXED),
    ("speculators-dflash", replace(MIXED, layer_types=("full_attention", "full_attention"))),
    ("speculators-dflash2", testing.TINY_DFLASH2),
    ("speculators-dspark", testing.TINY_DSPARK),
    ("dspark-native", testing.TINY_DSPARK),
]


@pytest.mark.parametrize(("dialect", "spec"), CASES)
def test_the_engine_column_and_smoke_test_give_one_answer(
    tmp_path: Path, dialect: str, spec: testing.DraftSpec
) -> None:
    """For every dialect and layout: the launch line of `inspect --engine vllm==0.33.0` and the
    smoke-test run on an installed 0.33.0 set the same runner variable and the same method."""
    draft = testing.write_checkpoint(tmp_path / "draft", dialect, spec)
    target = testing.write_target(tmp_path / "target", spec)
    result = CliRunner().invoke(app, ["inspect", str(draft), "--engine", VLLM33, "--json"])
    view = json.loads(result.stdout)["engines"][VLLM33]
    assert view["launch"] is not None, view["refusal"]
    speculative = json.loads(view["launch"][view["launch"].index("--speculative-config") + 1])
    options = SmokeOptions(target=str(target), drafts=[DraftEntry(str(draft))], prompts=["p"], engine="vllm")
    plan = resolve_plan(options, installed("0.33.0", has_v1_runner=True), load_target(str(target)))
    (run,) = plan.drafts[0].runs
    assert run.request is not None
    assert run.env.get(VLLM_V2_ENV) == view["launch_environment"].get(VLLM_V2_ENV)
    assert run.request["speculative_config"]["method"] == speculative["method"]


def facts(dialect: str, spec: testing.DraftSpec) -> DraftFacts:
    config = testing.make_config(dialect, spec)
    return DraftFacts.of(config, dialects.read(config), None, source="d", draft="d")


def test_the_runner_rules_are_the_tables() -> None:
    """0.33.0's table lists what only V2 serves; 0.34.0 has no V1 runner and no such rules; a vLLM
    without a table pins V2 with the same rules, to be safe."""
    v33, v34 = get_rules(VLLM33), get_rules(VLLM34)
    assert v33 is not None and v34 is not None
    assert v33.has_v1_runner and v33.v2_only and not v34.has_v1_runner and not v34.v2_only
    dflash2 = facts("zlab-dflash2", testing.TINY_DFLASH2)
    on_33 = vllm_runtime(v33, dflash2, False)
    assert on_33.v2_reasons == ("DFlash2 (V1 drafts it as plain DFlash without its candidate selector)",)
    assert (on_33.environment, on_33.runner, on_33.method) == ({VLLM_V2_ENV: "1"}, "v2", "dflash")
    assert vllm_runtime(v34, dflash2, False).environment == {}
    assert vllm_runtime(None, dflash2, False).environment == {VLLM_V2_ENV: "1"}
    assert vllm_runtime(None, dflash2, False, has_v1_runner=False).environment == {}
    bonus = vllm_runtime(v33, facts("zlab-dflash", testing.TINY), False)
    assert (bonus.v2_reasons, bonus.environment, bonus.runner) == ((), {}, "auto")
    anchor = vllm_runtime(v33, facts("zlab-dflash", testing.TINY), True)
    assert anchor.needs_plugin and "anchor-first layout" in anchor.v2_reasons[0]
    dspark = vllm_runtime(v33, facts("dspark-native", testing.TINY_DSPARK), True)
    assert (dspark.method, dspark.needs_plugin, dspark.v2_reasons) == (
        "dspark",
        False,
        ("DSpark (implemented by the V2 runner only)",),
    )


@pytest.mark.parametrize(
    ("layer_types", "mixed"),
    [
        (("sliding_attention", "full_attention"), True),
        (("sliding_attention", "sliding_attention"), False),
        (("full_attention", "full_attention"), False),
        (None, False),
        ((), False),
    ],
)
def test_mixed_attention_is_vllms_own_test(layer_types: Any, mixed: bool) -> None:
    assert mixed_attention(layer_types) is mixed


def test_every_table_cites_its_runner_rules() -> None:
    """The tiers check every cite against the release's sources; the runner rules are among them."""
    for rules in ENGINE_RULES.values():
        assert all(rule.cite in rules.cites() for rule in rules.v2_only)
