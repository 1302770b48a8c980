"""The normalized draft description every dialect reader produces and every writer consumes.

Readers record evidence exactly as the file states it (including where each value was found), so
that geometry can say how it decided and checks can name the exact keys. Nothing here applies
defaults that are to be reported as defaults (docs/rules.md, "How sample_from_anchor is
decided"): `geometry.py` does that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dflash_tools.findings import Finding


class Algorithm(StrEnum):
    DFLASH = "dflash"
    DFLASH2 = "dflash2"
    DSPARK = "dspark"


class Dialect(StrEnum):
    ZLAB_DFLASH = "zlab-dflash"
    ZLAB_DFLASH2 = "zlab-dflash2"
    SPECULATORS_DFLASH = "speculators-dflash"
    SPECULATORS_DFLASH2 = "speculators-dflash2"
    SPECULATORS_DSPARK = "speculators-dspark"
    DSPARK_NATIVE = "dspark-native"
    OPEN_SPEC = "open-spec"

    @property
    def family(self) -> str:
        """`zlab`, `speculators`, `dspark-native` or `open-spec`."""
        if self.value.startswith("zlab"):
            return "zlab"
        if self.value.startswith("speculators"):
            return "speculators"
        return self.value


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
    """A statement of the trained layout under another key than `sample_from_anchor`.

    `key` is where it was found (a dotted path, or `architectures` for a layout recognized by
    its markers), `sample_from_anchor` what it means, `why` the sentence that says so. Geometry
    weighs it against the `sample_from_anchor` values (docs/inspect.md, "Geometry").
    """

    key: str
    sample_from_anchor: bool
    why: str


@dataclass
class DraftDescription:
    """One draft, independent of the dialect it was read from.

    `block_size_values` and `sample_from_anchor_values` map each location the dialect keeps the
    value in (a dotted key path such as `dflash_config.block_size`) to the raw value found there;
    absent locations are not listed. `layout_evidence` holds what other keys say about the layout
    (`shift_label`, the DeepSpec markers). `target_layer_ids` is always in the z-lab convention
    (0-based index of the target layer whose output is captured).
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
    def num_captured_layers(self) -> int:
        return len(self.target_layer_ids)

    @property
    def fc_input_width(self) -> int:
        return self.num_captured_layers * (self.target_hidden_size or self.decoder.hidden_size)

    @property
    def reduced_vocabulary(self) -> bool:
        return self.draft_vocab_size != self.decoder.vocab_size
