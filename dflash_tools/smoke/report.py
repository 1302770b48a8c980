"""Verdicts and the result document of `smoke-test` (one JSON document, schema_version 1).

A run passes when it completed, drafted, and its mean acceptance length and position-0
acceptance reach the draft's floor; it also fails when the engine drafted another number of
positions or ran another number of query positions than planned (a layout that was not honoured).
Greedy output that differs from the target alone is reported, and fails the run only with
`require_identical` (numerics of batched verification can flip a rare token).

`--compare-layouts` runs the flipped layout too: the declared one must win clearly (by
`CLEAR_MARGIN` in mean acceptance length and at position 0); when the flipped one wins, the
checkpoint's `sample_from_anchor` looks mislabeled and the draft fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dflash_tools.draft.geometry import layout_name
from dflash_tools.smoke import contract
from dflash_tools.smoke.plan import DraftPlan, RunPlan, SmokePlan
from dflash_tools.smoke.presets import Floor

SCHEMA_VERSION = 1
CLEAR_MARGIN = 0.10

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_SETUP = 2


@dataclass
class Verdict:
    status: str  # "pass" | "fail" | "error" | "refused" | "skipped" | "planned"
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reasons": list(self.reasons), "warnings": list(self.warnings)}


def token_identity(outputs: list[list[int]], baseline: list[list[int]]) -> dict[str, Any]:
    """Prompt-by-prompt comparison of greedy outputs with and without speculation."""
    identical = 0
    first: dict[str, int] | None = None
    for index, (ours, theirs) in enumerate(zip(outputs, baseline, strict=False)):
        if ours == theirs:
            identical += 1
            continue
        if first is None:
            position = next(
                (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs))
            )
            first = {"prompt": index, "position": position}
    comparable = len(outputs) == len(baseline) and bool(outputs)
    return {
        "token_identical": comparable and identical == len(outputs),
        "identical_prompts": identical,
        "prompts": len(outputs),
        "first_mismatch": first,
    }


def judge_run(
    run: RunPlan,
    result: contract.SmokeResult | None,
    floor: Floor,
    *,
    identity: dict[str, Any] | None,
    require_identical: bool = False,
) -> Verdict:
    if run.skip_reason is not None:
        return Verdict("skipped", [run.skip_reason])
    if result is None:
        return Verdict("planned")
    if not result["ok"]:
        return Verdict("error", [result["error"] or "the run failed"])
    verdict = Verdict("pass")
    k = run.num_speculative_tokens
    drafts = result["num_drafts"]
    mean = result["mean_acceptance_length"]
    rates = result["acceptance_rate_per_position"]
    if drafts == 0:
        verdict.reasons.append("no draft steps were made: speculation did not run")
    elif result["num_accepted_tokens"] == 0:
        verdict.reasons.append(f"0 of {result['num_draft_tokens']} draft tokens accepted")
    if floor.mean_acceptance_length is not None and drafts and mean < floor.mean_acceptance_length:
        verdict.reasons.append(
            f"mean acceptance length {mean:.2f} is below the floor {floor.mean_acceptance_length:.2f}"
        )
    if floor.first_position_rate is not None and rates and rates[0] < floor.first_position_rate:
        verdict.reasons.append(f"position-0 acceptance {rates[0]:.2f} is below {floor.first_position_rate:.2f}")
    positions = len(result["accepted_per_position"])
    if drafts and positions != k:
        verdict.reasons.append(f"the engine drafted {positions} positions per step, the plan asked for K = {k}")
    observed = result["query_positions_per_step"] or []
    wrong = sorted({q for q in observed if q != run.num_query_tokens})
    if wrong and run.num_query_tokens is not None and run.sample_from_anchor is not None:
        verdict.reasons.append(
            f"the engine ran {wrong[0]} query positions per request, the {layout_name(run.sample_from_anchor)} layout "
            f"needs {run.num_query_tokens}"
        )
    if identity is not None and not identity["token_identical"]:
        message = (
            f"greedy output differs from the target alone in {identity['prompts'] - identity['identical_prompts']} "
            f"of {identity['prompts']} prompt(s)"
        )
        (verdict.reasons if require_identical else verdict.warnings).append(message)
    plugin = (result.get("engine_details") or {}).get("plugin")
    if run.serving == "plugin" and isinstance(plugin, dict) and not plugin.get("active"):
        verdict.reasons.append("the dflash-tools plugin was required but did not report itself active")
    if verdict.reasons:
        verdict.status = "fail"
    return verdict


def compare_layouts(
    declared: contract.SmokeResult | None, flipped: contract.SmokeResult | None, declared_layout: str
) -> dict[str, Any] | None:
    """Which layout scored higher, and whether the declared one won clearly."""
    if declared is None or flipped is None or not declared["ok"] or not flipped["ok"]:
        return None

    def first(result: contract.SmokeResult) -> float:
        rates = result["acceptance_rate_per_position"]
        return rates[0] if rates else 0.0

    ours, theirs = declared["mean_acceptance_length"], flipped["mean_acceptance_length"]
    if ours >= theirs * (1 + CLEAR_MARGIN) and first(declared) >= first(flipped):
        outcome, message = "declared", f"the declared {declared_layout} layout wins clearly"
    elif theirs >= ours * (1 + CLEAR_MARGIN) and first(flipped) >= first(declared):
        outcome = "flipped"
        message = (
            f"the flipped layout scores higher than the declared {declared_layout} one: "
            "the checkpoint's sample_from_anchor looks mislabeled"
        )
    else:
        outcome, message = "inconclusive", "neither layout wins clearly"
    return {
        "outcome": outcome,
        "message": message,
        "declared": {"layout": declared_layout, "mean_acceptance_length": ours, "first_position_rate": first(declared)},
        "flipped": {"mean_acceptance_length": theirs, "first_position_rate": first(flipped)},
        "margin": CLEAR_MARGIN,
    }


def _run_document(
    draft: DraftPlan,
    run: RunPlan,
    result: contract.SmokeResult | None,
    baseline: contract.BaselineResult | None,
    require_identical: bool,
) -> tuple[dict[str, Any], Verdict]:
    identity = None
    speedup = None
    if result is not None and result["ok"] and baseline is not None:
        identity = token_identity(result["outputs"], baseline["outputs"])
        if baseline["tokens_per_second"] > 0:
            speedup = result["tokens_per_second"] / baseline["tokens_per_second"]
    verdict = judge_run(run, result, draft.floor, identity=identity, require_identical=require_identical)
    document = run.to_dict()
    document.update(
        result=dict(result) if result is not None else None,
        token_identity=identity,
        speedup=speedup,
        verdict=verdict.to_dict(),
    )
    return document, verdict


def _draft_verdict(
    draft: DraftPlan, run_verdicts: list[tuple[RunPlan, Verdict]], comparison: dict[str, Any] | None
) -> Verdict:
    if draft.refusal is not None:
        return Verdict("refused", [draft.refusal])
    declared = next((v for run, v in run_verdicts if run.layout_role == "declared"), None)
    if declared is None:
        return Verdict("planned")
    verdict = Verdict(declared.status, list(declared.reasons), list(declared.warnings) + list(draft.notes))
    if comparison is not None:
        if comparison["outcome"] == "flipped":
            verdict.reasons.append(comparison["message"])
            verdict.status = "fail" if verdict.status in ("pass", "fail") else verdict.status
        elif comparison["outcome"] == "inconclusive":
            verdict.warnings.append(comparison["message"])
    for run, other in run_verdicts:
        if run.layout_role == "flipped" and other.status == "error":
            verdict.warnings.append(f"the flipped-layout run failed: {other.reasons[0] if other.reasons else ''}")
    return verdict


def build_document(
    plan: SmokePlan,
    results: dict[str, contract.SmokeResult],
    *,
    mode: str,
    work_dir: str | None,
    require_identical: bool = False,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole smoke test as one document; `results` maps run slugs to contract results."""
    baseline = next((r["baseline"] for r in results.values() if r["ok"] and r["baseline"] is not None), None)
    drafts = []
    statuses = []
    for draft in plan.drafts:
        run_docs = []
        run_verdicts = []
        for run in draft.runs:
            run_doc, verdict = _run_document(draft, run, results.get(run.slug), baseline, require_identical)
            run_docs.append(run_doc)
            run_verdicts.append((run, verdict))
        declared = next((results.get(r.slug) for r in draft.runs if r.layout_role == "declared"), None)
        flipped = next((results.get(r.slug) for r in draft.runs if r.layout_role == "flipped"), None)
        geometry = draft.report.geometry if draft.report else None
        comparison = compare_layouts(declared, flipped, layout_name(geometry.sample_from_anchor)) if geometry else None
        verdict = _draft_verdict(draft, run_verdicts, comparison)
        statuses.append((draft, verdict))
        document = draft.to_dict()
        document.update(runs=run_docs, layout_comparison=comparison, verdict=verdict.to_dict())
        drafts.append(document)
    options = plan.options
    code = exit_code([(d.refusal_kind, v.status) for d, v in statuses])
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "command": "smoke-test",
        "mode": mode,
        "ok": code == EXIT_OK,
        "exit_code": code,
        "engine": plan.engine,
        "target": plan.target_spec.to_dict() if plan.target_spec else {"source": plan.target},
        "vllm": plan.capability.to_dict() if plan.capability else None,
        "prompts": {
            "source": options.prompts_source,
            "count": len(options.prompt_token_ids) if options.prompt_token_ids else len(options.prompts),
            "tokenized": options.prompt_token_ids is not None,
            "max_tokens": options.max_tokens,
            "chat": options.chat,
            "enable_thinking": options.enable_thinking,
        },
        "work_dir": work_dir,
        "baseline": {k: v for k, v in baseline.items() if k != "outputs"} if baseline else None,
        "drafts": drafts,
    }
    if extra:
        result.update(extra)
    return result


def exit_code(statuses: list[tuple[str | None, str]]) -> int:
    """0 all pass (or planned), 2 a setup problem kept a draft from running, 1 anything else."""
    if any(status == "refused" and kind == "setup" for kind, status in statuses):
        return EXIT_SETUP
    if any(status in ("fail", "error", "refused") for _, status in statuses):
        return EXIT_FAIL
    return EXIT_OK
