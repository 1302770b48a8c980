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

from dflash_tools import smoke_contract as contract
from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.draft.description import Algorithm
from dflash_tools.draft.geometry import layout_name
from dflash_tools.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from dflash_tools.plan.presets import Floor
from dflash_tools.smoke import cross_check, diagnosis, sweep, timing
from dflash_tools.smoke.plan import TARGET_PAIRING, DraftPlan, SmokePlan
from dflash_tools.smoke.prefix_check import prefix_caching_identity, prefix_caching_reasons, token_identity
from dflash_tools.smoke.run_plan import RunPlan, Serving
from dflash_tools.smoke.workloads.reference_al import ReferenceAL

SCHEMA_VERSION = 1
CLEAR_MARGIN = 0.10


@dataclass
class Verdict(JsonDocument):
    status: str  # "pass" | "fail" | "error" | "refused" | "skipped" | "planned"
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Why acceptance likely collapsed (`smoke.diagnosis`), on a run that failed its floor.
    diagnosis: dict[str, Any] | None = field(default=None, metadata=json_rules(omit_none=True))


def layout_cause(run: RunPlan, result: contract.SmokeResult | None) -> str | None:
    """What vLLM actually did with an anchor-first layout it was asked to serve, from the evidence.

    A run that failed where the plan knew this vLLM cannot serve the layout: vLLM refused it.
    A run on the V1 runner whose drafter was observed running K + 1 query positions: stock V1
    served it in the bonus layout. Anything else: no cause can be named from the run.
    """
    if result is None or run.sample_from_anchor is not True:
        return None
    k = run.num_speculative_tokens
    if not result["ok"]:
        if run.serving is Serving.UNSUPPORTED:
            return f"vLLM refused the anchor-first draft: {result['error']}"
        return None
    observed = result["query_positions_per_step"] or []
    details = result.get("engine_details") or {}
    if k + 1 not in observed or details.get("runner") != "v1":
        # Elsewhere (V2, the plugin) a wrong query count is reported as such by judge_run.
        return None
    return (
        "stock V1 served an anchor-first draft in the bonus layout "
        f"({k + 1} query positions per request observed for K = {k}; the layout needs {k})"
    )


def speed_warning(
    speedup: float | None,
    result: contract.SmokeResult | None,
    baseline_tps: float | None,
    spread: timing.Spread | None = None,
) -> str | None:
    """A draft that made generation slower than the target alone is not a win, whatever it
    accepts; one whose speed-up's spread straddles 1 is neither (docs/smoke-test.md, "How sure a
    measurement is")."""
    if spread is not None and spread.samples > 1 and spread.low < 1.0 < spread.high:
        return (
            f"as fast as the target alone within the spread: {spread.median:.2f}x, from {spread.low:.2f}x to "
            f"{spread.high:.2f}x over {spread.samples} runs"
        )
    if speedup is None or speedup >= 1.0 or result is None or baseline_tps is None:
        return None
    return (
        f"slower than the target alone: {speedup:.2f}x the target's speed "
        f"({result['tokens_per_second']:.1f} vs {baseline_tps:.1f} tokens/s)"
    )


def impossible_counters(run: RunPlan, result: contract.SmokeResult) -> str | None:
    """Why a completed run's counters cannot all be true (`smoke.counter_relations`), or None: a
    verdict is never judged from them, whichever engine sent them (a vLLM or torch child's result
    file, a server's answers)."""
    from dflash_tools.smoke.counter_relations import result_problem

    problem = result_problem(result, run.num_speculative_tokens)
    return None if problem is None else f"the {result['engine']} engine reported {problem}"


