"""Geometry: the one place that knows how block_size, sample_from_anchor, K and query counts relate.

docs/rules.md, "Geometry". B = trained block_size, SFA = sample_from_anchor, K = draft tokens per step,
Q = query positions per request per step.

    bonus-anchor (SFA false): K_max = B - 1, Q = K + 1
    anchor-first (SFA true):  K_max = B,     Q = K

Readers only record what a file says and where; this module decides what it means, how it was
decided (explicit / inferred / default, or unknown when the evidence does not decide: both
readings are then reported) and which findings follow. The trained layout is weighed from its
evidence in `draft/trained_layout.py` (docs/rules.md, "How sample_from_anchor is decided").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dflash_tools.draft.description import Algorithm, DraftDescription, EvidenceKind, LayoutFact, ValueSource
from dflash_tools.draft.dialect_spec import DialectSpec, ProposalCount
from dflash_tools.draft.trained_layout import LayoutDecision, settle_hint, weigh_layout
from dflash_tools.findings import Finding, Severity, make_finding


def max_speculative_tokens(block_size: int, sample_from_anchor: bool) -> int:
    """Trained K (K_max): every slot of an anchor-first block predicts; bonus-anchor slot 0 does not."""
    return block_size if sample_from_anchor else block_size - 1


def num_query_tokens(num_speculative_tokens: int, sample_from_anchor: bool) -> int:
    """Query positions per request per step for K drafts."""
    return num_speculative_tokens if sample_from_anchor else num_speculative_tokens + 1


def block_size_for(max_tokens: int, sample_from_anchor: bool) -> int:
    """Inverse of `max_speculative_tokens` (Open Spec Config stores K, not B)."""
    return max_tokens if sample_from_anchor else max_tokens + 1


def layout_name(sample_from_anchor: bool) -> str:
    return "anchor-first" if sample_from_anchor else "bonus-anchor"


UNKNOWN_LAYOUT = "unknown"


@dataclass(frozen=True)
class Geometry:
    """B, the layout, K_max, K and Q, and how each was decided.

    When `layout_known` is false the evidence does not decide the layout: `sample_from_anchor`
    and the numbers are then one reading's (the first of the disagreeing evidence), kept for the
    callers that need a number, and JSON reports null for them and both `readings` instead.
    `layout_stated`: the file declares the layout (where engines read it, or in a mirror), so
    that a finding resting on it may be an error; an inferred layout never raises one.
    """

    block_size: int
    block_size_source: ValueSource
    sample_from_anchor: bool
    sample_from_anchor_source: ValueSource
    max_speculative_tokens: int
    num_speculative_tokens: int
    num_query_tokens: int
    speculative_tokens_requested: bool
    # What decided the layout: the declaring key (a dotted path, whatever its spelling), the
    # marker (`architectures`), the proposal-count key, the published release (`REPO@REV`), the
    # absent declaration a trainer's history explains; None for a default or an unknown layout.
    sample_from_anchor_key: str | None = None
    layout_known: bool = True
    layout_stated: bool = True
    layout_evidence: tuple[LayoutFact, ...] = ()
    # The kind of evidence that decided the layout (None: unknown).
    layout_decided_by: EvidenceKind | None = None

    @property
    def layout(self) -> str:
        return layout_name(self.sample_from_anchor) if self.layout_known else UNKNOWN_LAYOUT

    def reading(self, sample_from_anchor: bool) -> dict[str, Any]:
        """K_max, K and Q if the draft was trained in the given layout."""
        k_max = max_speculative_tokens(self.block_size, sample_from_anchor)
        k = self.num_speculative_tokens if self.speculative_tokens_requested else k_max
        return {
            "layout": layout_name(sample_from_anchor),
            "sample_from_anchor": sample_from_anchor,
            "max_speculative_tokens": k_max,
            "num_speculative_tokens": k,
            "num_query_tokens": num_query_tokens(k, sample_from_anchor),
        }

    def to_dict(self) -> dict[str, Any]:  # not a declaration: an unknown layout nulls 4 fields, adds readings
        known, k_known = self.layout_known, self.layout_known or self.speculative_tokens_requested
        return {
            "block_size": self.block_size,
            "block_size_source": self.block_size_source.value,
            "sample_from_anchor": self.sample_from_anchor if known else None,
            "sample_from_anchor_source": self.sample_from_anchor_source.value,
            "sample_from_anchor_key": self.sample_from_anchor_key,
            "layout": self.layout,
            "max_speculative_tokens": self.max_speculative_tokens if known else None,
            "num_speculative_tokens": self.num_speculative_tokens if k_known else None,
            "num_query_tokens": self.num_query_tokens if known else None,
            "speculative_tokens_requested": self.speculative_tokens_requested,
            "layout_decided_by": self.layout_decided_by.value if self.layout_decided_by else None,
            "readings": None if known else [self.reading(False), self.reading(True)],
            "layout_evidence": [fact.to_dict() for fact in self.layout_evidence],
        }


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _fmt(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in values.items())


def resolve_block_size(desc: DraftDescription) -> tuple[int | None, ValueSource, list[Finding]]:
    findings: list[Finding] = []
    values = desc.block_size_values
    bad = {k: v for k, v in values.items() if not _is_positive_int(v)}
    good = {k: v for k, v in values.items() if _is_positive_int(v)}
    for key, value in bad.items():
        findings.append(
            make_finding(
                "DFT010",
                f"{key} is {value!r}, not a positive integer",
                f"set {key} to the block size the draft was trained with",
                keys=(key,),
                values={key: value},
            )
        )
    if len(set(good.values())) > 1:
        findings.append(
            make_finding(
                "DFT010",
                f"block_size disagrees between locations: {_fmt(good)}",
                "decide the trained block size and run `dflash-tools convert SRC -o OUT --block-size N`",
                keys=tuple(good),
                values=good,
            )
        )
        return None, ValueSource.EXPLICIT, findings
    if good:
        return next(iter(good.values())), ValueSource.EXPLICIT, findings
    if bad:
        return None, ValueSource.EXPLICIT, findings
    return None, ValueSource.DEFAULT, findings


def resolve_geometry(
    desc: DraftDescription, num_speculative_tokens: int | None = None
) -> tuple[Geometry | None, list[Finding]]:
    """Decide B, SFA and their provenance, then K and Q; return the findings on the way.

    Returns None for the geometry when no block size can be established at all. Where each value
    is stated, and what an absent one means, comes from the draft's dialect spec.
    """
    findings: list[Finding] = []
    spec = desc.spec
    block_size, block_source, block_findings = resolve_block_size(desc)
    findings.extend(block_findings)

    layout = decide_layout(desc, block_size)
    sfa = layout.working
    findings.extend(layout.findings)

    proposal = [t for t in (desc.proposal_speculative_tokens or []) if _is_positive_int(t)]
    if block_size is None and not block_findings:
        if spec.keys.proposal_count is ProposalCount.BLOCK_SIZE and proposal:
            block_size = block_size_for(proposal[0], sfa)
            block_source = ValueSource.INFERRED
        elif spec.block_size_default is not None:
            block_size = spec.block_size_default
            block_source = ValueSource.DEFAULT
            findings.append(
                make_finding(
                    "DFT010",
                    f"block_size is absent; {spec.title} falls back to its class default {block_size}, "
                    "which may not be the trained block size",
                    "run `dflash-tools convert SRC -o OUT --block-size N` with the trained block size",
                    keys=("block_size",),
                )
            )
        else:
            findings.append(
                make_finding(
                    "DFT010",
                    f"block_size is absent: none of {_block_size_places(spec)} is set",
                    "run `dflash-tools convert SRC -o OUT --block-size N` with the trained block size",
                    keys=("block_size",),
                )
            )
    if layout.known and layout.source is not ValueSource.EXPLICIT:
        findings.append(_sfa_not_explicit(desc, layout))
    if block_size is None:
        return None, findings

    if spec.keys.proposal_count is ProposalCount.CHECKED:
        findings.extend(_check_proposal_tokens(desc, block_size, layout))

    k_max = max_speculative_tokens(block_size, sfa)
    if k_max < 1:
        findings.append(
            make_finding(
                "DFT010",
                f"block_size {block_size} with sample_from_anchor={sfa} leaves no position to draft",
                "a bonus-anchor draft needs block_size >= 2",
                keys=("block_size",),
            )
        )
        return None, findings
    # A -k equal to K_max is the default passed explicitly: it changes nothing (issue 34). Not so
    # where the layout is unknown: it then fixes K in both readings, whose K_max differ.
    requested = num_speculative_tokens is not None and (num_speculative_tokens != k_max or not layout.known)
    k = num_speculative_tokens if num_speculative_tokens is not None else k_max
    geometry = Geometry(
        block_size=block_size,
        block_size_source=block_source,
        sample_from_anchor=sfa,
        sample_from_anchor_source=layout.source,
        max_speculative_tokens=k_max,
        num_speculative_tokens=k,
        num_query_tokens=num_query_tokens(k, sfa),
        speculative_tokens_requested=requested,
        sample_from_anchor_key=layout.key,
        layout_known=layout.known,
        layout_stated=layout.stated,
        layout_evidence=layout.evidence,
        layout_decided_by=layout.deciding[0].kind if layout.known and layout.deciding else None,
    )
    findings.extend(_reading_checks(desc, geometry))
    return geometry, findings


def _reading_checks(desc: DraftDescription, geometry: Geometry) -> list[Finding]:
    """The K and convolution rules, which depend on the layout. A finding that only the layout's
    reading raises is kept as stated when the file declares the layout, is a warning at most when
    the layout is inferred, and is left out when it is unknown (DFT010 / DFT018 give both readings)."""

    def checks(g: Geometry) -> list[Finding]:
        return [*(check_serving_k(desc, g) if g.speculative_tokens_requested else []), *check_conv_geometry(desc, g)]

    found = checks(geometry)
    if geometry.layout_stated or not found:
        return found
    reading = geometry.reading(not geometry.sample_from_anchor)
    del reading["layout"]
    either = {f.code for f in checks(replace(geometry, **reading))}
    out = []
    for finding in found:
        if finding.code in either:
            out.append(finding)
        elif geometry.layout_known:
            out.append(replace(finding, severity=Severity.WARNING) if finding.severity is Severity.ERROR else finding)
    return out


def _block_size_places(spec: DialectSpec) -> str:
    """Where a dialect states its block size, in words (the DFT010 for an absent one)."""
    paths = spec.keys.block_size
    places = [f"{path} (top level)" if "." not in path and len(paths) > 1 else path for path in paths]
    if spec.keys.proposal_count is ProposalCount.BLOCK_SIZE and spec.keys.speculative_tokens is not None:
        places.append(spec.keys.speculative_tokens)
    return " or ".join(places) or "block_size"


def decide_layout(desc: DraftDescription, block_size: int | None = None) -> LayoutDecision:
    """The trained layout, weighed from its evidence (draft/trained_layout.py); `block_size`: the
    declared one (resolved here when not given), without which a proposal count says nothing."""
    if block_size is None:
        block_size = resolve_block_size(desc)[0]
    return weigh_layout(desc, block_size)


def _sfa_not_explicit(desc: DraftDescription, layout: LayoutDecision) -> Finding:
    """DFT011: the layout is not declared where engines read it. A note when the evidence settles
    it, a warning when it is found only in a mirror (engines ignore it) or only assumed."""
    primary = desc.spec.keys.primary_layout
    sfa = bool(layout.sample_from_anchor)
    values = {"sample_from_anchor": sfa, "source": layout.source.value}
    if layout.stated:
        where = ", ".join(f.where for f in layout.deciding)
        return make_finding(
            "DFT011",
            f"{primary} is not explicit (found only at {where}; engines read {primary}): {layout_name(sfa)} is "
            "declared where no engine looks.",
            "Write it where every engine reads it: `dflash-tools convert SRC -o OUT`.",
            keys=(primary,),
            values=values,
        )
    if layout.source is ValueSource.INFERRED:
        decider = layout.deciding[0]
        return make_finding(
            "DFT011",
            f"{primary} is not written down, but the {decider.kind.value.replace('-', ' ')} settles it as "
            f"{layout_name(sfa)}: {decider.why}.",
            "Nothing to do; convert writes it where every engine reads it (docs/convert.md).",
            severity=Severity.INFO,
            keys=(primary,),
            values={**values, "settled_by": decider.kind.value},
        )
    return make_finding(
        "DFT011",
        f"{primary} is absent and nothing in the file or a published release says how the draft was trained; "
        f"{desc.dialect.value} assumes {layout_name(sfa)}.",
        "Check the draft's model card, or " + settle_hint(desc) + ".",
        keys=(primary,),
        values=values,
    )


def _check_proposal_tokens(desc: DraftDescription, block_size: int, layout: LayoutDecision) -> list[Finding]:
    """DFT012: a proposal count that is not the trained K_max. An error when the file contradicts
    itself or the count fits no layout; a warning when only the inferred layout says it is wrong."""
    findings: list[Finding] = []
    sfa = layout.working
    k_max = max_speculative_tokens(block_size, sfa)
    history = desc.spec.block_size_in_proposal_count.get(desc.algorithm)
    pattern = desc.spec.keys.speculative_tokens or "speculative_tokens"
    for index, tokens in enumerate(desc.proposal_speculative_tokens or []):
        key = pattern.replace("[*]", f"[{index}]")
        values = {key: tokens, "block_size": block_size, "sample_from_anchor": layout.sample_from_anchor}
        keys = (key, "block_size", "sample_from_anchor")
        fits = _is_positive_int(tokens) and tokens in (block_size - 1, block_size)
        if (tokens == k_max and _is_positive_int(tokens)) or (fits and not layout.known):
            continue  # an unknown layout's readings: DFT010 / DFT018 say it
        if not fits:
            what = "not a positive integer" if not _is_positive_int(tokens) else "neither layout's K_max"
            message = (
                f"{key} = {tokens!r} is {what}: block_size {block_size} stores {block_size - 1} (bonus-anchor) "
                f"or {block_size} (anchor-first)."
            )
            hint = (
                f"Run `dflash-tools convert SRC -o OUT` to write K_max = {k_max} there."
                if layout.known
                else "Settle the layout first (DFT018); convert then writes K_max there."
            )
            findings.append(make_finding("DFT012", message, hint, keys=keys, values=values))
        elif layout.stated:
            findings.append(
                make_finding(
                    "DFT012",
                    f"{key} = {tokens} contradicts the declared {layout_name(sfa)} layout, whose K_max for "
                    f"block_size {block_size} is {k_max}.",
                    f"Run `dflash-tools convert SRC -o OUT` to rewrite the count to {k_max} (the declaration wins).",
                    keys=keys,
                    values=values,
                )
            )
        else:
            # Only the inferred layout makes this count wrong: never an error (docs/rules.md).
            settled = layout.deciding[0].kind.value.replace("-", " ")
            cause = f"; {history}" if tokens == block_size and history else ""
            findings.append(
                make_finding(
                    "DFT012",
                    f"{key} = {tokens} is not K_max = {k_max} of the {layout_name(sfa)} layout that the {settled} "
                    f"settles (DFT011){cause}.",
                    f"Run `dflash-tools convert SRC -o OUT` to rewrite it to {k_max} and write the layout down.",
                    severity=Severity.WARNING,
                    keys=keys,
                    values={**values, "readings": ["bonus-anchor", "anchor-first"]},
                )
            )
    return findings


def check_serving_k(desc: DraftDescription, geometry: Geometry) -> list[Finding]:
    """Rules for a requested K (docs/rules.md, "Geometry")."""
    k = geometry.num_speculative_tokens
    k_max = geometry.max_speculative_tokens
    values = {"num_speculative_tokens": k, "max_speculative_tokens": k_max, "block_size": geometry.block_size}
    if desc.algorithm is Algorithm.DSPARK:
        if k < geometry.block_size:
            return [
                make_finding(
                    "DFT016",
                    f"K = {k} is below DSpark block_size {geometry.block_size}: the Markov head chains the slots, "
                    "and some engines refuse K < block_size",
                    f"serve with K >= {geometry.block_size} unless your engine documents otherwise",
                    keys=("num_speculative_tokens",),
                    values=values,
                )
            ]
        return []
    if desc.algorithm is Algorithm.DFLASH2 and k != k_max:
        return [
            make_finding(
                "DFT013",
                f"K = {k} but this DFlash2 draft was trained with block_size {geometry.block_size} "
                f"({geometry.layout}): K must be exactly {k_max} so that {geometry.block_size} query positions "
                "fill one convolution block",
                f"serve with num_speculative_tokens={k_max}",
                keys=("num_speculative_tokens",),
                values=values,
            )
        ]
    if k > k_max:
        return [
            make_finding(
                "DFT014",
                f"K = {k} exceeds the trained K_max = {k_max}: positions {k_max + 1}..{k} were never trained",
                f"serve with num_speculative_tokens <= {k_max}",
                keys=("num_speculative_tokens",),
                values=values,
            )
        ]
    if k < k_max:
        return [
            make_finding(
                "DFT016",
                f"K = {k} is below the trained K_max = {k_max}: valid, the last {k_max - k} trained positions go unused",
                f"num_speculative_tokens={k_max} drafts every trained position",
                keys=("num_speculative_tokens",),
                values=values,
            )
        ]
    return []


def check_conv_geometry(desc: DraftDescription, geometry: Geometry) -> list[Finding]:
    """DFlash2 convolution taps against the block and the query positions."""
    spec = desc.dflash2
    if spec is None:
        return []
    findings: list[Finding] = []
    taps = spec.conv_kernel_size
    if _is_positive_int(taps) and taps > geometry.block_size:
        findings.append(
            make_finding(
                "DFT015",
                f"dflash_config.conv_kernel_size = {taps} exceeds block_size {geometry.block_size}",
                "the convolution never sees more than one block: check conv_kernel_size and block_size",
                keys=("conv_kernel_size", "block_size"),
                values={"conv_kernel_size": taps, "block_size": geometry.block_size},
            )
        )
    elif _is_positive_int(taps) and taps > geometry.num_query_tokens:
        findings.append(
            make_finding(
                "DFT017",
                f"conv_kernel_size = {taps} exceeds the {geometry.num_query_tokens} query positions at K = "
                f"{geometry.num_speculative_tokens}: {taps - geometry.num_query_tokens} taps are unused",
                f"serve with num_speculative_tokens={geometry.max_speculative_tokens}",
                keys=("conv_kernel_size",),
                values={"conv_kernel_size": taps, "num_query_tokens": geometry.num_query_tokens},
            )
        )
    hidden = desc.decoder.hidden_size
    group = spec.conv_group_size
    if _is_positive_int(group) and hidden % group != 0:
        findings.append(
            make_finding(
                "DFT015",
                f"conv_group_size = {group} does not divide hidden_size {hidden}",
                "conv_group_size must divide hidden_size",
                keys=("conv_group_size", "hidden_size"),
                values={"conv_group_size": group, "hidden_size": hidden},
            )
        )
    return findings
