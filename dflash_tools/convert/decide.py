"""Decide what changes: the output's block_size and sample_from_anchor, and how each was decided.

`decide_geometry` applies convert's policy on top of `draft.geometry.resolve_geometry` (which
decides exactly as `inspect` does; the geometry rules live there only), one small function per
rule: a flag that contradicts the file needs --force, explicit values that conflict are refused
with the flag that settles them, and defaults, inferences and fixed proposal counts become
`Decision`s the user sees.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from dflash_tools.convert.json_edit import same_json
from dflash_tools.documents import JsonDocument
from dflash_tools.draft.description import DraftDescription, ValueSource
from dflash_tools.draft.dialect_spec import ProposalCount
from dflash_tools.draft.geometry import Geometry, decide_layout, layout_name, resolve_geometry
from dflash_tools.errors import OperationError
from dflash_tools.findings import Finding
from dflash_tools.reading.checkpoint import CONFIG_NAME


@dataclass(frozen=True)
class Decision(JsonDocument):
    """How one value of the output was decided: kept, defaulted, inferred, set by a flag, fixed."""

    key: str
    value: Any
    source: str  # "explicit" | "inferred" | "default" | "flag" | "fixed" | "mapped"
    message: str


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _fmt(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={json.dumps(value)}" for key, value in values.items())


def _sfa_flag(value: bool) -> str:
    return "--sample-from-anchor" if value else "--no-sample-from-anchor"


@dataclass(frozen=True)
class _Evidence:
    """What the file states, with junk values left out: the input of every rule below."""

    desc: DraftDescription
    proposals: list[int]  # speculators / Open Spec proposal counts
    stated_blocks: dict[str, int]  # block_size per location
    stated_layouts: dict[str, bool]  # sample_from_anchor per location

    @property
    def proposal_count(self) -> ProposalCount:
        """What the draft's stored proposal count means in its dialect (its spec says)."""
        return self.desc.spec.keys.proposal_count

    @property
    def proposal_key(self) -> str:
        return self.desc.spec.keys.speculative_tokens or "speculative_tokens"

    @classmethod
    def of(cls, desc: DraftDescription) -> _Evidence:
        return cls(
            desc=desc,
            proposals=[p for p in (desc.proposal_speculative_tokens or []) if _positive_int(p)],
            stated_blocks={k: v for k, v in desc.block_size_values.items() if _positive_int(v)},
            stated_layouts={
                **{k: v for k, v in desc.sample_from_anchor_values.items() if isinstance(v, bool)},
                # shift_label, the DeepSpec markers: statements of the layout a flag must not contradict silently.
                **{e.key: e.sample_from_anchor for e in desc.layout_evidence},
            },
        )


@dataclass
class _Notes:
    decisions: list[Decision]
    warnings: list[str]


def decide_geometry(
    desc: DraftDescription,
    block_size: int | None,
    sample_from_anchor: bool | None,
    *,
    force: bool = False,
    decisions: list[Decision] | None = None,
    warnings: list[str] | None = None,
) -> Geometry:
    """B and SFA for the output, with how each was decided (docs/rules.md, "How sample_from_anchor is
    decided" and "Decisions").

    The flags replace the file's statements, then `geometry.resolve_geometry` decides exactly as
    `inspect` does; this function only adds convert's policy on top: explicit values that
    disagree with each other are refused with the flag that settles them, a flag that
    contradicts an explicit value needs `force`, and defaults and inferences become decisions.
    """
    notes = _Notes(decisions if decisions is not None else [], warnings if warnings is not None else [])
    evidence = _Evidence.of(desc)
    probe = desc
    if block_size is not None:
        probe = _block_size_from_flag(evidence, probe, block_size, force=force, notes=notes)
    if sample_from_anchor is not None:
        probe = _layout_from_flag(evidence, probe, sample_from_anchor, force=force, notes=notes)
    geometry = _resolve_or_refuse(probe)
    if block_size is None:
        _note_unstated_block_size(evidence, geometry, notes)
    if sample_from_anchor is None:
        _note_unstated_layout(evidence, geometry, notes)
    _fix_proposal_counts(evidence, geometry, notes)
    return geometry


def _replaced(values: dict[str, Any], new: Any) -> str:
    """The " (replaces ...)" suffix, when a stated value differs from the flag's, as JSON (1, 1.0 and true differ)."""
    # Compared one by one: a hostile value may be a list, which a set cannot hold.
    return f" (replaces {_fmt(values)})" if any(not same_json(v, new) for v in values.values()) else ""


