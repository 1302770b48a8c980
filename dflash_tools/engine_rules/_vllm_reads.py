"""What the vLLM releases with a table share, built once for their tables (no release numbers here).

vLLM 0.33.0 and 0.34.0 read the same keys from the same places for DFlash-family drafts (checked
in both wheels); where a rule moved between files, the caller passes the file of its release.
Also here: the variable that selects the model runner, and the drafts only the V2 runner serves
where V1 still ships (`V2_ONLY`, also what the tool assumes of a vLLM it has no table for).
File references are to the released wheel's `vllm/`.
"""

from __future__ import annotations

from dflash_tools.engine_rules._model import (
    Architecture,
    Check,
    DraftTrait,
    FormatRule,
    KeyRead,
    LaunchFlag,
    Layout,
    LayoutRule,
    Outcome,
    Route,
    RunnerRule,
    ServingDefault,
    ServingRule,
    WhenMissing,
    routes_of,
)

_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"
_ALGOS = "vllm/transformers_utils/configs/speculators/algos.py"
_AUX = "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py: get_eagle3_aux_layers_from_config"
_MASK = "vllm/v1/worker/gpu/spec_decode/utils.py: get_parallel_drafting_token_id"
_DFLASH_MODEL = "vllm/model_executor/models/qwen3_dflash.py"
_DFLASH2_MODEL = "vllm/model_executor/models/qwen3_dflash2.py"
_REGISTRY = "vllm/model_executor/models/registry.py"
_BEAM = "vllm/models/beam/nvidia/dflash2.py"
_INTERFACES = "vllm/model_executor/models/interfaces.py"

# Where every vLLM release with a table loads a draft's config.json (engine_rules.config_loading).
CONFIG_PARSER = "vllm/transformers_utils/config.py: HFConfigParser.parse"


