"""The DFlash-family architectures vLLM registers, and what it does with each config feature.

Rows both vLLM releases with a table share (checked in both wheels); a release that registers
more declares its own rows in its module. `ARCHITECTURES` mirrors the DFlash-family entries of
`_SPECULATIVE_DECODING_MODELS` (the tiers compare it with each release's registry, so a release
that gains one fails its tier until the table has a row). File references are to the released
wheel's `vllm/`.
"""

from __future__ import annotations

from dflash_tools.engine_rules._model import Architecture, FeatureRule, Outcome

REGISTRY = "vllm/model_executor/models/registry.py: _SPECULATIVE_DECODING_MODELS"
_DFLASH_MODEL = "vllm/model_executor/models/qwen3_dflash.py"
_DFLASH2_MODEL = "vllm/model_executor/models/qwen3_dflash2.py"
_SPECULATIVE = "vllm/config/speculative.py"
_DFLASH_LOADER = "qwen3_dflash.DFlashQwen3ForCausalLM"
_DSPARK_LOADER = "qwen3_dspark.Qwen3DSparkForCausalLM"
_XPRESS = (
    "DFlash with the XPress refiner: xpress_block_size, num_speculative_steps, xpress_rank, xpress_mlp_hidden and "
    "xpress_topc at the top level, and its refiner weights"
)
_DSPARK_TARGET = "a DSpark head built inside the target from the target's own config"

ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture("DFlashDraftModel", "dflash", _DFLASH_LOADER, REGISTRY, "zlab"),
    Architecture(
        "LiLiCorrDraftModel",
        "dflash",
        "lilicorr.LiLiCorrForCausalLM",
        REGISTRY,
        note="DFlash with LiLiCorr's correction layers: dflash_config.lilicorr_enabled, conv_kernel_size, "
        "conv_group_size, the top-level lilicorr_* keys and their weights",
    ),
    Architecture("DFlash2DraftModel", "dflash2", "qwen3_dflash2.DFlash2Qwen3ForCausalLM", REGISTRY, "zlab"),
    Architecture(
        "DFlash2BeamDraftModel",
        "dflash2",
        "vllm.models.beam.DFlash2BeamForCausalLM",
        REGISTRY,
        "zlab",
        "a z-lab DFlash2 config and weights; the class asserts every layer is sliding_attention and non-causal and "
        "reads dflash_config.final_logit_softcapping without a default",
    ),
    Architecture(
        "MuseGlimmerAssistantModel",
        "dflash",
        _DFLASH_LOADER,
        REGISTRY,
        "muse-glimmer",
        f"{_SPECULATIVE}: SpeculativeConfig.hf_config_override adds dflash_config.causal false and vocab_size 202048",
    ),
    Architecture(
        "DFlashMuseGlimmerAssistantModel",
        "dflash",
        _DFLASH_LOADER,
        REGISTRY,
        "muse-glimmer",
        "the name vLLM's EAGLE wrapper gives MuseGlimmerAssistantModel",
    ),
    Architecture(
        "DSparkDraftModel",
        "dspark",
        "vllm.models.deepseek_v4.DSparkDeepseekV4ForCausalLM",
        REGISTRY,
        "dspark-native",
        "served as Qwen3DSparkModel when model_type is qwen3; otherwise DeepSeek-V4's DSpark head",
    ),
    Architecture(
        "DSparkV41DraftModel",
        "dspark",
        "vllm.models.deepseek_v41.DSparkDeepseekV4ForCausalLM",
        REGISTRY,
        note=f"DeepSeek-V4.1's DSpark head, {_DSPARK_TARGET}: dspark_target_layer_ids, num_nextn_predict_layers, "
        "dspark_n_routed_experts and the target's MoE and attention geometry",
    ),
    Architecture("Qwen3DSparkModel", "dspark", _DSPARK_LOADER, REGISTRY, "dspark-native"),
    Architecture(
        "Qwen3OmniDSparkModel",
        "dspark",
        _DSPARK_LOADER,
        REGISTRY,
        "dspark-native",
        f"Qwen3DSparkModel's class; with a Qwen3-Omni target {_SPECULATIVE}: _validate_qwen3_omni_dspark also "
        "requires sample_from_anchor true and a block size equal to K",
    ),
    Architecture("Qwen3XPressModel", "dflash", "qwen3_xpress.Qwen3XPressForCausalLM", REGISTRY, note=_XPRESS),
    Architecture("DFlashQwen3XPressModel", "dflash", "qwen3_xpress.Qwen3XPressForCausalLM", REGISTRY, note=_XPRESS),
    Architecture(
        "K3DSparkModel",
        "dspark",
        "vllm.models.kimi_k3.nvidia.dspark_mla.K3DSparkForCausalLM",
        REGISTRY,
        note="Kimi-K3's DSpark draft with MLA attention: qk_nope_head_dim, qk_rope_head_dim, v_head_dim, "
        "q_lora_rank, kv_lora_rank, num_target_layers and their weights",
    ),
    Architecture(
        "MuseSparkDSparkModel",
        "dspark",
        "vllm.models.muse_spark.common.dspark.MuseSparkDSparkForCausalLM",
        REGISTRY,
        note="Muse Spark's DSpark draft: use_rope, norm_affine, norm_zero_centered_gamma, metap and "
        "output_soft_cap_temp change its layers",
    ),
    Architecture(
        "DFlashLagunaForCausalLM",
        "dflash",
        "laguna_dflash.DFlashLagunaForCausalLM",
        REGISTRY,
        note="poolside Laguna's DFlash draft: Laguna decoder layers (gating, per-layer sliding_windows), "
        "target_layer_count and a draft_vocab_size that must equal the target's",
    ),
    Architecture("Gemma4DSparkModel", "dspark", "gemma4_dspark.Gemma4DSparkForCausalLM", REGISTRY, "dspark-native"),
)


