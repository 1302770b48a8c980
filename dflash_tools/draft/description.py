"""The normalized draft description every dialect reader produces and every writer consumes.

Readers record evidence exactly as the file states it (including where each value was found), so
that geometry can say how it decided and checks can name the exact keys. Nothing here applies
defaults that are to be reported as defaults (docs/rules.md, "How sample_from_anchor is
decided"): `geometry.py` does that. `Algorithm` and `Dialect` are declared with the dialect
specs (`dialect_spec.py`) and re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from dflash_tools.documents import JsonDocument
from dflash_tools.draft.dialect_spec import Algorithm, Dialect, DialectSpec, LayoutKey, ProposalCount
from dflash_tools.draft.profiles import load_profiles, match_profile
from dflash_tools.findings import Finding

__all__ = [
    "Algorithm",
    "DFlash2Spec",
    "DSparkSpec",
    "DecoderSpec",
    "Dialect",
    "DraftDescription",
    "EvidenceKind",
    "LayoutEvidence",
    "LayoutFact",
    "ValueSource",
]


# Where a config translated by `dflash-tools convert --to` keeps its source config (and dialect),
# so that converting back restores it; written by convert/translate.py.
RESTORE_KEY = "dflash_tools_restore"


class ValueSource(StrEnum):
    EXPLICIT = "explicit"
    INFERRED = "inferred"
    DEFAULT = "default"
    # The evidence does not decide (the trained layout only): both readings are reported.
    UNKNOWN = "unknown"


@dataclass
class DecoderSpec:
    """The draft's decoder dimensions (Qwen3-style layers)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    attention_bias: bool = False
    layer_types: list[str] | None = None
    sliding_window: int | None = None
    rope: dict[str, Any] = field(default_factory=dict)
    rms_norm_eps: float | None = None
    model_type: str | None = None


@dataclass
class DFlash2Spec:
    conv_kernel_size: int
    conv_group_size: int
    selector_rank: int
    selector_top_k: int
    input_embedding_scale: float | None = None
    output_multiplier: float | None = None
    final_logit_softcapping: float | None = None


@dataclass
class DSparkSpec:
    markov_rank: int = 0
    markov_head_type: str = "vanilla"
    enable_confidence_head: bool = False
    confidence_head_with_markov: bool = False


@dataclass(frozen=True)
class LayoutEvidence:
    """What the trained layout is, inferred from markers rather than declared by a key.

    `key` is what it was recognized by (`architectures` for DeepSpec's DFlash drafts),
    `sample_from_anchor` what it means, `why` the sentence that says so. Geometry weighs it
    against the declarations (docs/inspect.md, "Layouts a config does not state").
    """

    key: str
    sample_from_anchor: bool
    why: str


class EvidenceKind(StrEnum):
    """What one piece of evidence about the trained layout is (docs/rules.md, "How
    sample_from_anchor is decided"); `RANKS` orders them, strongest first."""

    DECLARATION = "declaration"  # a declaration where the format's engines read it
    MIRROR = "mirror"  # a declaration in a place its engines do not read (z-lab's top level)
    PROPOSAL_COUNT = "proposal-count"  # the stored draft-token count against the block size
    PUBLISHED_RELEASE = "published-release"  # the published release this config is (configs/profiles)
    TRAINER_RECORD = "trainer-record"  # what the format's trainer wrote at the time
    MARKER = "marker"  # a trainer's convention recognized by its markers (DeepSpec)
    DIALECT_DEFAULT = "dialect-default"  # what the format assumes when nothing is said

    @property
    def rank(self) -> int:
        return RANKS[self]


# The order the evidence is weighed in: the strongest rank that says anything decides, and two
# pieces of one rank that disagree leave the layout unknown.
RANKS = {
    EvidenceKind.DECLARATION: 1,
    EvidenceKind.MIRROR: 1,
    EvidenceKind.PROPOSAL_COUNT: 2,
    EvidenceKind.PUBLISHED_RELEASE: 3,
    EvidenceKind.TRAINER_RECORD: 4,
    EvidenceKind.MARKER: 4,
    EvidenceKind.DIALECT_DEFAULT: 5,
}


@dataclass(frozen=True)
class LayoutFact(JsonDocument):
    """One piece of evidence about the trained layout, as geometry weighs it (JSON
    `geometry.layout_evidence`).

    `where`: the key, marker or release it comes from; `sample_from_anchor`: what it says (None:
    it admits both layouts, as a proposal count equal to the block size of a format that once
    stored the block size there); `why`: the sentence that says so.
    """

    kind: EvidenceKind
    where: str
    sample_from_anchor: bool | None
    why: str

    json_keys: ClassVar[tuple[str, ...]] = ("kind", "where", "says", "sample_from_anchor", "rank", "why")
    json_properties: ClassVar[Mapping[str, str]] = {"says": "says", "rank": "rank"}

    @property
    def rank(self) -> int:
        return self.kind.rank

    @property
    def says(self) -> str:
        if self.sample_from_anchor is None:
            return "either"
        return "anchor-first" if self.sample_from_anchor else "bonus-anchor"


