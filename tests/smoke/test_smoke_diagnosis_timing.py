"""What a smoke-test says beside its numbers: why acceptance likely collapsed (`smoke.diagnosis`),
how sure a timed figure is (`smoke.timing`, the contract's `timing`), and a dry run whose draft
cannot be read (a failed preflight, not an environment).

The plans are real (`resolve_plan` over checkpoints the fixture factory writes) and the torch
engine runs for real; the results of the diagnosis tests are contract documents with the
acceptance shape each cause leaves.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import dflash_tools_testing as testing
from dflash_tools import smoke_contract as contract
from dflash_tools.cli import app
from dflash_tools.cli.smoke_test_run import render
from dflash_tools.draft.target import load_target
from dflash_tools.plan.presets import DraftEntry, Floor
from dflash_tools.smoke import report, timing
from dflash_tools.smoke.options import MIN_TIMED_S, SmokeOptions, resolve_options
from dflash_tools.smoke.plan import resolve_plan
from tests.torch_extra import require_torch_extra

runner = CliRunner()
FLOOR = Floor(mean_acceptance_length=3.0, first_position_rate=0.5, provenance="test")


def plan_for(tmp_path: Path, k: int = 3) -> Any:
    spec = testing.TINY
    draft = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", spec)
    target = tmp_path / "target"
    testing.write_target(target, spec)
    options = SmokeOptions(
        target=str(target),
        drafts=[DraftEntry(str(draft))],
        prompts=["p"],
        engine="vllm",
        num_speculative_tokens=k,
        floor=FLOOR,
        prefix_caching_check=False,
    )
    return resolve_plan(options, None, load_target(str(target)))


def outcome(rates: list[float], drafts: int = 100) -> Any:
    accepted = [round(rate * drafts) for rate in rates]
    document = contract.failed_result("vllm", "")
    document.update(
        ok=True,
        error=None,
        num_drafts=drafts,
        num_draft_tokens=drafts * len(rates),
        num_accepted_tokens=sum(accepted),
        accepted_per_position=accepted,
        acceptance_rate_per_position=rates,
        mean_acceptance_length=1 + sum(accepted) / drafts,
        output_tokens=drafts + sum(accepted),
        elapsed_s=1.0,
        tokens_per_second=float(drafts + sum(accepted)),
    )
    return contract.validate_result(document)


def judged(tmp_path: Path, rates: list[float]) -> dict[str, Any]:
    plan = plan_for(tmp_path, len(rates))
    run = plan.drafts[0].runs[0]
    return report.build_document(plan, {run.slug: outcome(rates)}, mode="offline", work_dir=None)


def rendered(document: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buffer)
    render(document, no_color=True)
    return " ".join(buffer.getvalue().split())


# --- why acceptance collapsed ----------------------------------------------------------------------


def test_a_collapsed_first_position_points_at_what_the_draft_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = judged(tmp_path, [0.1, 0.05, 0.0])
    (draft,) = document["drafts"]
    verdict = draft["verdict"]
    assert verdict["status"] == "fail"
    found = verdict["diagnosis"]
    assert found["kind"] == "context"
    assert found["evidence"].startswith("position-0 acceptance 0.10 is below 0.50")
    layers = testing.TINY.target_layer_ids
    taps = next(cause for cause in found["likely"] if "target_layer_ids" in cause)
    assert f"target_layer_ids {list(layers)} of the target's" in taps
    assert any("the target it is paired with" in cause for cause in found["likely"])
    # Without --compare-layouts the layout is not ruled out: the diagnosis says how to.
    assert any("--compare-layouts" in cause for cause in found["likely"])
    assert draft["runs"][0]["verdict"]["diagnosis"] == found
    text = rendered(document, monkeypatch)
    assert "why: position-0 acceptance 0.10 is below 0.50" in text
    assert f"1. the target layers it taps: target_layer_ids {list(layers)}" in text


def test_a_chain_that_breaks_later_is_not_blamed_on_the_taps(tmp_path: Path) -> None:
    found = judged(tmp_path, [0.9, 0.3, 0.1])["drafts"][0]["verdict"]["diagnosis"]
    assert found["kind"] == "chain"
    assert "falls to 0.30 at position 1" in found["evidence"]
    assert not any("target_layer_ids" in cause for cause in found["likely"])


def test_a_passing_run_has_no_diagnosis(tmp_path: Path) -> None:
    verdict = judged(tmp_path, [0.9, 0.8, 0.7])["drafts"][0]["verdict"]
    assert verdict["status"] == "pass" and "diagnosis" not in verdict


# --- how sure a timed figure is ----------------------------------------------------------------------


def test_the_repetition_policy() -> None:
    request: Any = {"timing": {"min_repeats": 3, "max_repeats": 5, "min_timed_s": 2.0, "budget_s": 10.0}}
    assert contract.more_repetitions(request, [0.5, 0.5])  # under the minimum count
    assert contract.more_repetitions(request, [0.5, 0.5, 0.5])  # 1.5 s < 2 s
    assert not contract.more_repetitions(request, [1.0, 1.0, 1.0])  # both reached
    assert not contract.more_repetitions(request, [0.1] * 5)  # the most repetitions
    assert not contract.more_repetitions(request, [0.5], spent=10.0)  # the budget is spent
    assert not contract.more_repetitions({}, [0.1])  # no timing: one repetition
    for bad in ({"min_repeats": 0}, {"min_repeats": 3, "max_repeats": 2}, {"min_timed_s": float("nan")}):
        with pytest.raises(contract.ContractError, match="timing"):
            contract.repetition_policy({"timing": bad})  # type: ignore[typeddict-item]


def test_spreads_and_the_speedup_range() -> None:
    speculation = timing.spread_of([100.0, 120.0, 110.0])
    alone = timing.spread_of([50.0, 55.0, 45.0])
    assert speculation == timing.Spread(110.0, 100.0, 120.0, 3)
    ratio = timing.speedup(speculation, alone)
    assert ratio is not None
    assert (ratio.median, ratio.low, ratio.high) == pytest.approx((2.2, 100 / 55, 120 / 45))
    assert speculation.ahead_of(alone) and not alone.ahead_of(speculation)
    assert not timing.Spread(1.0, 1.0, 1.0, 1).ahead_of(timing.Spread(0.5, 0.5, 0.5, 1))  # one run ranks nothing
    # A speed-up whose spread straddles 1 is not called slower (nor faster).
    warning = report.speed_warning(0.95, None, None, timing.Spread(0.95, 0.85, 1.1, 3))
    assert warning is not None and warning.startswith("as fast as the target alone within the spread")


def test_min_time_and_repeat_reach_the_request(tmp_path: Path) -> None:
    base = {"target": None, "drafts": ["example:engine-demo/zlab-dflash"], "dry_run": True}
    defaults = resolve_options(_arguments(**base))
    assert defaults.timing() == {"min_repeats": 3, "max_repeats": 50, "min_timed_s": MIN_TIMED_S}
    assert resolve_options(_arguments(**base, min_time=0.0)).timing()["min_timed_s"] == 0.0
    assert resolve_options(_arguments(**base, repeat=2)).timing() == {
        "min_repeats": 2,
        "max_repeats": 2,
        "min_timed_s": 0.0,
    }


def test_the_torch_engine_repeats_each_timed_run(tmp_path: Path) -> None:
    require_torch_extra()
    outcome = runner.invoke(
        app,
        [
            "smoke-test", "--runtime", "torch", "--device", "cpu", "-t", "example:engine-demo/target",
            "-d", "example:engine-demo/zlab-dflash", "--num-prompts", "1", "--max-tokens", "16", "--repeat", "3",
            "--output-dir", str(tmp_path / "work"), "--json",
        ],
    )  # fmt: skip
    document = json.loads(outcome.stdout)
    assert outcome.exit_code == 0, document
    (run,) = document["drafts"][0]["runs"]
    result = run["result"]
    assert result["timing"]["repeats"] == 3 and len(result["timing"]["elapsed_s"]) == 3
    assert result["baseline"]["timing"]["repeats"] == 3
    # The reported window is the median repetition's.
    median = result["timing"]["median"]
    assert result["elapsed_s"] == result["timing"]["elapsed_s"][median]
    speed = run["tokens_per_second_spread"]
    rates = sorted(t / s for t, s in zip(result["timing"]["output_tokens"], result["timing"]["elapsed_s"], strict=True))
    assert (speed["low"], speed["median"], speed["high"], speed["samples"]) == pytest.approx((*rates, 3))
    assert run["speedup_spread"]["samples"] == 3


# --- a dry run whose draft cannot be read -------------------------------------------------------------


def test_a_dry_run_with_an_unreadable_draft_fails_its_preflight(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-draft")
    arguments = ["smoke-test", "-t", "example:engine-demo/target", "-d", missing, "--dry-run"]
    document = json.loads(runner.invoke(app, [*arguments, "--json"]).stdout)
    (draft,) = document["drafts"]
    assert document["exit_code"] == 2
    assert draft["preflight"]["ok"] is False
    assert draft["preflight"]["error"]["kind"] == "source" and "no such file" in draft["preflight"]["error"]["message"]
    text = runner.invoke(app, [*arguments, "--no-color"], env={"COLUMNS": "200"}).stdout
    lines = text.splitlines()
    where = next(i for i, line in enumerate(lines) if line.startswith("preflight: "))
    assert lines[where + 1].startswith("  cannot read the draft: ")
    (row,) = [line for line in lines if line.startswith(missing) and "refused" in line]
    assert row.split()[-1] == "-"  # the environment column holds no error


def _arguments(**given: Any) -> Any:
    """The command line's options as `resolve_options` reads them (`smoke.arguments.SmokeArguments`),
    with the checks these tests do not exercise off."""
    from dflash_tools.smoke.arguments import SmokeArguments

    return SmokeArguments(**{**{"prefix_caching_check": True, "cross_check": False}, **given})
