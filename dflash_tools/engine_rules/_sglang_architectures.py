"""The DFlash-family architectures the SGLang table's release registers, and what it does with
each config feature (its module, `sglang_0_5_23`, holds everything else).

`ARCHITECTURES` mirrors the `EntryClass` lists of the release's DFlash-family model files (the
SGLang tier parses them from the wheel and fails on an entry the table lacks). File references
are to the released wheel's `sglang/`.
"""

from __future__ import annotations

from dflash_tools.engine_rules._model import Architecture, FeatureRule, Outcome

_MODELS = "sglang/srt/models"
_DFLASH = f"{_MODELS}/dflash.py: EntryClass"
_DSPARK = f"{_MODELS}/dspark.py: EntryClass"
_UTILS = "sglang/srt/speculative/dflash_utils.py"
_MODEL = f"{_MODELS}/dflash.py"
_NEMOTRON = f"{_UTILS}: is_nemotron_35_draft_config"
# The Nemotron-3.5 test, in words: SGLang keeps a draft's own embeddings, quantization and
# top-level sinks only when all of it holds.
NEMOTRON_35_TEST = (
    "only when the whole Nemotron-3.5 test holds: architecture DFlashDraftModel or Qwen3DSparkModel, "
    "has_embed_tokens true, has_lm_head false, quantization_config.quant_algo W4A16_NVFP4, "
    "eagle_aux_hidden_state_layer_ids equal to target_layer_ids + 1, and sample_from_anchor false"
)

ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture("DFlashDraftModel", "dflash", "dflash.DFlashDraftModel", _DFLASH, "zlab"),
    Architecture(
        "DFlashLagunaForCausalLM",
        "dflash",
        "dflash.DFlashLagunaForCausalLM",
        _DFLASH,
        note="poolside Laguna's DFlash draft: Laguna decoder layers (gating, per-layer sliding_windows)",
    ),
    Architecture(
        "MuseGlimmerAssistantModel",
        "dflash",
        "dflash.MuseGlimmerAssistantModel",
        _DFLASH,
        "muse-glimmer",
        "sglang/srt/configs/muse_glimmer.py: MuseGlimmerAssistantConfig makes it non-causal and borrows the "
        "target's vocabulary",
    ),
    Architecture("DFlash2DraftModel", "dflash2", "dflash.DFlash2DraftModel", _DFLASH, "zlab"),
    Architecture(
        "DFlash2BeamDraftModel", "dflash2", "dflash.DFlash2BeamDraftModel", _DFLASH, "zlab", "DFlash2DraftModel's class"
    ),
    Architecture(
        "MiniMaxDFlash2DraftModel",
        "dflash2",
        "dflash.MiniMaxDFlash2DraftModel",
        _DFLASH,
        "zlab",
        "DFlash2DraftModel's class",
    ),
    Architecture("Qwen3DSparkModel", "dspark", "dspark.Qwen3DSparkModel", _DSPARK, "dspark-native"),
    Architecture(
        "LingDSparkModel",
        "dspark",
        "dspark.LingDSparkModel",
        _DSPARK,
        "dspark-native",
        "Qwen3DSparkModel's layers for Ling targets",
    ),
    Architecture("DSparkDraftModel", "dspark", "dspark.DSparkDraftModel", _DSPARK, "dspark-native"),
    Architecture(
        "DSparkMiniMaxDraftModel",
        "dspark",
        "dspark_minimax.DSparkMiniMaxDraftModel",
        f"{_MODELS}/dspark_minimax.py: EntryClass",
        note="MiniMax-M3's DSpark draft: MiniMax-M3 attention and decoder layers",
    ),
    Architecture(
        "Lfm2DSparkDraftModel",
        "dspark",
        "lfm2_dspark.Lfm2DSparkDraftModel",
        f"{_MODELS}/lfm2_dspark.py: EntryClass",
        "dspark-native",
        "DSparkDraftModel's class for LFM2 targets",
    ),
    Architecture(
        "DeepseekV4ForCausalLMDSpark",
        "dspark",
        "deepseek_v4_dspark.DeepseekV4ForCausalLMDSpark",
        f"{_MODELS}/deepseek_v4_dspark.py: EntryClass",
        note="DeepSeek-V4's DSpark stages, built inside the target from its dspark_* keys",
    ),
    Architecture(
        "LiLiCorrDraftModel",
        "dflash",
        "lilicorr.LiLiCorrDraftModel",
        f"{_MODELS}/lilicorr.py: EntryClass",
        note="DFlash with LiLiCorr's correction layers and their weights",
    ),
)