def _unread(feature: str, cite: str, note: str, ignored: Outcome = Outcome.SERVED_WRONG) -> FeatureRule:
    """A feature the release does not implement: no location reads it."""
    return FeatureRule(feature, (), ignored, cite, note, ignored)


def features(*, nope_layers: FeatureRule) -> tuple[FeatureRule, ...]:
    """What both releases do with each config feature; NoPE layers differ between them."""
    return (
        _unread(
            "moe-ffn",
            f"{_DFLASH_MODEL}: DFlashQwen3ForCausalLM.load_weights",
            "no MoE draft MLP: draft_ffn_type is not read, the layers are built dense and the weight loader "
            "refuses the expert weights",
            Outcome.REFUSED,
        ),
        _unread(
            "own-embeddings",
            "vllm/v1/worker/gpu/spec_decode/eagle/utils.py: maybe_share_target_embed",
            "has_embed_tokens is not read and the DFlash class declares no embeddings of its own: the target's "
            "input embedding replaces the draft's",
        ),
        FeatureRule(
            "own-lm-head",
            ("has_own_lm_head",),
            Outcome.SERVED,
            "vllm/v1/worker/gpu/spec_decode/dflash/utils.py: load_dflash_model",
            "has_lm_head is not read: without has_own_lm_head the target's head replaces the draft's",
        ),
        FeatureRule(
            "quantized",
            ("quantization_config",),
            Outcome.SERVED,
            "vllm/model_executor/models/utils.py: get_draft_quant_config",
            "the draft's layers are built with its own quantization_config",
        ),
        FeatureRule(
            "attention-sink",
            ("dflash_config.attention_sink_bias", "add_swa_attention_sink_bias"),
            Outcome.SERVED,
            f"{_DFLASH_MODEL}: DFlashQwen3DecoderLayer.__init__",
            "a top-level attention_sink_bias is not read: the sink parameters are not built and the weight "
            "loader refuses their weights",
            Outcome.REFUSED,
        ),
        FeatureRule(
            "value-scale",
            ("dflash_config.attention_value_scale",),
            Outcome.SERVED,
            f"{_DFLASH_MODEL}: DFlashQwen3DecoderLayer.__init__",
            "read from dflash_config only",
        ),
        FeatureRule(
            "sliding-window-everywhere",
            ("dflash_config.use_swa",),
            Outcome.SERVED,
            f"{_DFLASH_MODEL}: _resolve_layer_attention",
            "every layer slides, over dflash_config.swa_window_size, else sliding_window; read from dflash_config only",
        ),
        FeatureRule(
            "partial-rotary",
            ("partial_rotary_factor", "rope_parameters.partial_rotary_factor"),
            Outcome.SERVED,
            "vllm/transformers_utils/config.py: patch_rope_parameters",
            "moved into rope_parameters when the config is loaded",
        ),
        FeatureRule(
            "last-layer-tap",
            ("target_layer_ids",),
            Outcome.SERVED,
            "vllm/model_executor/models/llama.py: LlamaModel.forward",
            "captured after the last layer, before the target's final norm (Llama, Qwen2, Qwen3 and the models "
            "built like them); a draft trained on transformers' hidden_states, whose last entry is normed, sees "
            "other features",
            target_dependent=True,
        ),
        nope_layers,
        _unread(
            "layer-fusion",
            f"{_DFLASH_MODEL}: DFlashQwen3ForCausalLM.load_weights",
            "no DFly or DFlare layer fusion: the fusion weights are not loadable",
            Outcome.REFUSED,
        ),
    )


# vLLM 0.33.0 has no NoPE-layer DFlash2 class: RoPE turns on every layer.
NOPE_LAYERS_NOT_READ = _unread(
    "nope-layers",
    f"{_DFLASH2_MODEL}: DFlash2Qwen3DecoderLayer.__init__",
    "no_rope_layers is not read: RoPE is applied on every layer",
)
