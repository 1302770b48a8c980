"""Native DSpark (DeepSeek `Qwen3DSparkModel`, RadixArk `DSparkDraftModel`): flat keys.

No `sample_from_anchor` key means anchor-first (true). `target_layer_ids` are 0-based, and -1 is
the embedding output. RadixArk's published drafts keep `target_layer_ids` and `mask_token_id` in a
`dflash_config` instead; both engines read a `dflash_config` copy of either key before the
top-level one, so `read` does too.

DeepSpec also publishes plain DFlash drafts in this form (`dflash_qwen3_8b_block7` and its
siblings): `Qwen3DSparkModel` with `markov_rank: 0` (no Markov head), a top-level `block_size`
that is K, and no `sample_from_anchor` although they were trained anchor-first. `read` records
that layout as evidence, so that inspect names it and says what each engine does with it.
"""

from __future__ import annotations

from typing import Any

from dflash_tools.dialects._common import (
    ConfigInvalid,
    ConfigView,
    architectures,
    block_size_values,
    copy_config,
    layout_values,
    read_decoder,
    write_layout,
)
from dflash_tools.draft.description import Algorithm, Dialect, DraftDescription, DSparkSpec, LayoutEvidence
from dflash_tools.draft.dialect_spec import Causality, DialectKeys, DialectSpec, LayoutKey
from dflash_tools.draft.geometry import Geometry

SPEC = DialectSpec(
    family="dspark-native",
    title="native DSpark",
    markers="architectures [Qwen3DSparkModel], [Gemma4DSparkModel] or [DSparkDraftModel] (or Qwen3OmniDSparkModel, "
    "LingDSparkModel, Lfm2DSparkDraftModel: the same layers)",
    # No layout key means anchor-first: vLLM's default (vllm/v1/worker/gpu/spec_decode/dspark/speculator.py).
    dialects=(Dialect("dspark-native", Algorithm.DSPARK, sample_from_anchor_default=True),),
    keys=DialectKeys(
        decoder=("",),
        # The format's own keys are top-level. Both engines read target_layer_ids and
        # mask_token_id from a dflash_config first (vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:
        # get_eagle3_aux_layers_from_config, vllm/v1/worker/gpu/spec_decode/utils.py:
        # get_parallel_drafting_token_id; sglang/srt/speculative/dspark_components/dspark_config.py:
        # parse_dspark_draft_config), where RadixArk's DSparkDraftModel drafts keep them.
        algorithm=("", "dflash_config."),
        block_size=("block_size",),
        # vLLM reads sample_from_anchor (vllm/v1/worker/gpu/spec_decode/dspark/speculator.py);
        # query_zero_predicts_next is the other spelling DeepSpec drafts are declared with.
        layout=(LayoutKey("sample_from_anchor"), LayoutKey("query_zero_predicts_next")),
    ),
    causality=Causality.SLIDING_WINDOW_NON_CAUSAL,
    lowest_layer_id=-1,  # -1 is the embedding output
)
(DSPARK_NATIVE,) = SPEC.dialects
# Qwen3OmniDSparkModel is Qwen3DSparkModel's class in vLLM (vllm/model_executor/models/registry.py);
# LingDSparkModel and Lfm2DSparkDraftModel are DSparkDraftModel's in SGLang (sglang/srt/models/dspark.py,
# lfm2_dspark.py).
_ARCHITECTURES = {
    "Qwen3DSparkModel",
    "Gemma4DSparkModel",
    "DSparkDraftModel",
    "Qwen3OmniDSparkModel",
    "LingDSparkModel",
    "Lfm2DSparkDraftModel",
}


def detect(config: dict[str, Any]) -> Dialect | None:
    if "speculators_model_type" in config:
        return None
    return DSPARK_NATIVE if _ARCHITECTURES & set(architectures(config)) else None


def read(config: dict[str, Any], dialect: Dialect) -> DraftDescription:
    top = ConfigView(config)
    nested = top.sub("dflash_config") or ConfigView({}, "dflash_config.", top.findings)
    decoder = read_decoder(top)

    def pick(key: str) -> tuple[ConfigView, str]:
        # A dflash_config copy wins over the top-level one in vLLM and SGLang alike (see SPEC).
        return (nested, f"dflash_config.{key}") if nested.has(key) else (top, key)

    ids_view, ids_key = pick("target_layer_ids")
    ids = ids_view.get_int_list("target_layer_ids", minimum=-1)
    if ids is None:
        top.require("target_layer_ids", None)
        raise ConfigInvalid(top.findings)
    mask_view, mask_key = pick("mask_token_id")
    mask = mask_view.get_int("mask_token_id", minimum=0)
    markov_rank = top.get_int("markov_rank", 0, minimum=0) or 0
    evidence: tuple[LayoutEvidence, ...] = ()
    if is_deepspec_dflash(config):
        evidence = (
            LayoutEvidence(
                "architectures",
                True,
                "DeepSpec's DFlash layout (Qwen3DSparkModel, markov_rank 0, no dflash_config): trained anchor-first, "
                "position j predicting anchor + j + 1",
            ),
        )
    return DraftDescription(
        dialect=dialect,
        algorithm=Algorithm.DSPARK,
        decoder=decoder,
        target_layer_ids=ids,
        target_layer_ids_key=ids_key,
        mask_token_id=mask,
        mask_token_id_key=mask_key if mask is not None else None,
        draft_vocab_size=top.get_int("draft_vocab_size") or decoder.vocab_size,
        block_size_values=block_size_values(config, SPEC),
        sample_from_anchor_values=layout_values(config, SPEC),
        layout_evidence=evidence,
        num_target_layers=top.get_int("num_target_layers"),
        dspark=DSparkSpec(
            markov_rank=markov_rank,
            markov_head_type=top.get_str("markov_head_type", "vanilla") or "vanilla",
            enable_confidence_head=bool(top.get_bool("enable_confidence_head", False)),
            confidence_head_with_markov=bool(top.get_bool("confidence_head_with_markov", False)),
        ),
        raw_config=config,
        reader_findings=top.findings,
    )


def is_deepspec_dflash(config: dict[str, Any]) -> bool:
    """DeepSpec's DFlash drafts in DSpark form, which do not say they are anchor-first."""
    return (
        "Qwen3DSparkModel" in architectures(config)
        and config.get("markov_rank") == 0
        and not isinstance(config.get("markov_rank"), bool)
        and "dflash_config" not in config
        and not layout_values(config, SPEC)
    )


def normalize(config: dict[str, Any], geometry: Geometry) -> dict[str, Any]:
    """block_size, and the layout written explicitly where vLLM and SGLang read it (their defaults
    for a missing key disagree with other DSpark tools'); another spelling the file uses is kept."""
    out = copy_config(config)
    out["block_size"] = geometry.block_size
    write_layout(out, SPEC, geometry.sample_from_anchor, ("sample_from_anchor",))
    return out
