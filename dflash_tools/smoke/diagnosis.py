"""What likely went wrong when a draft's acceptance collapses: from what the run and the preflight know.

A run that fails its acceptance floor says how far below it is; this says why it likely is, from
the shape of the acceptance and what the plan knows (docs/smoke-test.md, "When acceptance
collapses"). The rule rests on one fact of block drafting: every draft position reads the same
context, the target's hidden states at the draft's `target_layer_ids`, through the same mask
token, in the same layout. So:

- **Position 0 collapses** (below the position-0 floor): the draft misreads its context or its
  queries. With the layout honoured (the engine ran the planned query positions, and
  `--compare-layouts` did not find the flipped layout better), what is left is what the draft
  reads: the target layers it taps (`target_layer_ids`; a copy trained on other taps loses most
  of its acceptance and no check on the files can tell), the target it is paired with, and the
  mask token. Preflight findings that touch these come first (DFT030-DFT034, DFT050).
- **Position 0 holds but the mean falls short**: the draft reads its context right (wrong taps
  or a wrong mask would cost position 0 too) and the chain breaks later: positions past the
  trained K (DFT014), prompts unlike the training data (thinking on for a non-thinking draft),
  or a draft that is weak at later positions.

What the draft was measured with, where a reference knows it (`smoke.workloads.reference_al`), comes
before these general causes: a draft whose very weights reached a reference under another config
(a bundled demo's) names the config keys that differ, which is where the acceptance went; and
prompts other than those it was measured on come first, because a draft trained on one kind of
text (the demo drafts: word problems) collapses on any other, at position 0 too.

A diagnosis is advice, never a verdict of its own: it is added to a failing run's verdict as
`diagnosis` and printed under it.

Pure functions over the plan and a contract result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflash_tools import smoke_contract as contract
from dflash_tools.documents import JsonDocument
from dflash_tools.draft.geometry import layout_name
from dflash_tools.draft.profiles import config_differences

if TYPE_CHECKING:
    from dflash_tools.plan.presets import Floor
    from dflash_tools.smoke.plan import DraftPlan
    from dflash_tools.smoke.run_plan import RunPlan
    from dflash_tools.smoke.workloads.reference_al import ReferenceAL

# Preflight findings that bear on what the draft reads (docs/findings.md): the taps, the target's
# widths and vocabulary, the mask token, RoPE, and a known checkpoint's published profile.
CONTEXT_CODES = ("DFT030", "DFT031", "DFT032", "DFT033", "DFT034", "DFT050")
# Preflight findings that bear on the positions after the first: K past the trained block.
LATER_CODES = ("DFT014",)


@dataclass
class Diagnosis(JsonDocument):
    """`kind`: "context" (position 0 collapsed), "chain" (position 0 held, later positions did
    not) or "reference" (below a reference acceptance length, compared position by position);
    `likely`: the causes in the order to check them; `evidence`: what the run showed."""

    kind: str
    evidence: str
    likely: list[str] = field(default_factory=list)

    def sentence(self) -> str:
        return f"{self.evidence}; likely: " + "; ".join(self.likely)


def diagnose(
    draft: DraftPlan,
    run: RunPlan,
    result: contract.SmokeResult | None,
    floor: Floor,
    *,
    layout_outcome: str | None,
    target_layers: int | None,
    reference: ReferenceAL | None = None,
    prompts_source: str | None = None,
) -> Diagnosis | None:
    """Why a finished run's acceptance is below its floor (or, with a `reference`, below
    `reference.floor`), or None when it is not (or a reason already in the verdict explains it:
    no drafts, the wrong query positions, the flipped layout scoring higher)."""
    if result is None or not result["ok"] or not result["num_drafts"]:
        return None
    rates = list(result["acceptance_rate_per_position"])
    if not rates:
        return None
    first = rates[0]
    mean = result["mean_acceptance_length"]
    first_floor = floor.first_position_rate
    mean_floor = floor.mean_acceptance_length
    if reference is not None:
        mean_floor = max(mean_floor or 0.0, reference.floor)
    observed = result["query_positions_per_step"] or []
    if run.num_query_tokens is not None and any(q != run.num_query_tokens for q in observed):
        return None  # the engine ran another layout: the verdict says so
    if layout_outcome == "flipped":
        return None  # the flipped layout scores higher: the verdict says so
    desc = draft.report.description if draft.report else None
    findings = {f.code: f for f in draft.findings}
    measured = _measured_with(draft, reference, prompts_source)
    if first_floor is not None and first < first_floor:
        likely = measured + [
            f"the preflight's {code}: {findings[code].message}" for code in CONTEXT_CODES if code in findings
        ]
        if _known_good(draft, reference):
            # The very weights and config a reference was measured with: what it reads is settled.
            likely.append("the target it is paired with (the reference was measured on its own target)")
            return Diagnosis("context", _context_evidence(first, first_floor, run, observed, layout_outcome), likely)
        if desc is not None:
            of = f" of the target's {target_layers}" if target_layers else ""
            likely.append(
                f"the target layers it taps: target_layer_ids {desc.target_layer_ids}{of} (a copy trained "
                "on other layers collapses like this and no check on the files can tell)"
            )
        likely.append("the target it is paired with (trained for another model or revision)")
        if desc is not None and desc.mask_token_id is not None:
            likely.append(f"the mask token (mask_token_id {desc.mask_token_id})")
        if layout_outcome is None and run.sample_from_anchor is not None:
            likely.append(
                f"the layout ({layout_name(run.sample_from_anchor)}): rerun with --compare-layouts to rule it out"
            )
        if not measured:
            likely.append(_UNLIKE_TRAINING)
        return Diagnosis("context", _context_evidence(first, first_floor, run, observed, layout_outcome), likely)
    if mean_floor is not None and mean < mean_floor and len(rates) > 1:
        if reference is not None and reference.rates:
            return _against_reference(rates, mean, reference, measured, findings)
        # Where the chain breaks: the first position accepted at under half the rate before it.
        breaks = next((i for i in range(1, len(rates)) if rates[i] < rates[i - 1] / 2), None)
        where = f", and falls to {rates[breaks]:.2f} at position {breaks}" if breaks is not None else ""
        likely = measured + [
            f"the preflight's {code}: {findings[code].message}" for code in LATER_CODES if code in findings
        ]
        if not measured:
            likely.append(_UNLIKE_TRAINING)
        likely.append("a draft weak at later positions (fewer training steps, or trained for a smaller block)")
        evidence = (
            f"position 0 is accepted at {first:.2f}{where}: the draft reads its context right (wrong taps or a "
            "wrong mask token would cost position 0 too) and the chain breaks later"
        )
        return Diagnosis("chain", evidence, likely)
    return None


def _context_evidence(
    first: float, first_floor: float, run: RunPlan, observed: list[int], layout_outcome: str | None
) -> str:
    honoured = (
        f", with the {layout_name(run.sample_from_anchor)} layout honoured"
        if observed and run.sample_from_anchor is not None
        else ""
    )
    compared = " (the declared layout won the comparison)" if layout_outcome == "declared" else ""
    return (
        f"position-0 acceptance {first:.2f} is below {first_floor:.2f}{honoured}{compared}: every position "
        "reads the same context, so the draft misreads it"
    )


def _known_good(draft: DraftPlan, reference: ReferenceAL | None) -> bool:
    """The draft is a reference's own weights under the config they were measured with."""
    config = draft.report.loaded.config if draft.report else None
    return (
        reference is not None
        and reference.config is not None
        and config is not None
        and not config_differences(reference.config, config)
    )


