"""The K that pays: `-k 3,5,7` runs each K; one run's numbers predict the speed-up of every K.

Measured: each K in the sweep is a run of its own (mean acceptance length, acceptance per
position, tokens per second, speed-up against the target alone); the best K is the one with the
most tokens per second (the same ordering as the speed-up, and defined without a baseline too).

Predicted, for every K from 1 to the trained K, from ONE run (the reference: the measured run
with the largest K, which saw the most positions) and the target alone:

    E(K)     = 1 + rate_0 + ... + rate_(K-1)      tokens per draft step, from the reference's
                                                  acceptance per position (rate_i = how often
                                                  positions 0..i were all accepted)
    step(K)  = draft + verify(K)                  seconds per draft step
    draft    = drafting time / draft steps        measured in the reference; one block-parallel
                                                  forward per step, taken as independent of K
    verify(K) = target + (verify_r - target) x K / K_r
                                                  linear in the tokens verified, through two
                                                  measured points: the target alone (one token
                                                  per forward: its seconds per token) and the
                                                  reference (everything but drafting, per step)
    speedup(K) = speedup_r x (E(K) / E(K_r)) x (step(K_r) / step(K))

so the prediction equals the measurement at K_r by construction, and the other measured K show
how far the model is off. Its assumptions: a shorter block proposes the same first tokens (the
draft sees fewer mask positions, which can change them slightly), drafting costs the same at
every K (true where the draft's forward is latency-bound, as on a GPU at small batch; on a CPU it
grows with the query positions), and verification grows linearly between the two points.
DFlash2 drafts serve only their trained K (the convolution block is the query positions,
`draft.geometry`): the sweep says so and predicts nothing else.

How sure: each measured K's tokens per second is the median of its timed repetitions, with their
spread (`smoke.timing`). A K is named best only when its slowest repetition beats every other
K's fastest; otherwise the section says which K its spread cannot separate. A measured K whose
spread overlaps another's is marked too wide to rank K by.

The prediction is checked against every other measured K (`prediction_check`): off by more than
PREDICTION_TOLERANCE and beyond that K's spread, the model does not hold there, and the section
says why when the runs show it (drafting or verifying time per step that grows with K, where the
model takes drafting as constant).

Pure functions over contract results; nothing here runs an engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.smoke import timing
from dflash_tools.smoke.timing import Spread

# How far a prediction may miss a measured K before the model is said not to hold there.
PREDICTION_TOLERANCE = 0.15
# Per-step costs that differ by more than this share between two K are said to grow with K.
COST_GROWTH = 0.25


@dataclass(frozen=True)
class CostModel(JsonDocument):
    """The reference run's measured costs per draft step and the target alone's per token."""

    reference_k: int
    # Acceptance per position of the reference run, length reference_k.
    rates: tuple[float, ...] = field(metadata=json_rules(name="acceptance_rate_per_position"))
    measured_speedup: float
    draft_step_s: float
    verify_step_s: float  # everything but drafting, per draft step, at reference_k
    target_token_s: float  # the target alone, seconds per generated token

    def mean_acceptance_length(self, k: int) -> float:
        return 1.0 + sum(self.rates[:k])

    def verify_s(self, k: int) -> float:
        # Verifying more tokens never costs less: a reference faster per step than the target alone
        # per token (noise, or batching gains) is read as a flat cost.
        slope = max(0.0, self.verify_step_s - self.target_token_s) / self.reference_k
        return self.target_token_s + slope * k

    def step_s(self, k: int) -> float:
        return self.draft_step_s + self.verify_s(k)

    def speedup(self, k: int) -> float:
        reference = self.mean_acceptance_length(self.reference_k) / self.step_s(self.reference_k)
        return self.measured_speedup * (self.mean_acceptance_length(k) / self.step_s(k)) / reference


def cost_model(result: contract.SmokeResult, baseline: contract.BaselineResult | None, k: int) -> CostModel | str:
    """The cost model of one run at K, or why there is none (a sentence)."""
    if not result["ok"]:
        return "the reference run failed"
    drafts = result["num_drafts"]
    if drafts == 0:
        return "the reference run made no draft steps"
    if baseline is None or baseline["output_tokens"] == 0 or baseline["elapsed_s"] <= 0:
        return "the target-alone run is missing (it anchors the speed-up; drop --no-baseline)"
    draft_s = result.get("draft_time_s")
    if draft_s is None:
        return "the engine did not report its drafting time"
    if result["elapsed_s"] <= 0 or baseline["tokens_per_second"] <= 0:
        return "the reference run has no measured time"
    rates = list(result["acceptance_rate_per_position"])[:k]
    if len(rates) < k:
        return f"the reference run reported acceptance for {len(rates)} of its {k} positions"
    return CostModel(
        reference_k=k,
        rates=tuple(rates),
        measured_speedup=result["tokens_per_second"] / baseline["tokens_per_second"],
        draft_step_s=draft_s / drafts,
        verify_step_s=max(0.0, result["elapsed_s"] - draft_s) / drafts,
        target_token_s=baseline["elapsed_s"] / baseline["output_tokens"],
    )


@dataclass(frozen=True)
class SweepRun:
    """One measured (or skipped) K of a sweep, as the report has it."""

    num_speculative_tokens: int
    num_query_tokens: int | None
    result: contract.SmokeResult | None
    skip_reason: str | None = None
    status: str = "planned"  # the run's verdict status


def _best(rows: Sequence[dict[str, Any]], key: str, *fields: str) -> dict[str, Any] | None:
    """The row with the highest `key` (the smaller K on a tie), as K and `fields`."""
    candidates = [row for row in rows if row.get(key) is not None]
    if not candidates:
        return None
    best = max(candidates, key=lambda row: (row[key], -row["num_speculative_tokens"]))
    return {"num_speculative_tokens": best["num_speculative_tokens"], **{name: best[name] for name in fields}}


def _ranking(measured: dict[int, Spread], rows: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """The best measured K when its spread separates it from every other, else why none is named.
    Marks each measured row `too_wide_to_rank` when its spread overlaps another K's."""
    for row in rows:
        k = row["num_speculative_tokens"]
        if k in measured:
            mine = measured[k]
            row["too_wide_to_rank"] = len(measured) > 1 and any(
                not (mine.ahead_of(other) or other.ahead_of(mine)) for j, other in measured.items() if j != k
            )
    fastest = _best(rows, "tokens_per_second", "tokens_per_second", "speedup")
    if fastest is None:
        return None, None
    k = fastest["num_speculative_tokens"]
    others = {j: other for j, other in measured.items() if j != k}
    if not others:
        return fastest, None
    if measured[k].samples < 2:
        return None, "one timed run per K: no spread to rank K by (drop --repeat 1, or pass --repeat N)"
    tied = sorted(j for j, other in others.items() if not measured[k].ahead_of(other))
    if tied:
        listed = ", ".join(f"K = {j}" for j in tied)
        return None, (
            f"K = {k} has the highest median, but its spread overlaps {listed}: no best K (longer runs, "
            "--max-tokens or --num-prompts, or more repetitions, --repeat N, may separate them)"
        )
    return fastest, None