def default_capture_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The layers vLLM captures when the config names none, as z-lab ids: one less than the
    hidden-state indices 2, L // 2 and L - 3 the target model defaults to, sorted without
    duplicates as vLLM captures them. The draft's own layer count plays no part."""
    del num_draft_layers
    return sorted({2 - 1, num_target_layers // 2 - 1, num_target_layers - 3 - 1})


FORMATS = (
    FormatRule("zlab", True, "vllm/config/speculative.py: SpeculativeConfig.__post_init__"),
    FormatRule(
        "speculators",
        True,
        f"{_ALGOS}: update_dflash; {_ALGOS}: update_dflash2; {_ALGOS}: update_dspark",
        "translated when loaded: aux_hidden_state_layer_ids - 1 become dflash_config.target_layer_ids, the "
        "top-level sample_from_anchor moves into dflash_config (DSpark: stays at the top level), block_size is "
        "not copied",
    ),
    FormatRule("dspark-native", True, _REGISTRY),
    FormatRule("open-spec", False, _REGISTRY, "speculative_config is not read and DflashDraftModel has no loader"),
)

# The path each algorithm is served on; a route lists the architectures registered for it.
PATHS = {"dflash": "dflash", "dflash2": "dflash", "dspark": "dspark"}


def routes(architectures: tuple[Architecture, ...]) -> tuple[Route, ...]:
    return routes_of(architectures, PATHS)


def _dflash2_key(key: str, cite: str) -> tuple[KeyRead, KeyRead]:
    return (
        KeyRead(key, "dflash", (f"dflash_config.{key}",), cite, when_missing=WhenMissing.REFUSED, note="DFlash2 only"),
        KeyRead(
            key,
            "dflash",
            (key,),
            f"{_ALGOS}: update_dflash2",
            when_missing=WhenMissing.REFUSED,
            note="DFlash2 only; copied into dflash_config when present",
            family="speculators",
        ),
    )


def keys(*, dspark_layout_cite: str, dspark_k_cite: str) -> tuple[KeyRead, ...]:
    """The keys both releases read; the DSpark layout and K defaults moved between files.

    speculators configs are translated when loaded (`update_dflash`, `update_dspark`): their
    rules are the ones marked `family="speculators"`.
    """
    id_locations = ("eagle_aux_hidden_state_layer_ids", "dflash_config.target_layer_ids", "dspark_target_layer_ids")
    return (
        KeyRead(
            "block_size",
            "dflash",
            (),
            "vllm/config/speculative.py: SpeculativeConfig.__post_init__",
            when_missing=WhenMissing.NOT_READ,
            note="K comes from num_speculative_tokens on the launch line (required); nothing checks it against "
            "the block size",
        ),
        KeyRead(
            "sample_from_anchor",
            "dflash",
            ("dflash_config.sample_from_anchor",),
            f"{_SPECULATOR}: DFlashSpeculator.__init__",
            default=False,
            note="true is refused unless the dflash-tools plugin is active; a top-level copy is not read",
        ),
        KeyRead(
            "sample_from_anchor",
            "dflash",
            ("sample_from_anchor",),
            f"{_ALGOS}: update_dflash",
            default=False,
            note="moved into dflash_config when the config is loaded",
            family="speculators",
        ),
        KeyRead(
            "target_layer_ids",
            "dflash",
            (*id_locations, "target_layer_ids"),
            f"{_AUX}; {_INTERFACES}: _set_aux_hidden_state_layers",
            when_missing=WhenMissing.DERIVED,
            note="eagle_aux_hidden_state_layer_ids are hidden-state indices (z-lab id + 1); captured sorted and "
            "without duplicates; without any, the target's default capture layers (hidden-state indices 2, "
            "L // 2, L - 3)",
            shift=(("eagle_aux_hidden_state_layer_ids", -1),),
            # `if not layer_ids:` before each next location, `.get("target_layer_ids") or []`.
            empty_is_absent=True,
        ),
        KeyRead(
            "target_layer_ids",
            "dflash",
            ("aux_hidden_state_layer_ids",),
            f"{_ALGOS}: update_dflash",
            when_missing=WhenMissing.REFUSED,
            note="hidden-state indices (z-lab id + 1), required",
            shift=(("aux_hidden_state_layer_ids", -1),),
            family="speculators",
        ),
        KeyRead(
            "num_target_layers",
            "dflash",
            (),
            _AUX,
            when_missing=WhenMissing.NOT_READ,
            note="the target model's own layer count is used",
        ),
        KeyRead(
            "mask_token_id",
            "dflash",
            ("dflash_config.mask_token_id", "mask_token_id", "dspark_noise_token_id", "pard_token", "ptd_token_id"),
            _MASK,
            when_missing=WhenMissing.REFUSED,
        ),
        KeyRead(
            "mask_token_id",
            "dflash",
            ("mask_token_id",),
            f"{_ALGOS}: update_dflash",
            when_missing=WhenMissing.REFUSED,
            family="speculators",
        ),
        *_dflash2_key("conv_kernel_size", f"{_DFLASH2_MODEL}: DFlash2Qwen3DecoderLayer.__init__"),
        *_dflash2_key("conv_group_size", f"{_DFLASH2_MODEL}: DFlash2Qwen3DecoderLayer.__init__"),
        *_dflash2_key("selector_rank", f"{_DFLASH2_MODEL}: DFlash2Qwen3Model.__init__"),
        *_dflash2_key("selector_top_k", f"{_DFLASH2_MODEL}: DFlash2Qwen3Model.__init__"),
        KeyRead(
            "sliding_window",
            "dflash",
            ("dflash_config.swa_window_size", "sliding_window"),
            f"{_DFLASH_MODEL}: _resolve_layer_attention",
            when_missing=WhenMissing.REFUSED,
            note="needed only for sliding_attention layers",
        ),
        # --- DSpark ---
        KeyRead(
            "block_size",
            "dspark",
            ("block_size", "dspark_block_size"),
            dspark_k_cite,
            when_missing=WhenMissing.NOT_READ,
            note=(
                "the default K when num_speculative_tokens is not given, whatever the layout: one past"
                " K_max for a bonus-anchor draft (DFT072)"
            ),
        ),
        KeyRead("sample_from_anchor", "dspark", ("sample_from_anchor",), dspark_layout_cite, default=True),
        KeyRead(
            "sample_from_anchor",
            "dspark",
            ("sample_from_anchor",),
            f"{_ALGOS}: update_dspark",
            default=False,
            note="absent: false, although speculators' own DSpark class defaults to true",
            family="speculators",
        ),
        KeyRead(
            "target_layer_ids",
            "dspark",
            (*id_locations, "target_layer_ids"),
            _AUX,
            when_missing=WhenMissing.DERIVED,
            note="as dflash",
            shift=(("eagle_aux_hidden_state_layer_ids", -1),),
            # `if not layer_ids:` before each next location, `.get("target_layer_ids") or []`.
            empty_is_absent=True,
        ),
        KeyRead(
            "target_layer_ids",
            "dspark",
            ("aux_hidden_state_layer_ids",),
            f"{_ALGOS}: update_dspark",
            when_missing=WhenMissing.REFUSED,
            note="hidden-state indices (z-lab id + 1), required",
            shift=(("aux_hidden_state_layer_ids", -1),),
            family="speculators",
        ),
        KeyRead(
            "mask_token_id",
            "dspark",
            ("dflash_config.mask_token_id", "mask_token_id", "dspark_noise_token_id", "pard_token", "ptd_token_id"),
            _MASK,
            when_missing=WhenMissing.REFUSED,
        ),
        KeyRead(
            "markov_rank",
            "dspark",
            ("markov_rank",),
            "vllm/model_executor/models/qwen3_dspark.py: Qwen3DSparkModel.__init__",
            when_missing=WhenMissing.REFUSED,
            note="0 builds an empty Markov head (no bias)",
        ),
    )


def checks(*, speculators_cite: str = f"{_ALGOS}: update_dflash") -> tuple[Check, ...]:
    return (
        Check(
            "mask-token-id-required",
            "dflash",
            ("mask_token_id",),
            "one of dflash_config.mask_token_id, mask_token_id, dspark_noise_token_id, pard_token, ptd_token_id is "
            "set (speculators: mask_token_id)",
            f"{_MASK}; {speculators_cite}",
        ),
        Check(
            "mask-token-id-required",
            "dspark",
            ("mask_token_id",),
            "as dflash",
            _MASK,
        ),
        Check(
            "dflash2-keys",
            "dflash",
            ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"),
            "a DFlash2 draft sets the four convolution and selector keys in dflash_config (speculators: at the "
            "top level)",
            f"{_DFLASH2_MODEL}: DFlash2Qwen3DecoderLayer.__init__; {_DFLASH2_MODEL}: DFlash2Qwen3Model.__init__",
        ),
        Check(
            "conv-group-divides-hidden",
            "dflash",
            ("conv_group_size", "hidden_size"),
            "conv_group_size divides hidden_size",
            f"{_DFLASH2_MODEL}: DFlash2Qwen3DecoderLayer.__init__",
        ),
        Check(
            "sliding-window",
            "dflash",
            ("layer_types", "sliding_window"),
            "a draft with sliding_attention layers sets dflash_config.swa_window_size or sliding_window",
            f"{_DFLASH_MODEL}: _resolve_layer_attention",
        ),
        Check(
            "dflash2-beam",
            "dflash",
            ("layer_types", "is_causal", "dflash_config.final_logit_softcapping"),
            "a DFlash2BeamDraftModel draft has only sliding_attention layers, is_causal false and a number in "
            "dflash_config.final_logit_softcapping",
            f"{_BEAM}: DFlash2BeamAttention.__init__; {_BEAM}: DFlash2BeamForCausalLM.__init__",
        ),
        Check(
            "layer-ids-in-range",
            "dflash",
            ("target_layer_ids",),
            "every captured layer exists in the target: ids beyond it leave the drafter with fewer features than "
            "its input expects",
            f"{_DFLASH_MODEL}: DFlashQwen3ForCausalLM.combine_hidden_states",
        ),
    )


_ADD_CLI_ARGS = "vllm/engine/arg_utils.py: EngineArgs.add_cli_args"

# The environment variable that picks vLLM's model runner: 1 the V2 runner, 0 the V1 runner
# (where the release still ships it); unset, vLLM picks (V1 where Triton is missing).
V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
_V1_UNSUPPORTED = "vllm/config/vllm.py: VllmConfig._get_v1_model_runner_unsupported_features"

V2_RUNNER_FLAG = LaunchFlag(
    "env",
    f"{V2_ENV}=1",
    "the V2 model runner: the only one for DFlash2, DSpark, mixed sliding/full drafts and (with the "
    "plugin) anchor-first drafts; vLLM also picks V1 on its own where Triton is missing",
    "vllm/envs.py; vllm/config/vllm.py: VllmConfig._validate_v1_model_runner",
)

# What only the V2 runner serves, on a release that also ships V1 (in the order they are reported).
V2_ONLY = (
    RunnerRule(
        "dflash",
        DraftTrait.DFLASH2,
        "DFlash2 (V1 drafts it as plain DFlash without its candidate selector)",
        _V1_UNSUPPORTED,
        "DFlash candidate-head drafts",
    ),
    RunnerRule(
        "dspark",
        DraftTrait.EVERY,
        "DSpark (implemented by the V2 runner only)",
        _V1_UNSUPPORTED,
        "dspark speculative decoding",
    ),
    RunnerRule(
        "dflash",
        DraftTrait.ANCHOR_FIRST,
        "anchor-first layout (V1 hard-codes K + 1 queries and drafts it wrongly)",
        "vllm/v1/spec_decode/dflash.py: DFlashProposer.set_inputs_first_pass",
    ),
    RunnerRule(
        "dflash",
        DraftTrait.MIXED_ATTENTION,
        "mixed sliding/full attention layers",
        f"{_V1_UNSUPPORTED}; vllm/config/vllm.py: VllmConfig._dflash_needs_multi_kv_group",
        "mixed sliding/full dflash drafts",
    ),
)

# The serving plan's settings, each a `vllm serve` flag with a value (both releases).
_SETTING_FLAGS = (
    LaunchFlag("target-revision", "--revision", "the target's Hub revision", _ADD_CLI_ARGS),
    LaunchFlag("max-model-len", "--max-model-len", "the longest request (prompt + output) in tokens", _ADD_CLI_ARGS),
    LaunchFlag("max-num-seqs", "--max-num-seqs", "the most requests scheduled at once", _ADD_CLI_ARGS),
    LaunchFlag(
        "max-num-batched-tokens",
        "--max-num-batched-tokens",
        "the tokens of one scheduler step; also the rows of the draft pass (max_num_seqs x query positions)",
        _ADD_CLI_ARGS,
    ),
    LaunchFlag("tensor-parallel-size", "--tensor-parallel-size", "GPUs the target is split across", _ADD_CLI_ARGS),
    LaunchFlag(
        "decode-context-parallel-size",
        "--decode-context-parallel-size",
        "decode context parallelism (DCP) of the target, within its tensor-parallel ranks",
        _ADD_CLI_ARGS,
    ),
    LaunchFlag("dtype", "--dtype", "the model dtype", _ADD_CLI_ARGS),
    LaunchFlag("kv-cache-dtype", "--kv-cache-dtype", "the KV cache dtype", _ADD_CLI_ARGS),
    LaunchFlag(
        "gpu-memory-utilization",
        "--gpu-memory-utilization",
        "the fraction of each GPU's memory vLLM may use",
        _ADD_CLI_ARGS,
    ),
)


def launch(*, runner_env: tuple[LaunchFlag, ...] = (), extra: tuple[LaunchFlag, ...] = ()) -> tuple[LaunchFlag, ...]:
    return (
        LaunchFlag("program", "vllm serve", "the OpenAI-compatible server", "vllm/entrypoints/cli/serve.py"),
        LaunchFlag(
            "target", "vllm serve TARGET", "the target model, the first argument", "vllm/entrypoints/cli/serve.py"
        ),
        LaunchFlag(
            "speculative-config",
            "--speculative-config",
            "JSON: method (dflash for DFlash and DFlash2, dspark for DSpark; always given, a folder without 'dflash' "
            "in its name is not detected), model (the draft), num_speculative_tokens (K), revision",
            "vllm/engine/arg_utils.py: EngineArgs.add_cli_args",
        ),
        *_SETTING_FLAGS,
        *extra,
        *runner_env,
    )


_BATCH_DEFAULTS = "vllm/engine/arg_utils.py: EngineArgs.get_batch_defaults"
_LARGE_GPU = "GPUs of 70 GiB or more other than A100 and GB10 (which keep the smaller defaults)"


def serving_defaults(*, utilization_cite: str, utilization_note: str = "") -> tuple[ServingDefault, ...]:
    """What `vllm serve` picks when the launch line leaves a setting out (the OpenAI server's
    usage context; vLLM's CPU build has defaults of its own). Both releases use the same values."""
    return (
        ServingDefault("max_num_seqs", 256, _BATCH_DEFAULTS, note="GPUs below 70 GiB"),
        ServingDefault("max_num_seqs", 1024, _BATCH_DEFAULTS, 70.0, note=_LARGE_GPU),
        ServingDefault("max_num_seqs", 1024, _BATCH_DEFAULTS, 160.0, note="GPUs of 160 GiB or more"),
        ServingDefault("max_num_batched_tokens", 2048, _BATCH_DEFAULTS, note="GPUs below 70 GiB"),
        ServingDefault("max_num_batched_tokens", 8192, _BATCH_DEFAULTS, 70.0, note=_LARGE_GPU),
        ServingDefault("max_num_batched_tokens", 16384, _BATCH_DEFAULTS, 160.0, note="GPUs of 160 GiB or more"),
        ServingDefault("gpu_memory_utilization", 0.92, utilization_cite, note=utilization_note),
    )


def serving_rules(*, budget_cite: str) -> tuple[ServingRule, ...]:
    """The rules on launch settings both releases enforce with a DFlash-family draft."""
    return (
        ServingRule(
            "draft-pass-budget",
            "max_num_batched_tokens >= max_num_seqs x the query positions per request of the draft pass "
            "(K + 1; K for an anchor-first draft through the dflash-tools plugin)",
            "the release lowers max_num_active_seqs to max_num_batched_tokens // query positions, with a "
            "warning: fewer requests run at once than max_num_seqs",
            budget_cite,
        ),
        ServingRule(
            "dcp-divides-tp",
            "tensor_parallel_size is a multiple of decode_context_parallel_size (DCP reuses the tensor-parallel ranks)",
            "refused at start-up",
            "vllm/config/parallel.py: ParallelConfig._validate_parallel_config",
        ),
        ServingRule(
            "dcp-gqa-target",
            "with decode_context_parallel_size above 1, a target without MLA needs tensor_parallel_size above its "
            "KV heads, decode_context_parallel_size at most tensor_parallel_size // KV heads, and its query heads "
            "per KV head divisible by decode_context_parallel_size",
            "refused at start-up",
            "vllm/config/model.py: ModelConfig.verify_with_parallel_config",
        ),
    )


# Domino drafts (projector_type domino) carry a GRU and an embedding projection that vLLM's DFlash
# model does not have: their tensors are names the weight loader does not know, which it refuses.
DOMINO_LAYOUTS = tuple(
    LayoutRule(
        "dflash-domino",
        layout,
        Outcome.REFUSED,
        f"{_DFLASH_MODEL}: DFlashQwen3ForCausalLM.load_weights",
        "no Domino projector: its tensors are refused at load",
        "serve it with SGLang, whose DFLASH path has the Domino projector",
    )
    for layout in (Layout.BONUS, Layout.ANCHOR_FIRST)
)