_UNLIKE_TRAINING = (
    "prompts unlike its training data (another domain or language, thinking on for a non-thinking draft): "
    "rerun on the prompts it was trained or measured on"
)


def _measured_with(draft: DraftPlan, reference: ReferenceAL | None, prompts_source: str | None) -> list[str]:
    """What differs from how the reference was measured: the config served (when the same weights
    were measured under another one) and the prompts; most likely causes first."""
    if reference is None:
        return []
    likely = []
    config = draft.report.loaded.config if draft.report else None
    if reference.config is not None and config is not None:
        diffs = [d for d in config_differences(reference.config, config) if d["change"] == "changed"]
        if diffs:
            shown = "; ".join(f"{d['key']} {d['actual']!r} (measured with {d['published']!r})" for d in diffs[:4])
            likely.append(
                f"the config: these are the weights of {reference.sibling}, which reached {reference.value:.2f} "
                f"with its own config; this one differs in {shown}"
            )
    run_prompts = Path(prompts_source).name if prompts_source else None
    if reference.prompts and run_prompts and run_prompts != reference.prompts:
        what = f"{reference.sibling}'s training data" if reference.sibling else "the reference's"
        likely.insert(
            0,
            f"the prompts: this run's ({run_prompts}) are not the ones it was measured on ({reference.prompts}), "
            f"and a draft collapses on text unlike {what}: rerun with the default prompts to tell",
        )
    return likely


def _against_reference(
    rates: list[float], mean: float, reference: ReferenceAL, measured: list[str], findings: dict[str, Any]
) -> Diagnosis:
    """A run below its reference with position 0 above the floor: where, position by position, it
    falls behind what the reference reached."""
    shares = [rate / ref for rate, ref in zip(rates, reference.rates, strict=False) if ref > 0]
    behind = next((i for i, share in enumerate(shares) if share < 0.75), None)
    where = (
        f"; it falls behind from position {behind} ({rates[behind]:.2f} against {reference.rates[behind]:.2f})"
        if behind is not None
        else ""
    )
    evidence = (
        f"mean acceptance length {mean:.2f} against the reference's {reference.value:.2f}; position 0 "
        f"{rates[0]:.2f} against {reference.rates[0]:.2f}{where}"
    )
    likely = list(measured)
    likely += [f"the preflight's {code}: {findings[code].message}" for code in CONTEXT_CODES if code in findings]
    likely.append(
        "what the draft reads: the target layers it taps and the target it is paired with (other taps cost "
        "every position, position 0 least)"
    )
    if not measured:
        likely.append(_UNLIKE_TRAINING)
    return Diagnosis("reference", evidence, likely)