def _prediction_check(model: CostModel, rows: list[dict[str, Any]], runs: dict[int, SweepRun]) -> dict[str, Any] | None:
    """The prediction against every measured K but the reference: its error, and whether the
    model holds (within PREDICTION_TOLERANCE, or within the measurement's own spread)."""
    checked = []
    for row in rows:
        k = row["num_speculative_tokens"]
        if k == model.reference_k or row["speedup"] is None or row["predicted_speedup"] is None:
            continue
        spread = row.get("speedup_spread") or {}
        error = row["predicted_speedup"] / row["speedup"] - 1
        inside = spread.get("samples", 1) > 1 and spread["low"] <= row["predicted_speedup"] <= spread["high"]
        checked.append({"num_speculative_tokens": k, "error": error, "within_spread": inside})
    if not checked:
        return None
    misses = [c for c in checked if abs(c["error"]) > PREDICTION_TOLERANCE and not c["within_spread"]]
    return {
        "tolerance": PREDICTION_TOLERANCE,
        "checked": checked,
        "holds": not misses,
        "why_not": _why_not(model, misses, runs) if misses else None,
    }


def _per_step(run: SweepRun) -> tuple[float, float] | None:
    """(drafting, the rest) seconds per draft step of a measured run."""
    result = run.result
    if result is None or not result["ok"] or not result["num_drafts"] or result.get("draft_time_s") is None:
        return None
    drafting = float(result.get("draft_time_s") or 0.0)
    return drafting / result["num_drafts"], max(0.0, result["elapsed_s"] - drafting) / result["num_drafts"]


