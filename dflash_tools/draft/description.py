"""The normalized draft description every dialect reader produces and every writer consumes.

Readers record evidence exactly as the file states it (including where each value was found), so
that geometry can say how it decided and checks can name the exact keys. Nothing here applies
defaults that are to be reported as defaults (docs/rules.md, "How sample_from_anchor is
decided"): `geometry.py` does that. `Algorithm` and `Dialect` are declared with the dialect
specs (`dialect_spec.py`) and re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dflash_tools.draft.dialect_spec import Algorithm, Dialect, DialectSpec
from dflash_tools.findings import Finding

__all__ = [
    "Algorithm",
    "DFlash2Spec",
    "DSparkSpec",
    "DecoderSpec",
    "Dialect",
    "DraftDescription",
    "LayoutEvidence",
    "ValueSource",
]


# Where a config translated by `dflash-tools convert --to` keeps its source config (and dialect),
# so that converting back restores it; written by convert/translate.py.
RESTORE_KEY = "dflash_tools_restore"


class ValueSource(StrEnum):
    EXPLICIT = "explicit"
    INFERRED = "inferred"
    DEFAULT = "default"


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