def judge_run(
    run: RunPlan,
    result: contract.SmokeResult | None,
    floor: Floor,
    *,
    identity: dict[str, Any] | None,
    require_identical: bool = False,
    mean_floor: bool = True,
) -> Verdict:
    """`mean_floor` False: the mean-acceptance-length floor does not apply (a sweep's smaller K,
    which cannot reach a floor set for the largest)."""
    if run.skip_reason is not None:
        return Verdict("skipped", [run.skip_reason])
    if result is None:
        return Verdict("planned")
    cause = layout_cause(run, result)
    if not result["ok"]:
        if cause is not None:
            return Verdict("fail", [cause])
        return Verdict("error", [result["error"] or "the run failed"])
    impossible = impossible_counters(run, result)
    if impossible is not None:
        return Verdict("error", [impossible])
    verdict = Verdict("pass")
    if cause is not None:
        verdict.reasons.append(cause)
    k = run.num_speculative_tokens
    drafts = result["num_drafts"]
    mean = result["mean_acceptance_length"]
    rates = result["acceptance_rate_per_position"]
    if drafts == 0:
        verdict.reasons.append("no draft steps were made: speculation did not run")
    elif result["num_accepted_tokens"] == 0:
        verdict.reasons.append(f"0 of {result['num_draft_tokens']} draft tokens accepted")
    if mean_floor and floor.mean_acceptance_length is not None and drafts and mean < floor.mean_acceptance_length:
        verdict.reasons.append(
            f"mean acceptance length {mean:.2f} is below the floor {floor.mean_acceptance_length:.2f}"
        )
    if floor.first_position_rate is not None and rates and rates[0] < floor.first_position_rate:
        verdict.reasons.append(f"position-0 acceptance {rates[0]:.2f} is below {floor.first_position_rate:.2f}")
    positions = len(result["accepted_per_position"])
    # A server that reports no per-position numbers (SGLang without its histogram) drafted K
    # positions as far as anyone can tell.
    counted = (result.get("per_position") or {}).get("available", True)
    if drafts and positions != k and counted:
        verdict.reasons.append(f"the engine drafted {positions} positions per step, the plan asked for K = {k}")
    observed = result["query_positions_per_step"] or []
    wrong = sorted({q for q in observed if q != run.num_query_tokens})
    if wrong and run.num_query_tokens is not None and run.sample_from_anchor is not None and cause is None:
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
    if run.serving is Serving.PLUGIN and isinstance(plugin, dict) and not plugin.get("active"):
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
    reference: contract.SmokeResult | None = None,
    mean_floor: bool = True,
) -> tuple[dict[str, Any], Verdict]:
    identity = None
    speedup = None
    if result is not None and result["ok"] and baseline is not None:
        identity = token_identity(result["outputs"], baseline["outputs"])
        if baseline["tokens_per_second"] > 0:
            speedup = result["tokens_per_second"] / baseline["tokens_per_second"]
    speed = timing.tokens_per_second(result)
    ratio = timing.speedup(speed, timing.baseline_tokens_per_second(baseline))
    verdict = judge_run(
        run, result, draft.floor, identity=identity, require_identical=require_identical, mean_floor=mean_floor
    )
    prefix_check = prefix_caching_identity(result, baseline)
    if verdict.status in ("pass", "fail"):
        reasons, warnings = prefix_caching_reasons(prefix_check)
        verdict.reasons.extend(reasons)
        verdict.warnings.extend(warnings)
        verdict.warnings.extend(run.notes)
        if reasons:
            verdict.status = "fail"
    slow = speed_warning(speedup, result, baseline["tokens_per_second"] if baseline else None, ratio)
    if slow is not None and verdict.status in ("pass", "fail"):
        verdict.warnings.append(slow)
    check = None
    if reference is not None and result is not None:
        check = cross_check.compare(result, reference)
        layout = layout_name(run.sample_from_anchor) if run.sample_from_anchor is not None else "declared"
        reason = cross_check.disagreement(check, layout)
        if reason is not None and verdict.status in ("pass", "fail"):
            verdict.reasons.append(reason)
            verdict.status = "fail"
        elif not check["ok"] and verdict.status in ("pass", "fail"):
            verdict.warnings.append(f"the torch reference cross-check did not run: {check['error']}")
    document = run.to_dict()
    document.update(
        result=dict(result) if result is not None else None,
        token_identity=identity,
        speedup=speedup,
        tokens_per_second_spread=speed.to_dict() if speed else None,
        speedup_spread=ratio.to_dict() if ratio else None,
        cross_check=check,
        prefix_caching=prefix_check,
        verdict=verdict.to_dict(),
    )
    return document, verdict


def _draft_verdict(
    draft: DraftPlan, run_verdicts: list[tuple[RunPlan, Verdict]], comparison: dict[str, Any] | None
) -> Verdict:
    if draft.refusal is not None:
        return Verdict("refused", [draft.refusal])
    if draft.sweep:
        return _sweep_verdict(draft, run_verdicts)
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


_STATUS_ORDER = ("planned", "pass", "fail", "error")


def _sweep_verdict(draft: DraftPlan, run_verdicts: list[tuple[RunPlan, Verdict]]) -> Verdict:
    """A sweep passes when every K that ran passed; each reason and warning names its K."""
    ran = [(run, v) for run, v in run_verdicts if v.status != "skipped"]
    status = max((v.status for _, v in ran), key=_STATUS_ORDER.index, default="planned")
    verdict = Verdict(status, warnings=list(draft.notes))
    for run, other in run_verdicts:
        tag = f"K={run.num_speculative_tokens}: "
        if other.status == "skipped":
            verdict.warnings.extend(tag + reason for reason in other.reasons)
            continue
        verdict.reasons.extend(tag + reason for reason in other.reasons)
        verdict.warnings.extend(tag + warning for warning in other.warnings)
    return verdict