def _block_size_from_flag(
    evidence: _Evidence, probe: DraftDescription, block_size: int, *, force: bool, notes: _Notes
) -> DraftDescription:
    """--block-size replaces every stated block size; contradicting one needs --force."""
    stated = evidence.stated_blocks
    if stated and block_size not in stated.values() and not force:
        raise OperationError(
            f"--block-size {block_size} contradicts {_fmt(stated)} in {CONFIG_NAME}",
            f"add --force if the draft was really trained with block size {block_size} (the file is wrong)",
        )
    replaced = _replaced(evidence.desc.block_size_values, block_size)
    notes.decisions.append(
        Decision("block_size", block_size, "flag", f"block_size = {block_size} from --block-size{replaced}")
    )
    proposals = evidence.proposals
    if (
        not stated
        and evidence.proposal_count is ProposalCount.CHECKED
        and proposals
        and all(p not in (block_size, block_size - 1) for p in proposals)
    ):
        notes.warnings.append(
            f"--block-size {block_size} disagrees with {evidence.proposal_key} = "
            f"{proposals}, which a draft of block size {block_size} would store as {block_size - 1} or {block_size}; "
            "the proposal count is rewritten to match"
        )
    return replace(probe, block_size_values={"block_size": block_size})


def _layout_from_flag(
    evidence: _Evidence,
    probe: DraftDescription,
    sample_from_anchor: bool,
    *,
    force: bool,
    notes: _Notes,
) -> DraftDescription:
    """--[no-]sample-from-anchor replaces every stated layout; contradicting one needs --force."""
    stated = evidence.stated_layouts
    if stated and sample_from_anchor not in stated.values() and not force:
        raise OperationError(
            f"{_sfa_flag(sample_from_anchor)} contradicts {_fmt(stated)} in {CONFIG_NAME}",
            f"add --force if the draft was really trained {layout_name(sample_from_anchor)} (the file is wrong)",
        )
    replaced = _replaced(evidence.desc.sample_from_anchor_values, sample_from_anchor)
    notes.decisions.append(
        Decision(
            "sample_from_anchor",
            sample_from_anchor,
            "flag",
            f"sample_from_anchor = {str(sample_from_anchor).lower()} from {_sfa_flag(sample_from_anchor)}{replaced}",
        )
    )
    inferred = decide_layout(evidence.desc)
    # A flag against inferred evidence is the user's call, said aloud; against a declaration it needs --force.
    if not stated and inferred.source is ValueSource.INFERRED and inferred.sample_from_anchor is not sample_from_anchor:
        rewritten = (
            f"; {evidence.proposal_key} is rewritten to match"
            if evidence.proposal_count is ProposalCount.CHECKED and evidence.proposals
            else ""
        )
        notes.warnings.append(
            f"{_sfa_flag(sample_from_anchor)} contradicts the evidence, which says "
            f"{layout_name(not sample_from_anchor)}: {inferred.deciding[0].why}{rewritten}"
        )
    return replace(
        probe,
        sample_from_anchor_values={evidence.desc.spec.keys.primary_layout: sample_from_anchor},
        layout_evidence=(),
    )


def _resolve_or_refuse(probe: DraftDescription) -> Geometry:
    """The geometry as inspect derives it; ambiguity and an unknowable block size are refused."""
    geometry, findings = resolve_geometry(probe)
    _refuse_ambiguity(probe, findings)
    if geometry is not None and not geometry.layout_known:
        # Writing either layout down would make a guess look settled (docs/rules.md).
        unknown = next((f for f in findings if f.code == "DFT018"), None)
        raise OperationError(
            unknown.message if unknown else "the trained layout is unknown: its evidence disagrees",
            "settle it on the target with `dflash-tools smoke-test --compare-layouts`, then pass --sample-from-anchor "
            "(anchor-first) or --no-sample-from-anchor (bonus-anchor)",
        )
    if geometry is None:
        absent = next((f for f in findings if f.code == "DFT010"), None)
        raise OperationError(
            absent.message if absent else "the block size cannot be established",
            "pass --block-size N with the block size the draft was trained with",
        )
    return geometry