def _unread(feature: str, cite: str, note: str) -> FeatureRule:
    # Weights the model does not build are skipped by DFlashDraftModel.load_weights without an error.
    return FeatureRule(feature, (), Outcome.SERVED_WRONG, cite, note)


FEATURES: tuple[FeatureRule, ...] = (
    _unread(
        "moe-ffn",
        f"{_MODEL}: DFlashDraftModel.load_weights",
        "no MoE draft MLP: the layers are built dense and the loader skips the expert weights",
    ),
    FeatureRule(
        "own-embeddings",
        ("has_embed_tokens",),
        Outcome.SERVED,
        f"{_NEMOTRON}; sglang/srt/speculative/dflash_worker_v2.py: _resolve_dflash_embedding_module",
        f"kept {NEMOTRON_35_TEST}; otherwise the target's embedding is used",
        requires="nemotron-3.5-draft",
    ),
    _unread(
        "own-lm-head",
        "sglang/srt/speculative/dflash_worker_v2.py",
        "the DFLASH draft has no head of its own: it borrows the target's",
    ),
    FeatureRule(
        "quantized",
        ("quantization_config",),
        Outcome.SERVED,
        f"{_NEMOTRON}; {_MODEL}: DFlashDraftModel.__init__",
        f"the layers are quantizable {NEMOTRON_35_TEST}; otherwise they are built unquantized and the loader "
        "skips the packed weights and scales",
        requires="nemotron-3.5-draft",
    ),
    FeatureRule(
        "attention-sink",
        ("dflash_config.attention_sink_bias",),
        Outcome.SERVED,
        f"{_UTILS}: parse_dflash_draft_config; {_MODEL}: DFlashAttention.__init__",
        "add_swa_attention_sink_bias is not read: the sinks are not built and their weights are skipped",
    ),
    FeatureRule(
        "attention-sink",
        ("attention_sink_bias",),
        Outcome.SERVED,
        f"{_MODEL}: DFlashAttention.__init__",
        "the top level is read for Nemotron-3.5 drafts only, with --speculative-draft-attention-backend trtllm_mha",
        requires="nemotron-3.5-draft",
    ),
    FeatureRule(
        "value-scale",
        ("dflash_config.attention_value_scale",),
        Outcome.SERVED,
        f"{_UTILS}: parse_dflash_draft_config; {_MODEL}: DFlashAttention.__init__",
        "read from dflash_config only",
    ),
    _unread(
        "sliding-window-everywhere",
        f"{_UTILS}: get_dflash_layer_types; {_UTILS}: get_dflash_attention_sliding_window_size",
        "use_swa is not read: without sliding layers in layer_types every layer attends over the whole context",
    ),
    FeatureRule(
        "partial-rotary",
        ("partial_rotary_factor",),
        Outcome.SERVED,
        f"{_MODEL}: DFlashAttention.__init__",
        "read at the top level (rope_scaling.rope_dim overrides it)",
    ),
    FeatureRule(
        "last-layer-tap",
        (),
        Outcome.SERVED_WRONG,
        f"{_MODELS}/qwen3.py: Qwen3Model.forward; {_MODELS}/qwen2.py: Qwen2Model.forward; "
        f"{_MODELS}/llama.py: LlamaModel.forward",
        "targets built like Llama, Qwen2 and Qwen3 capture a layer's input, so the output of the last layer is "
        "never captured: the draft's input misses it",
        target_dependent=True,
    ),
    _unread("nope-layers", f"{_MODEL}: DFlashAttention.__init__", "no_rope_layers is not read: RoPE on every layer"),
    _unread(
        "layer-fusion",
        f"{_MODEL}: DFlashDraftModel.load_weights",
        "no DFly or DFlare layer fusion: the loader skips the fusion weights",
    ),
)