def build_document(
    plan: SmokePlan,
    results: dict[str, contract.SmokeResult],
    *,
    mode: str,
    work_dir: str | None,
    require_identical: bool = False,
    extra: dict[str, Any] | None = None,
    references: dict[str, contract.SmokeResult] | None = None,
) -> dict[str, Any]:
    """The whole smoke test as one document; `results` (and the cross-check's `references`) map
    run slugs to contract results."""
    references = references or {}
    baseline = next((r["baseline"] for r in results.values() if r["ok"] and r["baseline"] is not None), None)
    drafts = []
    statuses = []
    for draft in plan.drafts:
        run_docs = []
        run_verdicts = []
        # In a sweep the mean-acceptance-length floor is for the largest K that ran.
        floor_k = max((r.num_speculative_tokens for r in draft.runs if r.skip_reason is None), default=None)
        for run in draft.runs:
            run_doc, verdict = _run_document(
                draft,
                run,
                results.get(run.slug),
                baseline,
                require_identical,
                references.get(run.slug),
                mean_floor=not run.sweep or run.num_speculative_tokens == floor_k,
            )
            run_docs.append(run_doc)
            run_verdicts.append((run, verdict))
        declared = next((results.get(r.slug) for r in draft.runs if r.layout_role == "declared"), None)
        flipped = next((results.get(r.slug) for r in draft.runs if r.layout_role == "flipped"), None)
        geometry = draft.report.geometry if draft.report else None
        comparison = compare_layouts(declared, flipped, layout_name(geometry.sample_from_anchor)) if geometry else None
        for run, run_doc in zip(draft.runs, run_docs, strict=True):
            run_doc.update(_references(draft, results.get(run.slug), plan))
        reference = _reference_check(draft, run_docs, run_verdicts, results, plan)
        _diagnose(draft, run_docs, run_verdicts, results, comparison, plan, reference)
        verdict = _draft_verdict(draft, run_verdicts, comparison)
        verdict.diagnosis = next(
            (
                v.diagnosis
                for run, v in sorted(run_verdicts, key=lambda rv: -rv[0].num_speculative_tokens)
                if v.diagnosis
            ),
            None,
        )
        statuses.append((draft, verdict))
        document = draft.to_dict()
        document.update(
            reference=reference.to_dict() if reference is not None else None,
            runs=run_docs,
            layout_comparison=comparison,
            k_sweep=_k_sweep(draft, run_verdicts, results, baseline) if geometry else None,
            verdict=verdict.to_dict(),
        )
        if references:
            slugs = {r.layout_role: r.slug for r in draft.runs}
            document["layout_comparison_reference"] = (
                compare_layouts(
                    references.get(slugs.get("declared", "")),
                    references.get(slugs.get("flipped", "")),
                    layout_name(geometry.sample_from_anchor),
                )
                if geometry
                else None
            )
        drafts.append(document)
    options = plan.options
    code = exit_code([(d.refusal_kind, v.status) for d, v in statuses])
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "command": "smoke-test",
        "mode": mode,
        "ok": code == EXIT_OK,
        "exit_code": code,
        "engine": plan.engine.value,
        "target": _target(plan),
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
        "baseline_tokens_per_second_spread": (
            spread.to_dict() if (spread := timing.baseline_tokens_per_second(baseline)) else None
        ),
        "protocol": options.resolved_protocol().to_dict(),
        "dataset": options.dataset,
        "drafts": drafts,
    }
    if extra:
        result.update(extra)
    return result


def _target(plan: SmokePlan) -> dict[str, Any]:
    """The target as read; a dry run's target not read offline: why, and what is not checked."""
    if plan.target_spec is not None:
        return plan.target_spec.to_dict()
    if plan.target_unread is None:
        return {"source": plan.target}
    return {"source": plan.target, "not_read": plan.target_unread.to_dict(), "not_checked": list(TARGET_PAIRING)}


def _k_sweep(
    draft: DraftPlan,
    run_verdicts: list[tuple[RunPlan, Verdict]],
    results: dict[str, contract.SmokeResult],
    baseline: contract.BaselineResult | None,
) -> dict[str, Any] | None:
    """Measured and predicted speed-up per K: every K of a sweep, or the one declared run."""
    geometry = draft.report.geometry if draft.report else None
    if geometry is None:
        return None
    chosen = [(run, v) for run, v in run_verdicts if run.sweep or run.layout_role == "declared"]
    if not draft.sweep:
        chosen = chosen[:1]
    runs = [
        sweep.SweepRun(
            num_speculative_tokens=run.num_speculative_tokens,
            num_query_tokens=run.num_query_tokens,
            result=results.get(run.slug),
            skip_reason=run.skip_reason,
            status=verdict.status,
        )
        for run, verdict in chosen
    ]
    if not runs:
        return None
    single = draft.single_k_only
    description = draft.report.description if draft.report else None
    if single is None and description is not None and description.algorithm is Algorithm.DFLASH2:
        single = f"DFlash2 serves only its trained K = {geometry.max_speculative_tokens} (DFT013)"
    return sweep.summarize(runs, baseline, trained_k=geometry.max_speculative_tokens, single_k_only=single)