@dataclass
class DraftDescription:
    """One draft, independent of the dialect it was read from.

    `block_size_values` maps each location the dialect keeps the block size in (a dotted key
    path such as `dflash_config.block_size`) to the raw value found there;
    `sample_from_anchor_values` does the same for every declaration of the layout, whatever its
    spelling (`dflash_config.sample_from_anchor`, `query_zero_predicts_next`, `shift_label`: the
    spec's `keys.layout`); absent locations are not listed. `layout_evidence` holds what markers
    say about an undeclared layout (DeepSpec). `target_layer_ids` is always in the z-lab
    convention (0-based index of the target layer whose output is captured).
    """

    dialect: Dialect
    algorithm: Algorithm
    decoder: DecoderSpec
    target_layer_ids: list[int]
    target_layer_ids_key: str
    mask_token_id: int | None
    mask_token_id_key: str | None
    draft_vocab_size: int
    block_size_values: dict[str, Any] = field(default_factory=dict)
    sample_from_anchor_values: dict[str, Any] = field(default_factory=dict)
    layout_evidence: tuple[LayoutEvidence, ...] = ()
    proposal_speculative_tokens: list[int] | None = None
    num_target_layers: int | None = None
    target_hidden_size: int | None = None
    is_causal: bool | None = None
    sliding_window_non_causal: bool | None = None
    dflash2: DFlash2Spec | None = None
    dspark: DSparkSpec | None = None
    verifier_name: str | None = None
    verifier_architectures: list[str] | None = None
    raw_config: dict[str, Any] = field(default_factory=dict)
    reader_findings: list[Finding] = field(default_factory=list)

    @property
    def spec(self) -> DialectSpec:
        """What the draft's format declares (where its keys sit, its defaults)."""
        return self.dialect.spec

    @property
    def translated_from(self) -> str | None:
        """The dialect `dflash-tools convert --to` translated this config from (its RESTORE_KEY
        record), or None: a translated draft was trained in the other format, not in this one."""
        record = self.raw_config.get(RESTORE_KEY)
        dialect = record.get("dialect") if isinstance(record, dict) else None
        return dialect if isinstance(dialect, str) and dialect != self.dialect.value else None

    @property
    def num_captured_layers(self) -> int:
        return len(self.target_layer_ids)

    @property
    def fc_input_width(self) -> int:
        return self.num_captured_layers * (self.target_hidden_size or self.decoder.hidden_size)

    @property
    def reduced_vocabulary(self) -> bool:
        return self.draft_vocab_size != self.decoder.vocab_size

    def model_fields(self) -> dict[str, Any]:
        """The draft's dimensions by the names inspect's JSON `model` and the published profiles
        (`configs/profiles`, `model.*`) give them."""
        d = self.decoder
        model: dict[str, Any] = {
            "hidden_size": d.hidden_size,
            "num_hidden_layers": d.num_hidden_layers,
            "num_attention_heads": d.num_attention_heads,
            "num_key_value_heads": d.num_key_value_heads,
            "head_dim": d.head_dim,
            "intermediate_size": d.intermediate_size,
            "vocab_size": d.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "target_layer_ids": list(self.target_layer_ids),
            "target_layer_ids_key": self.target_layer_ids_key,
            "num_target_layers": self.num_target_layers,
            "target_hidden_size": self.target_hidden_size,
            "mask_token_id": self.mask_token_id,
            "layer_types": d.layer_types,
            "sliding_window": d.sliding_window,
            "is_causal": self.is_causal,
            "sliding_window_non_causal": self.sliding_window_non_causal,
        }
        if self.dflash2 is not None:
            s = self.dflash2
            model.update(
                conv_kernel_size=s.conv_kernel_size,
                conv_group_size=s.conv_group_size,
                selector_rank=s.selector_rank,
                selector_top_k=s.selector_top_k,
                input_embedding_scale=s.input_embedding_scale,
                output_multiplier=s.output_multiplier,
                final_logit_softcapping=s.final_logit_softcapping,
            )
        if self.dspark is not None:
            model.update(
                markov_rank=self.dspark.markov_rank,
                markov_head_type=self.dspark.markov_head_type,
                enable_confidence_head=self.dspark.enable_confidence_head,
            )
        if self.verifier_name is not None:
            model["verifier"] = self.verifier_name
        return model

    def layout_facts(self, block_size: int | None) -> tuple[LayoutFact, ...]:
        """Every piece of evidence about the trained layout, strongest kind first: what the file
        declares, its proposal count against `block_size` (the declared one; None: the count says
        nothing), the published release it is, what its trainer wrote at the time, its markers,
        the dialect's default. `draft.trained_layout.weigh_layout` weighs them."""
        spec = self.spec
        booleans = {k: v for k, v in self.sample_from_anchor_values.items() if isinstance(v, bool)}
        facts = [_declaration(spec, key, value) for key, value in booleans.items()]
        facts.extend(_proposal_count_facts(self, block_size))
        facts.extend(_published_release_facts(self.raw_config))
        record = spec.undeclared_layout
        if record is not None and not booleans:
            version = self.raw_config.get(record.version_key) if record.version_key else None
            shown = f" (this one: {record.version_key} {version})" if isinstance(version, str) else ""
            where = f"{spec.keys.primary_layout} (absent)"
            facts.append(LayoutFact(EvidenceKind.TRAINER_RECORD, where, record.sample_from_anchor, record.why + shown))
        facts.extend(LayoutFact(EvidenceKind.MARKER, e.key, e.sample_from_anchor, e.why) for e in self.layout_evidence)
        if not booleans and not spec.layout_required:
            default = self.dialect.sample_from_anchor_default
            why = f"{self.dialect.value}'s default when nothing is declared: {_layout_word(default)}"
            facts.append(LayoutFact(EvidenceKind.DIALECT_DEFAULT, self.dialect.value, default, why))
        return tuple(facts)