def _note_unstated_block_size(evidence: _Evidence, geometry: Geometry, notes: _Notes) -> None:
    """A defaulted or inferred block size is written explicitly, and said so."""
    block, sfa = geometry.block_size, geometry.sample_from_anchor
    if geometry.block_size_source is ValueSource.DEFAULT:
        notes.decisions.append(
            Decision(
                "block_size",
                block,
                "default",
                f"block_size is absent: the {evidence.desc.spec.title} class default {block} is written explicitly; "
                "pass --block-size N if the draft was trained with another block size",
            )
        )
    elif geometry.block_size_source is ValueSource.INFERRED:
        notes.decisions.append(
            Decision(
                "block_size",
                block,
                "inferred",
                f"block_size = {block}, from {evidence.proposal_key} = {evidence.proposals[0]} and "
                f"sample_from_anchor = {str(sfa).lower()}",
            )
        )


def _note_unstated_layout(evidence: _Evidence, geometry: Geometry, notes: _Notes) -> None:
    """A sample_from_anchor decided from evidence or a default is written explicitly, saying from what;
    only a default (nothing else said) names the flag that writes the other layout."""
    source = geometry.sample_from_anchor_source
    if source is ValueSource.EXPLICIT:
        return
    sfa = geometry.sample_from_anchor
    layout = decide_layout(evidence.desc)
    if source is ValueSource.INFERRED and layout.deciding:
        message = (
            f"sample_from_anchor = {str(sfa).lower()} ({layout_name(sfa)}, from {layout.deciding[0].why}), "
            "now written explicitly"
        )
    else:
        message = (
            f"sample_from_anchor = {str(sfa).lower()} (absent; {evidence.desc.dialect.value} defaults to "
            f"{str(sfa).lower()} and nothing else says how it was trained), now written explicitly; pass "
            f"{_sfa_flag(not sfa)} if it was trained {layout_name(not sfa)} (`smoke-test --compare-layouts` tells)"
        )
    notes.decisions.append(Decision("sample_from_anchor", sfa, source.value, message))


def _fix_proposal_counts(evidence: _Evidence, geometry: Geometry, notes: _Notes) -> None:
    """Proposal counts (speculators, Open Spec) must equal the trained K_max; wrong ones are fixed."""
    block, sfa, k_max = geometry.block_size, geometry.sample_from_anchor, geometry.max_speculative_tokens
    desc = evidence.desc
    if evidence.proposal_count is ProposalCount.CHECKED:
        for index, tokens in enumerate(desc.proposal_speculative_tokens or []):
            if tokens == k_max:
                continue
            key = evidence.proposal_key.replace("[*]", f"[{index}]")
            history = desc.spec.block_size_in_proposal_count.get(desc.algorithm)
            why = (
                f"{history}; the {layout_name(sfa)} layout makes K_max {k_max}"
                if tokens == block and not sfa and history
                else "it must equal the trained K_max"
            )
            notes.decisions.append(Decision(key, k_max, "fixed", f"{key}: {json.dumps(tokens)} -> {k_max} ({why})"))
    proposals = evidence.proposals
    if evidence.proposal_count is ProposalCount.BLOCK_SIZE and proposals and proposals[0] != k_max:
        key = evidence.proposal_key
        notes.decisions.append(
            Decision(key, k_max, "fixed", f"{key}: {proposals[0]} -> {k_max} (K_max of block_size {block})")
        )


def _refuse_ambiguity(probe: DraftDescription, findings: list[Finding]) -> None:
    """Explicit values that conflict, or are not values at all: only the user can settle them."""
    block_keys = set(probe.block_size_values)
    layout_keys = set(probe.sample_from_anchor_values) | {e.key for e in probe.layout_evidence}
    for finding in findings:
        keys = set(finding.keys)
        if finding.code in ("DFT006", "DFT010") and keys and keys <= layout_keys:
            raise OperationError(
                finding.message,
                "pass --sample-from-anchor (anchor-first) or --no-sample-from-anchor (bonus-anchor): "
                "the layout the draft was trained with",
            )
        if finding.code == "DFT010" and keys and keys <= block_keys:
            stated = sorted({v for v in probe.block_size_values.values() if _positive_int(v)})
            one_of = f" (one of {stated})" if len(stated) > 1 else ""
            raise OperationError(
                finding.message, f"pass --block-size N with the block size the draft was trained with{one_of}"
            )
