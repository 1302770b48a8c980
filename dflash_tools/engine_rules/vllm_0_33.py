"""vLLM 0.33.0 (PyPI, 2026-11-02): what it does with DFlash-family drafts.

File references are to the released wheel's `vllm/` package.
"""

from __future__ import annotations

from dflash_tools.engine_rules import _vllm_architectures, _vllm_reads
from dflash_tools.engine_rules._model import EngineRules, Layout, LayoutRule, Outcome, QueryCountSite
from dflash_tools.engine_rules.config_loading import ConfigLoading

_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"

RULES = EngineRules(
    engine="vllm",
    version="0.33.0",
    released="2026-11-02",
    summary="V2 runner: bonus-anchor DFlash/DFlash2; anchor-first only with the dflash-tools plugin. "
    "V1 runner still present (VLLM_USE_V2_MODEL_RUNNER=0, or where Triton is missing).",
    has_v1_runner=True,
    v2_only=_vllm_reads.V2_ONLY,
    plugin_module="dflash_tools.vllm_plugin.releases.v0_33",
    plugin_route="wrappers around the five functions that fix the query layout, installed by a "
    "general plugin after their source fingerprints match",
    formats=_vllm_reads.FORMATS,
    routes=_vllm_reads.routes(_vllm_architectures.ARCHITECTURES),
    architectures=_vllm_architectures.ARCHITECTURES,
    features=_vllm_architectures.features(nope_layers=_vllm_architectures.NOPE_LAYERS_NOT_READ),
    keys=_vllm_reads.keys(
        dspark_layout_cite="vllm/v1/worker/gpu/spec_decode/dspark/speculator.py: DSparkSpeculator.__init__",
        dspark_k_cite="vllm/config/speculative.py: SpeculativeConfig.__post_init__",
    ),
    checks=_vllm_reads.checks(),
    serving_defaults=_vllm_reads.serving_defaults(
        utilization_cite="vllm/config/cache.py: CacheConfig",
        utilization_note="the field's default",
    ),
    serving_rules=_vllm_reads.serving_rules(
        budget_cite="vllm/config/vllm.py: VllmConfig._set_max_num_scheduled_tokens"
    ),
    derive_target_layer_ids=_vllm_reads.default_capture_layer_ids,
    captures_sorted=True,
    # The wheel's Requires-Dist; the table is the transformers .ci/requirements-vllm-RELEASE.txt pins.
    config_loading=ConfigLoading(
        engine="vllm",
        parser=_vllm_reads.CONFIG_PARSER,
        transformers=">=5.16.1,<5.21.0",
        table="5.20.2",
        generated="vllm-0.33.0.json",
        speculators_detection=True,
    ),
    launch=_vllm_reads.launch(runner_env=(_vllm_reads.V2_RUNNER_FLAG,)),
    layouts=(
        LayoutRule("dflash", Layout.BONUS, Outcome.SERVED, f"{_SPECULATOR}: DFlashSpeculator.__init__"),
        LayoutRule("dflash2", Layout.BONUS, Outcome.SERVED, "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py"),
        LayoutRule(
            "dflash",
            Layout.ANCHOR_FIRST,
            Outcome.SERVED_WITH_PLUGIN,
            f"{_SPECULATOR}: DFlashSpeculator.__init__ raises on dflash_config.sample_from_anchor",
            "stock V1 (vllm/v1/spec_decode/dflash.py) drafts it in the bonus layout without an error; "
            "the plugin makes V1 refuse it",
        ),
        LayoutRule(
            "dflash2",
            Layout.ANCHOR_FIRST,
            Outcome.SERVED_WITH_PLUGIN,
            f"{_SPECULATOR}: DFlashSpeculator.__init__; vllm/model_executor/models/qwen3_dflash2.py: "
            "DFlash2Qwen3DecoderLayer.__init__ sizes the convolution block 1 + K",
        ),
        LayoutRule(
            "dspark", Layout.ANCHOR_FIRST, Outcome.SERVED, "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py"
        ),
        LayoutRule("dspark", Layout.BONUS, Outcome.SERVED, "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py"),
        *_vllm_reads.DOMINO_LAYOUTS,
    ),
    query_count_sites=(
        QueryCountSite(
            "KV lookahead slots per request",
            "vllm/config/vllm.py: VllmConfig.num_lookahead_tokens (read by the scheduler's allocate_slots "
            "and the worker warm-up)",
            "K + 1 for every DFlash draft",
            "K for an anchor-first draft (wrapped property)",
        ),
        QueryCountSite(
            "draft-pass request budget (scheduler_config.max_num_active_seqs)",
            "vllm/config/vllm.py: VllmConfig._set_max_num_scheduled_tokens, max_num_batched_tokens // num_lookahead_tokens",
            "max_num_batched_tokens // (K + 1)",
            "max_num_batched_tokens // K (follows the wrapped lookahead)",
        ),
        QueryCountSite(
            "query positions per request in the draft step",
            f"{_SPECULATOR}: DFlashSpeculator.__init__ (num_query_per_req, sample_from_anchor)",
            "1 + K; raises on sample_from_anchor",
            "K, sample_from_anchor true (wrapped constructor)",
        ),
        QueryCountSite(
            "CUDA-graph decode query length",
            f"{_SPECULATOR}: DFlashSpeculator.init_cudagraph_manager (decode_query_len=num_query_per_req)",
            "1 + K",
            "K (reads num_query_per_req after the wrapped constructor set it)",
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
            "vllm/config/speculative.py: SpeculativeConfig.compute_hash",
            "does not include the layout",
            "adds the layout and K for an anchor-first draft; unchanged for bonus drafts",
        ),
    ),
)
