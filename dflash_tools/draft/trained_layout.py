"""The trained layout (sample_from_anchor), weighed from the evidence a draft carries.

docs/rules.md, "How sample_from_anchor is decided": the strongest evidence decides (a declaration,
the proposal count against the block size, the published release the config is, what the format's
trainer wrote at the time or its markers, the dialect's default); evidence of one rank that
disagrees leaves the layout unknown (DFT010 / DFT018), weaker evidence that disagrees is DFT019.
The geometry (draft/geometry.py) builds K_max and the query positions on this decision; readers
only record the facts (`DraftDescription.layout_facts`).
"""

from __future__ import annotations

from dataclasses import dataclass

from dflash_tools.draft.description import DraftDescription, EvidenceKind, LayoutFact, ValueSource
from dflash_tools.findings import Finding, make_finding


def weigh_layout(desc: DraftDescription, block_size: int | None) -> LayoutDecision:
    """The trained layout, weighed from its evidence (docs/rules.md, "How sample_from_anchor is
    decided"); `block_size`: the declared one (None: none declared), without which a proposal
    count says nothing."""
    findings = _undeclarable(desc)
    facts = desc.layout_facts(block_size)
    said = [fact for fact in facts if fact.sample_from_anchor is not None]
    if not said:
        # Only a format that requires a declaration has no default to fall back on (Open Spec).
        primary = desc.spec.keys.primary_layout
        findings.append(
            make_finding(
                "DFT006",
                f"{primary} is absent, but every {desc.spec.title} config must declare the layout",
                f"add {primary} (true for anchor-first, false for bonus-anchor)",
                keys=(primary,),
            )
        )
        return LayoutDecision(False, ValueSource.DEFAULT, None, facts, (), findings)
    rank = min(fact.rank for fact in said)
    deciding = tuple(fact for fact in said if fact.rank == rank)
    readings = {fact.sample_from_anchor for fact in deciding}
    if len(readings) > 1:
        findings.append(_conflict(desc, deciding))
        return LayoutDecision(None, ValueSource.UNKNOWN, None, facts, deciding, findings)
    sfa = bool(deciding[0].sample_from_anchor)
    findings.extend(_dissent(desc, deciding[0], [f for f in said if rank < f.rank < _DEFAULT_RANK]))
    declared = [fact for fact in deciding if fact.kind is EvidenceKind.DECLARATION]
    if declared:
        return LayoutDecision(sfa, ValueSource.EXPLICIT, declared[0].where, facts, deciding, findings)
    if rank == _DEFAULT_RANK:
        return LayoutDecision(sfa, ValueSource.DEFAULT, None, facts, deciding, findings)
    key = desc.spec.keys.speculative_tokens if deciding[0].kind is EvidenceKind.PROPOSAL_COUNT else deciding[0].where
    return LayoutDecision(sfa, ValueSource.INFERRED, key, facts, deciding, findings)


_DEFAULT_RANK = EvidenceKind.DIALECT_DEFAULT.rank


@dataclass(frozen=True)
class LayoutDecision:
    """The trained layout (`sample_from_anchor`, None when the evidence does not decide), how it
    was decided (`source`, and `key`: what decided it), every piece of evidence weighed and the
    ones that decided, and the findings on the way."""

    sample_from_anchor: bool | None
    source: ValueSource
    key: str | None
    evidence: tuple[LayoutFact, ...]
    deciding: tuple[LayoutFact, ...]
    findings: list[Finding]

    @property
    def known(self) -> bool:
        return self.sample_from_anchor is not None

    @property
    def stated(self) -> bool:
        """Declared by the file (where its engines read it or in a mirror), not inferred."""
        return self.known and any(fact.rank == 1 for fact in self.deciding)

    @property
    def working(self) -> bool:
        """The reading the numbers assume: the layout, or when it is unknown the first reading of
        the evidence that disagrees (both are reported: `Geometry.readings`)."""
        if self.sample_from_anchor is not None:
            return self.sample_from_anchor
        return bool(self.deciding[0].sample_from_anchor) if self.deciding else False


def _undeclarable(desc: DraftDescription) -> list[Finding]:
    """DFT006 for a declaration that is not a boolean: it declares nothing."""
    return [
        make_finding(
            "DFT006",
            f"{key} is {value!r}, not true or false",
            f"write {key} as a JSON boolean",
            keys=(key,),
            values={key: value},
        )
        for key, value in desc.sample_from_anchor_values.items()
        if not isinstance(value, bool)
    ]


def settle_hint(desc: DraftDescription, first: str = "settle") -> str:
    """How to settle a layout the evidence does not decide: run both on the target. Not a fix line
    (it needs the target and a GPU); only the user writes the layout, once settled (docs/rules.md)."""
    target = desc.verifier_name if desc.verifier_name and " " not in desc.verifier_name else "TARGET"
    return (
        f"{first} it on the target with smoke-test's --compare-layouts (dflash-tools smoke-test -t {target} -d SRC "
        "--compare-layouts: the trained layout wins clearly), then write it down with convert's --sample-from-anchor "
        "or --no-sample-from-anchor"
    )


def _conflict(desc: DraftDescription, deciding: tuple[LayoutFact, ...]) -> Finding:
    """Evidence of one rank that disagrees: the layout is unknown (DFT010 when the file declares
    it both ways, DFT018 when inferences disagree)."""
    keys = tuple(fact.where for fact in deciding)
    values = {fact.where: fact.sample_from_anchor for fact in deciding}
    if deciding[0].rank == 1:
        return make_finding(
            "DFT010",
            "sample_from_anchor disagrees between its declarations: "
            + ", ".join(f.why for f in deciding)
            + "; the trained layout is unknown",
            settle_hint(desc),
            keys=keys,
            values=values,
        )
    return make_finding(
        "DFT018",
        "the trained layout is unknown: " + "; ".join(f"{f.why} ({f.says})" for f in deciding) + ".",
        settle_hint(desc, "Settle") + ".",
        keys=keys,
        values=values,
    )


def _dissent(desc: DraftDescription, decider: LayoutFact, weaker: list[LayoutFact]) -> list[Finding]:
    """DFT019 for weaker evidence that says the other layout (a proposal count is DFT012's)."""
    against = [
        f
        for f in weaker
        if f.sample_from_anchor is not decider.sample_from_anchor and f.kind is not EvidenceKind.PROPOSAL_COUNT
    ]
    if not against:
        return []
    return [
        make_finding(
            "DFT019",
            f"the layout evidence disagrees: {decider.why} ({decider.says}) outweighs "
            + "; ".join(f"{f.why} ({f.says})" for f in against)
            + ".",
            "If in doubt, " + settle_hint(desc) + ".",
            keys=tuple(f.where for f in (decider, *against)),
            values={f.where: f.sample_from_anchor for f in (decider, *against)},
        )
    ]
