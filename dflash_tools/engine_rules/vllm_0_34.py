"""vLLM 0.34.0 (PyPI, 2026-11-16): what it does with DFlash-family drafts.

What moved since 0.33.0: the V1 model runner is gone (`VLLM_USE_V2_MODEL_RUNNER` other than 1
raises in `vllm/platforms/interface.py`); each speculative method has a config class
(`vllm/v1/worker/gpu/spec_decode/speculator_config.py`) that owns the lookahead, the draft-pass
budget and the speculator's hash factors. File references are to the released wheel's `vllm/`.
"""

from __future__ import annotations

from dflash_tools.engine_rules import _vllm_architectures, _vllm_reads
from dflash_tools.engine_rules._model import (
    Architecture,
    EngineRules,
    FeatureRule,
    LaunchFlag,
    Layout,
    LayoutRule,
    Outcome,
    QueryCountSite,
    ServingRule,
)
from dflash_tools.engine_rules.config_loading import ConfigLoading

_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"
_CONFIG = "vllm/v1/worker/gpu/spec_decode/dflash/config.py"

_REGISTRY = _vllm_architectures.REGISTRY
# The three DFlash-family architectures this release added to the registry.
ARCHITECTURES = (
    *_vllm_architectures.ARCHITECTURES,
    Architecture(
        "DFlash2RicursiveDraftModel",
        "dflash2",
        "ricursive_dflash2.RicursiveDFlash2ForCausalLM",
        _REGISTRY,
        "zlab",
        "DFlash2 with NoPE layers (no_rope_layers); vllm/config/speculative.py: SpeculativeConfig.hf_config_override "
        "also serves a DFlash2DraftModel config with no_rope_layers this way",
    ),
    Architecture(
        "DSparkMiniMaxDraftModel",
        "dspark",
        "vllm.models.minimax_m3.common.dspark.MiniMaxM3DSparkForCausalLM",
        _REGISTRY,
        note="MiniMax-M3's DSpark draft, kept in the target's dspark/ folder: dspark_ffn_hidden_size, "
        "dspark_use_dense_ffn, swiglu_limit, swiglu_alpha, partial_rotary_factor and MiniMax-M3 attention layers",
    ),
    Architecture(
        "MistralLarge4DSparkModel",
        "dspark",
        "vllm.models.mistral.mistral_large4.MistralLarge4DSparkForCausalLM",
        _REGISTRY,
        note="Mistral Large 4's DSpark draft with MLA attention, made from the target's mtp_config: "
        "dspark_block_size, dspark_draft_input, dspark_head_type and softmax_tanh_gating",
    ),
)