def _layout_word(sample_from_anchor: bool) -> str:
    return "anchor-first" if sample_from_anchor else "bonus-anchor"


def _declaration(spec: DialectSpec, key: str, value: bool) -> LayoutFact:
    entry = LayoutKey(key)
    if spec.keys.is_mirror(key):
        why = f"{entry.spelling} {entry.where} = {str(value).lower()}, a copy engines do not read"
        return LayoutFact(EvidenceKind.MIRROR, key, value, why)
    return LayoutFact(EvidenceKind.DECLARATION, key, value, f"{entry.spelling} {entry.where} = {str(value).lower()}")


def _proposal_count_facts(desc: DraftDescription, block_size: int | None) -> list[LayoutFact]:
    """What each stored proposal count says against the block size: B - 1 is what a bonus-anchor
    draft stores, B what an anchor-first one stores (either, in a format whose trainer once
    stored B there by mistake: `DialectSpec.block_size_in_proposal_count`)."""
    spec = desc.spec
    if spec.keys.proposal_count is not ProposalCount.CHECKED or block_size is None:
        return []
    pattern = spec.keys.speculative_tokens or "speculative_tokens"
    facts = []
    for index, tokens in enumerate(desc.proposal_speculative_tokens or []):
        if isinstance(tokens, bool) or tokens not in (block_size - 1, block_size):
            continue  # not evidence (DFT012 says what is wrong with it)
        key = pattern.replace("[*]", f"[{index}]")
        if tokens == block_size - 1:
            facts.append(
                LayoutFact(
                    EvidenceKind.PROPOSAL_COUNT,
                    key,
                    False,
                    f"{key} = {tokens} = block_size - 1, what a bonus-anchor draft stores",
                )
            )
            continue
        history = spec.block_size_in_proposal_count.get(desc.algorithm)
        why = f"{key} = {tokens} = block_size, what an anchor-first draft stores" + (
            f", and {history}" if history else ""
        )
        facts.append(LayoutFact(EvidenceKind.PROPOSAL_COUNT, key, None if history else True, why))
    return facts


def _published_release_facts(config: dict[str, Any]) -> list[LayoutFact]:
    """The layout of the published release whose config this is (configs/profiles): only the
    config itself identifies a release here, never a name or the dimensions (profiles.match_profile)."""
    match = match_profile("", None, config=config)
    if match is None or match.release is None:
        return []
    profile = next((p for p in load_profiles() if p.name == match.name), None)
    geometry = profile.data.get("geometry") if profile is not None else None
    sfa = geometry.get("sample_from_anchor") if isinstance(geometry, dict) else None
    if not isinstance(sfa, bool):
        return []
    label = match.release.label
    why = f"the published release {label} (configs/profiles) was trained {_layout_word(sfa)}"
    return [LayoutFact(EvidenceKind.PUBLISHED_RELEASE, label, sfa, why)]
