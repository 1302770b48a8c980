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

Pure functions over contract results; nothing here runs an engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dflash_tools import smoke_contract as contract


@dataclass(frozen=True)
class CostModel:
    """The reference run's measured costs per draft step and the target alone's per token."""

    reference_k: int
    rates: tuple[float, ...]  # acceptance per position of the reference run, length reference_k
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference_k": self.reference_k,
            "acceptance_rate_per_position": list(self.rates),
            "measured_speedup": self.measured_speedup,
            "draft_step_s": self.draft_step_s,
            "verify_step_s": self.verify_step_s,
            "target_token_s": self.target_token_s,
        }


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
    rows = []
    for k in sorted(set(measured) | set(predicted_ks)):
        run = measured.get(k)
        result = run.result if run is not None else None
        ok = result is not None and result["ok"]
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
            "predicted_mean_acceptance_length": None,
            "predicted_speedup": None,
        }
        if isinstance(model, CostModel) and k in predicted_ks:
            row["predicted_mean_acceptance_length"] = model.mean_acceptance_length(k)
            row["predicted_speedup"] = model.speedup(k)
        rows.append(row)
    return {
        "trained_k": trained_k,
        "k_values": sorted(measured),
        "rows": rows,
        "best_measured": _best(rows, "tokens_per_second", "tokens_per_second", "speedup"),
        "best_predicted": _best(rows, "predicted_speedup", "predicted_speedup"),
        "prediction": {
            "available": isinstance(model, CostModel),
            "reason": None if isinstance(model, CostModel) else model,
            "model": model.to_dict() if isinstance(model, CostModel) else None,
        },
        "notes": notes,
    }