RULES = EngineRules(
    engine="vllm",
    version="0.34.0",
    released="2026-11-16",
    summary="V2 runner only: bonus-anchor DFlash/DFlash2; anchor-first only with the dflash-tools plugin, "
    "refused loudly without it.",
    has_v1_runner=False,
    plugin_module="dflash_tools.vllm_plugin.releases.v0_34",
    plugin_route="wrappers around DFlashSpeculatorConfig (lookahead, hash factors), "
    "DFlashSpeculator.__init__ and DFlash2Qwen3DecoderLayer.__init__, installed by a general plugin after "
    "their source fingerprints match; the launch keeps method 'dflash'",
    formats=_vllm_reads.FORMATS,
    routes=_vllm_reads.routes(ARCHITECTURES),
    architectures=ARCHITECTURES,
    features=_vllm_architectures.features(
        nope_layers=FeatureRule(
            "nope-layers",
            ("no_rope_layers",),
            Outcome.SERVED,
            "vllm/model_executor/models/ricursive_dflash2.py: RicursiveDFlash2DecoderLayer.__init__; "
            "vllm/config/speculative.py: SpeculativeConfig.hf_config_override",
            "DFlash2 drafts only (the Ricursive class); a DFlash draft gets RoPE on every layer",
            requires="dflash2-draft",
        )
    ),
    keys=_vllm_reads.keys(
        dspark_layout_cite="vllm/v1/worker/gpu/spec_decode/dspark/speculator.py: DSparkSpeculator.__init__; vllm/v1/worker/gpu/spec_decode/dspark/config.py: DSparkSpeculatorConfig.num_lookahead_tokens",
        dspark_k_cite="vllm/v1/worker/gpu/spec_decode/dspark/config.py: DSparkSpeculatorConfig.resolve_num_speculative_tokens",
    ),
    checks=_vllm_reads.checks(),
    derive_target_layer_ids=_vllm_reads.default_capture_layer_ids,
    captures_sorted=True,
    # The wheel's Requires-Dist; the table is the transformers .ci/requirements-vllm-RELEASE.txt pins.
    config_loading=ConfigLoading(
        engine="vllm",
        parser=_vllm_reads.CONFIG_PARSER,
        transformers=">=5.16.1,<5.23.0",
        table="5.20.2",
        generated="vllm-0.34.0.json",
        speculators_detection=True,
    ),
    launch=_vllm_reads.launch(
        extra=(
            LaunchFlag(
                "draft-dcp",
                "draft_decode_context_parallel_size",
                "a key of the --speculative-config JSON: the draft's decode context parallelism (1, or the target's)",
                "vllm/config/speculative.py: SpeculativeConfig",
            ),
        )
    ),
    serving_defaults=_vllm_reads.serving_defaults(
        utilization_cite="vllm/config/cache.py: CacheConfig.resolved_gpu_memory_utilization",
        utilization_note="CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION, used unless the extensible KV cache is on; "
        "that cache (the default on CUDA and ROCm) resolves to 1.0 and takes what is left after everything vLLM "
        "measures, so a plan that fits at 0.92 fits there too",
    ),
    serving_rules=(
        *_vllm_reads.serving_rules(
            budget_cite="vllm/config/vllm.py: VllmConfig._set_max_num_scheduled_tokens; "
            f"{_CONFIG}: DFlashSpeculatorConfig.max_num_draft_seqs"
        ),
        ServingRule(
            "draft-dcp-sliding-window",
            "a draft with sliding-window layers runs at draft_decode_context_parallel_size 1, the default for a "
            "draft that is not a full-attention MLA model (a value set in --speculative-config must be 1 or the "
            "target's decode_context_parallel_size)",
            "refused when the drafter is loaded: sliding-window layers cannot run at a larger decode context "
            "parallelism",
            f"{_SPECULATOR}: DFlashSpeculator.load_model; {_CONFIG}: "
            "DFlashSpeculatorConfig.default_draft_decode_context_parallel_size; vllm/config/speculative.py: "
            "SpeculativeConfig._verify_and_get_draft_dcp",
        ),
    ),
    layouts=(
        LayoutRule("dflash", Layout.BONUS, Outcome.SERVED, f"{_SPECULATOR}: DFlashSpeculator.__init__"),
        LayoutRule("dflash2", Layout.BONUS, Outcome.SERVED, "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py"),
        LayoutRule(
            "dflash",
            Layout.ANCHOR_FIRST,
            Outcome.SERVED_WITH_PLUGIN,
            f"{_SPECULATOR}: DFlashSpeculator.__init__ raises on dflash_config.sample_from_anchor",
            "without the plugin the engine refuses it when it builds the drafter (no V1 runner to fall back to)",
        ),
        LayoutRule(
            "dflash2",
            Layout.ANCHOR_FIRST,
            Outcome.SERVED_WITH_PLUGIN,
            f"{_SPECULATOR}: DFlashSpeculator.__init__; vllm/model_executor/models/qwen3_dflash2.py: "
            "DFlash2Qwen3DecoderLayer.__init__ sizes the convolution block 1 + K",
        ),
        LayoutRule("dspark", Layout.ANCHOR_FIRST, Outcome.SERVED, "vllm/v1/worker/gpu/spec_decode/dspark/config.py"),
        LayoutRule("dspark", Layout.BONUS, Outcome.SERVED, "vllm/v1/worker/gpu/spec_decode/dspark/config.py"),
        *_vllm_reads.DOMINO_LAYOUTS,
    ),
    query_count_sites=(
        QueryCountSite(
            "KV lookahead slots per request",
            f"{_CONFIG}: DFlashSpeculatorConfig.num_lookahead_tokens (VllmConfig.num_lookahead_tokens "
            "delegates to it; read by the scheduler's allocate_slots and the worker warm-up)",
            "K + 1 for every DFlash draft",
            "K for an anchor-first draft (wrapped property)",
        ),
        QueryCountSite(
            "draft-pass request budget (scheduler_config.max_num_active_seqs)",
            f"{_CONFIG}: DFlashSpeculatorConfig.max_num_draft_seqs (called from VllmConfig._set_max_num_scheduled_tokens)",
            "max_num_batched_tokens // (K + 1)",
            "max_num_batched_tokens // K (it divides by the wrapped lookahead)",
        ),
        QueryCountSite(
            "query positions per request in the draft step",
            f"{_SPECULATOR}: DFlashSpeculator.__init__ (num_query_per_req, sample_from_anchor)",
            "1 + K; raises on sample_from_anchor",
            "K, sample_from_anchor true (wrapped constructor)",
        ),
        QueryCountSite(
            "CUDA-graph decode query lengths",
            f"{_SPECULATOR}: DFlashSpeculator.init_cudagraph_manager "
            "(decode_query_lens={num_query_per_req: max_num_reqs})",
            "{1 + K: max_num_reqs}",
            "{K: max_num_reqs} (reads num_query_per_req after the wrapped constructor set it)",
        ),
        QueryCountSite(
            "draft requests per warm-up batch",
            "vllm/v1/worker/gpu/model_runner.py and vllm/model_executor/warmup/kernel_warmup.py "
            "(max_num_tokens // speculator.num_query_per_req)",
            "max_num_tokens // (1 + K)",
            "max_num_tokens // K (reads num_query_per_req)",
        ),
        QueryCountSite(
            "DFlash2 convolution block",
            "vllm/model_executor/models/qwen3_dflash2.py: DFlash2Qwen3DecoderLayer.__init__",
            "1 + K",
            "K (wrapped constructor resets both convolutions' block_size)",
        ),
        QueryCountSite(
            "compile-cache key",
            "vllm/config/speculative.py: SpeculativeConfig.compile_factors, factor 'speculator' from "
            "vllm/v1/worker/gpu/spec_decode/speculator_config.py: SpeculatorConfig.hash_factors (empty; "
            "DFlashSpeculatorConfig inherits it)",
            "does not include the layout",
            "hash factors gain the layout and K for an anchor-first draft; unchanged for bonus drafts",
        ),
    ),
)
