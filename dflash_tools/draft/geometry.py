"""Geometry: the one place that knows how block_size, sample_from_anchor, K and query counts relate.

docs/rules.md, "Geometry". B = trained block_size, SFA = sample_from_anchor, K = draft tokens per step,
Q = query positions per request per step.

    bonus-anchor (SFA false): K_max = B - 1, Q = K + 1
    anchor-first (SFA true):  K_max = B,     Q = K

Readers only record what a file says and where; this module decides what it means, how it was
decided (explicit / inferred / default) and which findings follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflash_tools.draft.description import Algorithm, DraftDescription, ValueSource
from dflash_tools.draft.dialect_spec import DialectSpec, LayoutKey, ProposalCount
from dflash_tools.findings import Finding, make_finding


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


@dataclass(frozen=True)
class Geometry:
    block_size: int
    block_size_source: ValueSource
    sample_from_anchor: bool
    sample_from_anchor_source: ValueSource
    max_speculative_tokens: int
    num_speculative_tokens: int
    num_query_tokens: int
    speculative_tokens_requested: bool
    # The key the layout was read from (a dotted path, whatever its spelling), the marker of an
    # inferred layout (`architectures`), or None for a default.
    sample_from_anchor_key: str | None = None

    @property
    def layout(self) -> str:
        return layout_name(self.sample_from_anchor)

    def to_dict(self) -> dict[str, Any]:
        return {
            "block_size": self.block_size,
            "block_size_source": self.block_size_source.value,
            "sample_from_anchor": self.sample_from_anchor,
            "sample_from_anchor_source": self.sample_from_anchor_source.value,
            "sample_from_anchor_key": self.sample_from_anchor_key,
            "layout": self.layout,
            "max_speculative_tokens": self.max_speculative_tokens,
            "num_speculative_tokens": self.num_speculative_tokens,
            "num_query_tokens": self.num_query_tokens,
            "speculative_tokens_requested": self.speculative_tokens_requested,
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

    layout = _resolve_sample_from_anchor(desc, block_size)
    sfa, sfa_source = layout.sample_from_anchor, layout.source
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
    if sfa_source is not ValueSource.EXPLICIT:
        findings.append(_sfa_not_explicit(desc, sfa, sfa_source))
    if block_size is None:
        return None, findings

    if spec.keys.proposal_count is ProposalCount.CHECKED:
        findings.extend(_check_proposal_tokens(desc, block_size, sfa, sfa_source))

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
    requested = num_speculative_tokens is not None
    k = num_speculative_tokens if num_speculative_tokens is not None else k_max
    geometry = Geometry(
        block_size=block_size,
        block_size_source=block_source,
        sample_from_anchor=sfa,
        sample_from_anchor_source=sfa_source,
        max_speculative_tokens=k_max,
        num_speculative_tokens=k,
        num_query_tokens=num_query_tokens(k, sfa),
        speculative_tokens_requested=requested,
        sample_from_anchor_key=layout.key,
    )
    if requested:
        findings.extend(check_serving_k(desc, geometry))
    findings.extend(check_conv_geometry(desc, geometry))
    return geometry, findings


def _block_size_places(spec: DialectSpec) -> str:
    """Where a dialect states its block size, in words (the DFT010 for an absent one)."""
    paths = spec.keys.block_size
    places = [f"{path} (top level)" if "." not in path and len(paths) > 1 else path for path in paths]
    if spec.keys.proposal_count is ProposalCount.BLOCK_SIZE and spec.keys.speculative_tokens is not None:
        places.append(spec.keys.speculative_tokens)
    return " or ".join(places) or "block_size"


def trained_layout(desc: DraftDescription) -> tuple[bool, ValueSource]:
    """sample_from_anchor and how it was decided, as `resolve_geometry` decides it, also when the
    block size is unknown (the engine view needs the layout of a draft without one)."""
    block_size, _, _ = resolve_block_size(desc)
    layout = _resolve_sample_from_anchor(desc, block_size)
    return layout.sample_from_anchor, layout.source


@dataclass(frozen=True)
class _Layout:
    sample_from_anchor: bool
    source: ValueSource
    key: str | None
    findings: list[Finding]


def _declared(path: str) -> str:
    """A layout declaration in words: its spelling and where it sits."""
    entry = LayoutKey(path)
    return f"{entry.spelling} {entry.where}"


def _resolve_sample_from_anchor(desc: DraftDescription, block_size: int | None) -> _Layout:
    """The layout, from the draft's declarations (every spelling the spec lists), markers, the
    proposal count or the dialect default, in that order (docs/rules.md, "How sample_from_anchor is
    decided")."""
    findings: list[Finding] = []
    spec = desc.spec
    values = desc.sample_from_anchor_values
    for key, value in values.items():
        if not isinstance(value, bool):
            findings.append(
                make_finding(
                    "DFT006",
                    f"{key} is {value!r}, not true or false",
                    f"write {key} as a JSON boolean",
                    keys=(key,),
                    values={key: value},
                )
            )
    booleans = {k: v for k, v in values.items() if isinstance(v, bool)}
    if len(set(booleans.values())) > 1:
        findings.append(
            make_finding(
                "DFT010",
                "sample_from_anchor disagrees between its declarations: "
                + ", ".join(f"{_declared(key)} = {str(value).lower()}" for key, value in booleans.items()),
                "decide the trained layout and run `dflash-tools convert SRC -o OUT --sample-from-anchor` "
                "(or --no-sample-from-anchor)",
                keys=tuple(booleans),
                values=booleans,
            )
        )
    evidence = desc.layout_evidence
    stated = {**booleans, **{e.key: e.sample_from_anchor for e in evidence}}
    if evidence and len(set(stated.values())) > 1 and len(set(booleans.values())) <= 1:
        # The markers say the other layout: never a silent pick (docs/inspect.md, "Geometry").
        findings.append(
            make_finding(
                "DFT010",
                "the layout is stated two ways: "
                + "; ".join([f"{key}={value!r}" for key, value in booleans.items()] + [e.why for e in evidence]),
                "decide the trained layout and run `dflash-tools convert SRC -o OUT --sample-from-anchor` "
                "(or --no-sample-from-anchor)",
                keys=tuple(stated),
                values=stated,
            )
        )
    declared = [key for key in booleans if not spec.keys.is_mirror(key)]
    if declared:
        return _Layout(booleans[declared[0]], ValueSource.EXPLICIT, declared[0], findings)
    if booleans:
        # Found only in a mirror location engines do not read (z-lab top level).
        key, value = next(iter(booleans.items()))
        return _Layout(value, ValueSource.INFERRED, key, findings)
    if evidence:
        # A layout recognized by its markers (DeepSpec): inferred, and said so.
        return _Layout(evidence[0].sample_from_anchor, ValueSource.INFERRED, evidence[0].key, findings)

    primary = spec.keys.primary_layout
    if spec.layout_required:
        findings.append(
            make_finding(
                "DFT006",
                f"{primary} is absent, but every {spec.title} config must declare the layout",
                f"add {primary} (true for anchor-first, false for bonus-anchor)",
                keys=(primary,),
            )
        )
        return _Layout(False, ValueSource.DEFAULT, None, findings)
    default = desc.dialect.sample_from_anchor_default
    tokens_key = spec.keys.speculative_tokens
    if spec.keys.proposal_count is ProposalCount.CHECKED and not default and block_size is not None:
        proposal = desc.proposal_speculative_tokens or []
        if proposal and all(t == block_size - 1 for t in proposal):
            return _Layout(False, ValueSource.INFERRED, tokens_key, findings)
    return _Layout(default, ValueSource.DEFAULT, None, findings)


def _sfa_not_explicit(desc: DraftDescription, sfa: bool, source: ValueSource) -> Finding:
    primary = desc.spec.keys.primary_layout
    if source is ValueSource.INFERRED and desc.sample_from_anchor_values:
        why = f"found only at {', '.join(desc.sample_from_anchor_values)}; engines read {primary}"
    elif source is ValueSource.INFERRED and desc.layout_evidence:
        why = f"absent; inferred from {desc.layout_evidence[0].why}"
    elif source is ValueSource.INFERRED:
        why = "absent; inferred from the proposal count (speculative_tokens = block_size - 1)"
    else:
        why = f"absent; {desc.dialect.value} defaults to {str(sfa).lower()}"
    flag = "--sample-from-anchor" if sfa else "--no-sample-from-anchor"
    return make_finding(
        "DFT011",
        f"{primary} is not explicit ({why}); assuming {layout_name(sfa)} layout",
        # How to find out comes first: writing down a guess would make a wrong layout look settled.
        "to find out how it was trained: the draft's model card or training config; inspect's profile line, "
        "when the draft matches a published one (configs/profiles); or serve both layouts on its target with "
        "`smoke-test --compare-layouts`, where the trained layout wins clearly (docs/smoke-test.md). "
        f"If it was trained {layout_name(sfa)}, run `dflash-tools convert SRC -o OUT {flag}` to write it down",
        keys=(primary,),
        values={"sample_from_anchor": sfa, "source": source.value},
    )


def _check_proposal_tokens(
    desc: DraftDescription, block_size: int, sfa: bool, sfa_source: ValueSource
) -> list[Finding]:
    findings: list[Finding] = []
    k_max = max_speculative_tokens(block_size, sfa)
    pattern = desc.spec.keys.speculative_tokens or "speculative_tokens"
    for index, tokens in enumerate(desc.proposal_speculative_tokens or []):
        key = pattern.replace("[*]", f"[{index}]")
        if tokens == k_max:
            continue
        if not _is_positive_int(tokens):
            message = f"{key} is {tokens!r}, not a positive integer"
        elif sfa_source is not ValueSource.EXPLICIT and tokens == block_size:
            # Two readings, and the file cannot tell them apart: say both, pick neither silently.
            message = (
                f"{key} = {tokens} equals block_size {block_size}, which is ambiguous: speculators saves before "
                f"April 2026 stored block_size here by mistake (a bonus-anchor draft, K_max = {block_size - 1}), "
                f"and an anchor-first draft stores its K_max = {block_size} here; sample_from_anchor is not "
                f"stated, so the {layout_name(sfa)} reading is assumed"
            )
            findings.append(
                make_finding(
                    "DFT012",
                    message,
                    "an older save: run `dflash-tools convert SRC -o OUT --no-sample-from-anchor`; if the draft "
                    "was trained anchor-first, pass --sample-from-anchor there instead",
                    keys=(key, "block_size", "sample_from_anchor"),
                    values={
                        key: tokens,
                        "block_size": block_size,
                        "sample_from_anchor": sfa,
                        "readings": ["bonus-anchor (speculators save before April 2026)", "anchor-first"],
                    },
                )
            )
            continue
        else:
            message = (
                f"{key} = {tokens} but block_size {block_size} with sample_from_anchor={str(sfa).lower()} "
                f"trains K_max = {k_max}"
            )
        findings.append(
            make_finding(
                "DFT012",
                message,
                "run `dflash-tools convert SRC -o OUT` to set it consistently "
                "(add --sample-from-anchor if the draft was trained anchor-first)",
                keys=(key, "block_size", "sample_from_anchor"),
                values={key: tokens, "block_size": block_size, "sample_from_anchor": sfa},
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