def _why_not(model: CostModel, misses: list[dict[str, Any]], runs: dict[int, SweepRun]) -> str:
    """The sentence that says where the model misses, and why where the measured steps show it."""
    worst = max(misses, key=lambda c: abs(c["error"]))
    k = worst["num_speculative_tokens"]
    sentence = (
        f"the prediction misses the measured speed-up at K = {k} by {worst['error']:+.0%}, beyond its spread: "
        "the model does not hold here"
    )
    mine, reference = _per_step(runs[k]), _per_step(runs[model.reference_k])
    if mine is None or reference is None:
        return sentence
    causes = []
    for index, name in ((0, "drafting"), (1, "verifying")):
        low, high = sorted((mine[index], reference[index]))
        if high > 0 and (high - low) / high > COST_GROWTH:
            causes.append(
                f"{name} takes {mine[index] * 1000:.2f} ms per step at K = {k} and "
                f"{reference[index] * 1000:.2f} ms at K = {model.reference_k}"
            )
    if causes:
        sentence += (
            " (" + "; ".join(causes) + "; the model takes drafting as the same at every K and verifying as linear "
            "from the target alone, which holds where the forwards are latency-bound, as on a GPU at small batch, "
            "not on a CPU, where each costs by the positions it computes)"
        )
    return sentence


def summarize(
    runs: Sequence[SweepRun],
    baseline: contract.BaselineResult | None,
    *,
    trained_k: int,
    single_k_only: str | None = None,
) -> dict[str, Any]:
    """The `k_sweep` section of a draft: one row per K (measured, predicted or both), the best K.

    `single_k_only`: why only the trained K can be served (DFlash2); nothing else is predicted.
    """
    measured = {run.num_speculative_tokens: run for run in runs}
    reference = max(
        (run for run in runs if run.result is not None and run.result["ok"] and run.result["num_drafts"]),
        key=lambda run: run.num_speculative_tokens,
        default=None,
    )
    notes: list[str] = []
    model: CostModel | str
    if reference is None:
        model = "no run of the sweep completed with draft steps"
    else:
        assert reference.result is not None
        model = cost_model(reference.result, baseline, reference.num_speculative_tokens)
    predicted_ks: list[int] = []
    if isinstance(model, CostModel):
        if single_k_only is not None:
            predicted_ks = [model.reference_k] if model.reference_k == trained_k else []
        else:
            predicted_ks = list(range(1, min(model.reference_k, trained_k) + 1))
            if model.reference_k < trained_k:
                notes.append(
                    f"acceptance was measured for positions up to K = {model.reference_k} only; "
                    f"add K = {trained_k} (the trained K) to predict up to it"
                )
    if single_k_only is not None:
        notes.append(single_k_only)
    alone = timing.baseline_tokens_per_second(baseline)
    spreads: dict[int, Spread] = {}
    rows = []
    for k in sorted(set(measured) | set(predicted_ks)):
        run = measured.get(k)
        result = run.result if run is not None else None
        ok = result is not None and result["ok"]
        speed = timing.tokens_per_second(result) if ok else None
        if speed is not None:
            spreads[k] = speed
        ratio = timing.speedup(speed, alone)
        row: dict[str, Any] = {
            "num_speculative_tokens": k,
            "num_query_tokens": run.num_query_tokens if run is not None else None,
            "status": run.status if run is not None else "predicted",
            "skip_reason": run.skip_reason if run is not None else None,
            "mean_acceptance_length": result["mean_acceptance_length"] if ok and result else None,
            "acceptance_rate_per_position": list(result["acceptance_rate_per_position"]) if ok and result else None,
            "tokens_per_second": result["tokens_per_second"] if ok and result else None,
            "speedup": (
                result["tokens_per_second"] / baseline["tokens_per_second"]
                if ok and result and baseline and baseline["tokens_per_second"] > 0
                else None
            ),
            "tokens_per_second_spread": speed.to_dict() if speed else None,
            "speedup_spread": ratio.to_dict() if ratio else None,
            "too_wide_to_rank": False,
            "predicted_mean_acceptance_length": None,
            "predicted_speedup": None,
        }
        if isinstance(model, CostModel) and k in predicted_ks:
            row["predicted_mean_acceptance_length"] = model.mean_acceptance_length(k)
            row["predicted_speedup"] = model.speedup(k)
        rows.append(row)
    best, no_best = _ranking(spreads, rows)
    check = _prediction_check(model, rows, measured) if isinstance(model, CostModel) else None
    if check is not None and check["why_not"]:
        notes.append(check["why_not"])
    return {
        "trained_k": trained_k,
        "k_values": sorted(measured),
        "rows": rows,
        "best_measured": best,
        "fastest_measured": _best(rows, "tokens_per_second", "tokens_per_second", "speedup"),
        "no_best_measured": no_best,
        "prediction_check": check,
        "best_predicted": _best(rows, "predicted_speedup", "predicted_speedup"),
        "prediction": {
            "available": isinstance(model, CostModel),
            "reason": None if isinstance(model, CostModel) else model,
            "model": model.to_dict() if isinstance(model, CostModel) else None,
        },
        "notes": notes,
    }
