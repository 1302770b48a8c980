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

A diagnosis is advice, never a verdict of its own: it is added to a failing run's verdict as
`diagnosis` and printed under it.

Pure functions over the plan and a contract result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dflash_tools import smoke_contract as contract
from dflash_tools.draft.geometry import layout_name

if TYPE_CHECKING:
    from dflash_tools.plan.presets import Floor
    from dflash_tools.smoke.plan import DraftPlan, RunPlan

# Preflight findings that bear on what the draft reads (docs/findings.md): the taps, the target's
# widths and vocabulary, the mask token, RoPE, and a known checkpoint's published profile.
CONTEXT_CODES = ("DFT030", "DFT031", "DFT032", "DFT033", "DFT034", "DFT050")
# Preflight findings that bear on the positions after the first: K past the trained block.
LATER_CODES = ("DFT014",)


@dataclass
class Diagnosis:
    """`kind`: "context" (position 0 collapsed) or "chain" (position 0 held, later positions did
    not); `likely`: the causes in the order to check them; `evidence`: what the run showed."""

    kind: str
    evidence: str
    likely: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "evidence": self.evidence, "likely": list(self.likely)}

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
) -> Diagnosis | None:
    """Why a finished run's acceptance is below its floor, or None when it is not (or a reason
    already in the verdict explains it: no drafts, the wrong query positions, the flipped layout
    scoring higher)."""
    if result is None or not result["ok"] or not result["num_drafts"]:
        return None
    rates = list(result["acceptance_rate_per_position"])
    if not rates:
        return None
    first = rates[0]
    mean = result["mean_acceptance_length"]
    first_floor = floor.first_position_rate
    mean_floor = floor.mean_acceptance_length
    observed = result["query_positions_per_step"] or []
    if run.num_query_tokens is not None and any(q != run.num_query_tokens for q in observed):
        return None  # the engine ran another layout: the verdict says so
    if layout_outcome == "flipped":
        return None  # the flipped layout scores higher: the verdict says so
    desc = draft.report.description if draft.report else None
    findings = {f.code: f for f in draft.findings}
    if first_floor is not None and first < first_floor:
        likely = [f"the preflight's {code}: {findings[code].message}" for code in CONTEXT_CODES if code in findings]
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
        honoured = (
            f", with the {layout_name(run.sample_from_anchor)} layout honoured"
            if observed and run.sample_from_anchor is not None
            else ""
        )
        compared = " (the declared layout won the comparison)" if layout_outcome == "declared" else ""
        evidence = (
            f"position-0 acceptance {first:.2f} is below {first_floor:.2f}{honoured}{compared}: every position "
            "reads the same context, so the draft misreads it"
        )
        return Diagnosis("context", evidence, likely)
    if mean_floor is not None and mean < mean_floor and len(rates) > 1:
        # Where the chain breaks: the first position accepted at under half the rate before it.
        breaks = next((i for i in range(1, len(rates)) if rates[i] < rates[i - 1] / 2), None)
        where = f", and falls to {rates[breaks]:.2f} at position {breaks}" if breaks is not None else ""
        likely = [f"the preflight's {code}: {findings[code].message}" for code in LATER_CODES if code in findings]
        likely += [
            "prompts unlike its training data (thinking on for a non-thinking draft, another language or domain)",
            "a draft weak at later positions (fewer training steps, or trained for a smaller block)",
        ]
        evidence = (
            f"position 0 is accepted at {first:.2f}{where}: the draft reads its context right (wrong taps or a "
            "wrong mask token would cost position 0 too) and the chain breaks later"
        )
        return Diagnosis("chain", evidence, likely)
    return None