def _diagnose(
    draft: DraftPlan,
    run_docs: list[dict[str, Any]],
    run_verdicts: list[tuple[RunPlan, Verdict]],
    results: dict[str, contract.SmokeResult],
    comparison: dict[str, Any] | None,
    plan: SmokePlan,
    reference: ReferenceAL | None = None,
) -> None:
    """Each failed run's likely cause (`smoke.diagnosis`), in its verdict."""
    outcome = comparison["outcome"] if comparison else None
    layers = plan.target_spec.num_hidden_layers if plan.target_spec else None
    for (run, verdict), run_doc in zip(run_verdicts, run_docs, strict=True):
        if verdict.status != "fail" or run.layout_role == "flipped":
            continue
        found = diagnosis.diagnose(
            draft,
            run,
            results.get(run.slug),
            draft.floor,
            layout_outcome=outcome,
            target_layers=layers,
            reference=reference if _judged_by(reference, run) else None,
            prompts_source=plan.options.prompts_source,
        )
        if found is not None:
            verdict.diagnosis = found.to_dict()
            run_doc["verdict"] = verdict.to_dict()


def _judged_by(reference: ReferenceAL | None, run: RunPlan) -> bool:
    """Whether `run` is the one its draft's reference applies to: the declared layout, at the K
    the reference was measured at (any K when it does not say)."""
    if reference is None or run.layout_role == "flipped" or run.skip_reason is not None:
        return False
    return reference.num_speculative_tokens in (None, run.num_speculative_tokens)


def _reference_check(
    draft: DraftPlan,
    run_docs: list[dict[str, Any]],
    run_verdicts: list[tuple[RunPlan, Verdict]],
    results: dict[str, contract.SmokeResult],
    plan: SmokePlan,
) -> ReferenceAL | None:
    """The draft's reference acceptance length (`smoke.workloads.reference_al`), and each run it applies to
    judged against it: below its margin, a reason (comparable) or a warning (not)."""
    from dflash_tools.smoke.workloads import reference_al

    options = plan.options
    reference: ReferenceAL | None = None
    if options.reference_al is not None:
        reference = reference_al.given(options.reference_al)
    elif draft.entry is None or draft.entry.floor is None:  # a preset's floor carries its references
        loaded = draft.report.loaded if draft.report else None
        reference = reference_al.demo_weights(loaded.local_dir if loaded else None, options.prompts_source)
        if reference is None:
            reference = reference_al.card([d for doc in run_docs for d in doc.get("references", [])])
    if reference is None:
        return None
    for (run, verdict), run_doc in zip(run_verdicts, run_docs, strict=True):
        result = results.get(run.slug)
        if not _judged_by(reference, run) or result is None or not result["ok"] or not result["num_drafts"]:
            continue
        if verdict.status not in ("pass", "fail"):
            continue
        short = reference_al.shortfall(reference, result["mean_acceptance_length"])
        if short is None:
            continue
        if reference.comparable:
            verdict.reasons.append(short)
            verdict.status = "fail"
        else:
            verdict.warnings.append(f"{short}; not measured like this run, so not a failure")
        run_doc["verdict"] = verdict.to_dict()
    return reference


def _references(draft: DraftPlan, result: contract.SmokeResult | None, plan: SmokePlan) -> dict[str, Any]:
    """A run's acceptance lengths in both definitions and its distance from every published
    reference for its draft and dataset (`smoke.workloads.references`), measured under the run's protocol."""
    from dflash_tools.smoke import acceptance
    from dflash_tools.smoke.workloads import references

    if result is None or not result["ok"]:
        return {}
    lengths = result.get("acceptance_lengths") or acceptance.from_counters(
        result["num_drafts"],
        result["num_accepted_tokens"],
        result["output_tokens"],
        f"the {result['engine']} engine's counters",
    )
    found: list[dict[str, Any]] = []
    dataset = (plan.options.dataset or {}).get("name")
    if dataset:
        served = (result.get("engine_details") or {}).get("draft_model")
        draft_source = draft.source if draft.report is not None else served
        for reference in references.references_for(draft_source, dataset) if draft_source else []:
            found.append(references.distance(lengths, dataset, plan.options.resolved_protocol(), reference).to_dict())
    return {"acceptance_lengths": lengths, "references": found}


def exit_code(statuses: list[tuple[str | None, str]]) -> int:
    """0 all pass (or planned), 2 a setup problem kept a draft from running, 1 anything else."""
    if any(status == "refused" and kind == "setup" for kind, status in statuses):
        return EXIT_USAGE
    if any(status in ("fail", "error", "refused") for _, status in statuses):
        return EXIT_FINDINGS
    return EXIT_OK
