"""SGLang 0.5.23 (PyPI, 2026-10-30): what it reads from DFlash-family drafts and what it does.

SGLang serves DFlash and DFlash2 on its `DFLASH` path and DSpark on its `DSPARK` path. What
matters most: `DFLASH` has one layout only, the bonus layout (query position 0 holds the last
verified token, positions 1.. draft), and reads no `sample_from_anchor`; an anchor-first DFlash
or DFlash2 draft is served in the wrong layout without an error. `DSPARK` reads the top-level
`sample_from_anchor` (true when absent) but only serves drafts with a Markov head
(`markov_rank > 0`). SGLang reads no speculators-format config.

Every key is looked up in the nested `dflash_config` first, then at the top level. The verify
window (`--speculative-num-draft-tokens`, alias `--speculative-dflash-block-size`) is the block
size; `DFLASH` drafts one token fewer. File references are to the released wheel's `sglang/`.
"""

from __future__ import annotations

from dflash_tools.engine_rules import _sglang_architectures
from dflash_tools.engine_rules._model import (
    Check,
    EngineRules,
    FormatRule,
    KeyRead,
    LaunchFlag,
    Layout,
    LayoutRule,
    Outcome,
    ServingDefault,
    WhenMissing,
    routes_of,
)
from dflash_tools.engine_rules.config_loading import ConfigLoading

_UTILS = "sglang/srt/speculative/dflash_utils.py"
_PARSE = f"{_UTILS}: parse_dflash_draft_config"
_WORKER = "sglang/srt/speculative/dflash_worker_v2.py"
_HOOK = "sglang/srt/arg_groups/speculative_hook.py"
_MODEL = "sglang/srt/models/dflash.py"
_DSPARK_CONFIG = "sglang/srt/speculative/dspark_components/dspark_config.py"
_AUX = "sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
_FIELDS = "sglang/srt/arg_groups/fields"

# The block size SGLang falls back to when neither the launch line nor the config gives one.
DEFAULT_BLOCK_SIZE = 16
# The token SGLang looks up in the target's tokenizer when the config has no mask_token_id.
DEFAULT_MASK_TOKEN = "<|MASK|>"
# DSPARK's number of drafts when neither the launch line nor the config gives one.
DEFAULT_DSPARK_DRAFTS = 7
# The running requests DFLASH and DSPARK allow when --max-running-requests is not given.
DEFAULT_MAX_RUNNING_REQUESTS = 48


def derived_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The target layers SGLang captures for a draft whose config names none.

    One draft layer: the middle target layer. Otherwise one id per draft layer, spread evenly
    from layer 1 to layer `num_target_layers - 3`, each rounded as Python's `round` does (half
    to even). Raises ValueError where SGLang refuses (no layers, or fewer than 4 target layers
    for a multi-layer draft). Our own statement of the rule; `tests/real_sglang` runs SGLang's
    function from the released wheel against it.
    """
    if num_target_layers <= 0 or num_draft_layers <= 0:
        raise ValueError(f"layer counts must be positive, got {num_target_layers} and {num_draft_layers}")
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    first, last = 1, num_target_layers - 3
    if last < first:
        raise ValueError(f"a draft of {num_draft_layers} layers needs a target of 4 or more, got {num_target_layers}")
    step = (last - first) / (num_draft_layers - 1)
    return [int(round(first + index * step)) for index in range(num_draft_layers)]


# What to do with an anchor-first DFlash or DFlash2 draft, which no path of this release serves.
_NO_ANCHOR_FIRST_PATH = (
    "serve it with vLLM and the dflash-tools plugin: no SGLang path serves an anchor-first DFlash draft, "
    "as DFLASH is bonus-only and DSPARK serves that layout only for drafts with a Markov head (markov_rank > 0)"
)


RULES = EngineRules(
    engine="sglang",
    version="0.5.23",
    released="2026-10-30",
    summary="DFLASH serves DFlash and DFlash2 in the bonus layout only (anchor-first drafts are served "
    "misaligned, without an error); DSPARK serves DSpark drafts with a Markov head in either layout; no "
    "speculators-format configs.",
    formats=(
        FormatRule("zlab", True, _PARSE),
        FormatRule("dspark-native", True, f"{_DSPARK_CONFIG}: parse_dspark_draft_config"),
        FormatRule(
            "speculators",
            False,
            f"{_PARSE}; sglang/srt/utils/hf_transformers/config.py: HfModelConfigParser.parse",
            "the config is loaded with transformers' AutoConfig, which needs a top-level model_type, and "
            "num_hidden_layers is read from the top level or text_config only; nothing in the release reads "
            "speculators_config or aux_hidden_state_layer_ids",
        ),
        FormatRule(
            "open-spec",
            False,
            f"{_PARSE}; {_MODEL}: EntryClass",
            "speculative_config is not read and DflashDraftModel has no loader",
        ),
    ),
    routes=routes_of(
        _sglang_architectures.ARCHITECTURES,
        {"dflash": "DFLASH", "dflash2": "DFLASH", "dspark": "DSPARK"},
    ),
    architectures=_sglang_architectures.ARCHITECTURES,
    features=_sglang_architectures.FEATURES,
    layouts=(
        LayoutRule(
            "dflash",
            Layout.BONUS,
            Outcome.SERVED,
            f"{_WORKER}: _DflashDraftSampler.__call__",
            "position 0 is the anchor",
        ),
        LayoutRule(
            "dflash",
            Layout.ANCHOR_FIRST,
            Outcome.MISALIGNED,
            f"{_WORKER}: _DflashDraftSampler.__call__; {_PARSE}",
            "drafts are always read from positions 1.. of the block and sample_from_anchor is not read: no flag "
            "serves the anchor-first layout",
            _NO_ANCHOR_FIRST_PATH,
        ),
        LayoutRule("dflash2", Layout.BONUS, Outcome.SERVED, f"{_WORKER}: _SelectorDraftSampler.__call__"),
        LayoutRule(
            "dflash2",
            Layout.ANCHOR_FIRST,
            Outcome.MISALIGNED,
            f"{_WORKER}: _SelectorDraftSampler.__call__; {_MODEL}: DFlashDraftModel.set_block_size",
            "the candidate selector also starts at position 1, and the convolution block is the verify window",
            _NO_ANCHOR_FIRST_PATH,
        ),
        LayoutRule(
            "dflash-domino",
            Layout.BONUS,
            Outcome.SERVED,
            "sglang/srt/speculative/domino_utils.py: domino_greedy_rollout",
            "shift_label false: proposals from positions 1..B-1",
        ),
        LayoutRule(
            "dflash-domino",
            Layout.ANCHOR_FIRST,
            Outcome.SERVED,
            "sglang/srt/speculative/domino_utils.py: domino_greedy_rollout",
            "shift_label true: proposals from positions 0..B-2, so B - 1 of the B trained positions are drafted",
        ),
        LayoutRule(
            "dspark",
            Layout.ANCHOR_FIRST,
            Outcome.SERVED,
            "sglang/srt/speculative/dspark_components/dspark_draft.py: DraftBlockProposer.__init__",
            "needs markov_rank > 0",
        ),
        LayoutRule(
            "dspark",
            Layout.BONUS,
            Outcome.SERVED,
            "sglang/srt/speculative/dspark_components/dspark_draft.py: DraftBlockProposer.__init__",
            "needs markov_rank > 0",
        ),
    ),
    keys=(
        # --- DFLASH ---
        KeyRead(
            "block_size",
            "DFLASH",
            ("dflash_config.block_size", "block_size"),
            f"{_PARSE}; {_HOOK}: _handle_dflash; {_WORKER}: DFlashWorkerV2.__init__",
            default=DEFAULT_BLOCK_SIZE,
            note="the verify window; --speculative-num-draft-tokens overrides it (a mismatch with the config "
            "only logs a warning); the number of drafts is one less",
        ),
        KeyRead(
            "sample_from_anchor",
            "DFLASH",
            (),
            f"{_PARSE}; {_WORKER}: _DflashDraftSampler.__call__",
            default=False,
            when_missing=WhenMissing.NOT_READ,
            note="the layout is always bonus (position 0 is the anchor)",
        ),
        KeyRead(
            "shift_label",
            "DFLASH",
            ("dflash_config.shift_label", "shift_label"),
            f"{_PARSE}; sglang/srt/speculative/domino_utils.py: domino_greedy_rollout",
            when_missing=WhenMissing.REFUSED,
            note="read only when projector_type is domino, and then required: true starts the proposals at "
            "position 0 (anchor-first)",
        ),
        KeyRead("projector_type", "DFLASH", ("dflash_config.projector_type", "projector_type"), _PARSE),
        KeyRead(
            "target_layer_ids",
            "DFLASH",
            ("dflash_config.target_layer_ids", "target_layer_ids"),
            f"{_PARSE}; {_UTILS}: DFlashDraftConfig.resolve_target_layer_ids; {_UTILS}: build_target_layer_ids",
            when_missing=WhenMissing.DERIVED,
            note="derived from the target's layer count and the draft's: one draft layer takes the middle "
            "target layer, more are spread evenly over layers 1 to L - 3; captured after layer t, as z-lab",
        ),
        KeyRead(
            "num_target_layers",
            "DFLASH",
            ("dflash_config.num_target_layers", "num_target_layers"),
            f"{_PARSE}; {_AUX}: _resolve_dflash_aux_hidden_state; {_MODEL}: DFlashDraftModel.__init__",
            when_missing=WhenMissing.DERIVED,
            note="the target's own layer count decides which layers are captured (a different value only logs a "
            "warning); the draft sizes its input from it, else from max(target_layer_ids) + 1",
        ),
        KeyRead(
            "num_hidden_layers",
            "DFLASH",
            ("text_config.num_hidden_layers", "num_hidden_layers"),
            f"{_PARSE}; {_UTILS}: DFlashDraftConfig.require_num_layers",
            when_missing=WhenMissing.REFUSED,
        ),
        KeyRead(
            "mask_token_id",
            "DFLASH",
            ("dflash_config.mask_token_id", "mask_token_id"),
            f"{_PARSE}; {_WORKER}: DFlashWorkerV2._resolve_mask_token_id",
            when_missing=WhenMissing.LOOKED_UP,
            note="looked up in the target's tokenizer by mask_token (added to the tokenizer when absent); "
            "start-up fails when the id falls outside the target vocabulary",
        ),
        KeyRead(
            "mask_token",
            "DFLASH",
            ("dflash_config.mask_token", "mask_token"),
            f"{_UTILS}: DEFAULT_DFLASH_MASK_TOKEN; {_PARSE}",
            default=DEFAULT_MASK_TOKEN,
        ),
        KeyRead("conv_kernel_size", "DFLASH", ("dflash_config.conv_kernel_size",), _PARSE, default=0),
        KeyRead("conv_group_size", "DFLASH", ("dflash_config.conv_group_size",), _PARSE, default=0),
        KeyRead("selector_rank", "DFLASH", ("dflash_config.selector_rank",), _PARSE, default=0),
        KeyRead("selector_top_k", "DFLASH", ("dflash_config.selector_top_k",), _PARSE, default=0),
        KeyRead("output_multiplier", "DFLASH", ("dflash_config.output_multiplier",), _PARSE, default=1.0),
        KeyRead(
            "final_logit_softcapping",
            "DFLASH",
            ("dflash_config.final_logit_softcapping",),
            _PARSE,
            note="0 or absent: off",
        ),
        KeyRead(
            "sliding_window",
            "DFLASH",
            ("text_config.sliding_window", "sliding_window"),
            f"{_UTILS}: get_dflash_attention_sliding_window_size",
            when_missing=WhenMissing.REFUSED,
            note="needed only when layer_types has a sliding_attention layer",
        ),
        # --- DSPARK ---
        KeyRead(
            "block_size",
            "DSPARK",
            ("dspark_block_size", "dflash_config.block_size", "block_size"),
            f"{_DSPARK_CONFIG}: parse_dspark_draft_config; {_PARSE}; {_HOOK}: _handle_dspark",
            default=DEFAULT_DSPARK_DRAFTS,
            note="the number of drafts (gamma); the verify window is one more; --speculative-dspark-block-size "
            "overrides it",
        ),
        KeyRead(
            "sample_from_anchor",
            "DSPARK",
            ("sample_from_anchor",),
            f"{_DSPARK_CONFIG}: get_dspark_sample_from_anchor",
            default=True,
        ),
        KeyRead(
            "markov_rank",
            "DSPARK",
            ("dspark_markov_rank", "dspark_config.markov_rank", "dflash_config.markov_rank", "markov_rank"),
            f"{_DSPARK_CONFIG}: parse_dspark_draft_config",
            default=0,
            note="0 is refused",
        ),
        KeyRead(
            "markov_head_type",
            "DSPARK",
            (
                "dspark_markov_head_type",
                "dspark_config.markov_head_type",
                "dflash_config.markov_head_type",
                "markov_head_type",
            ),
            f"{_DSPARK_CONFIG}: parse_dspark_draft_config",
            when_missing=WhenMissing.REFUSED,
            note="vanilla, gated or rnn; dspark_config's fields win over dflash_config's; needed when markov_rank > "
            "0, unless a dspark_-prefixed key (block size, Markov rank, noise token, target layers) is set",
        ),
        KeyRead(
            "target_layer_ids",
            "DSPARK",
            ("dspark_target_layer_ids", "dflash_config.target_layer_ids", "target_layer_ids"),
            f"{_DSPARK_CONFIG}: parse_dspark_draft_config; {_PARSE}; {_AUX}: _resolve_dflash_aux_hidden_state",
            when_missing=WhenMissing.DERIVED,
            note="as DFLASH",
        ),
        KeyRead(
            "num_target_layers",
            "DSPARK",
            ("dflash_config.num_target_layers", "num_target_layers"),
            f"{_PARSE}; {_AUX}: _resolve_dflash_aux_hidden_state",
            when_missing=WhenMissing.DERIVED,
            note="as DFLASH",
        ),
        KeyRead(
            "mask_token_id",
            "DSPARK",
            ("dspark_noise_token_id", "dspark_config.mask_token_id", "dflash_config.mask_token_id", "mask_token_id"),
            f"{_DSPARK_CONFIG}: parse_dspark_draft_config; {_DSPARK_CONFIG}: resolve_runtime_config",
            when_missing=WhenMissing.REFUSED,
        ),
    ),
    checks=(
        Check(
            "layer-ids-in-range",
            "DFLASH",
            ("target_layer_ids",),
            "every target layer id is in [0, L) for the target's layer count L, and the list is not empty",
            f"{_UTILS}: DFlashDraftConfig.resolve_target_layer_ids",
        ),
        Check(
            "layer-ids-in-range",
            "DSPARK",
            ("target_layer_ids",),
            "as DFLASH: the ids are checked before DSPARK reads its own",
            f"{_AUX}: _resolve_dflash_aux_hidden_state",
        ),
        Check(
            "derivable-layer-ids",
            "DFLASH",
            ("target_layer_ids", "num_hidden_layers"),
            "without target_layer_ids, a draft of more than one layer needs a target of at least 4 layers",
            f"{_UTILS}: build_target_layer_ids",
        ),
        Check(
            "mask-token-id-valid",
            "DFLASH",
            ("mask_token_id",),
            "a mask_token_id that is set is a non-negative integer below the target's vocabulary size",
            f"{_PARSE}; {_WORKER}: DFlashWorkerV2._resolve_mask_token_id",
        ),
        Check(
            "conv-pair",
            "DFLASH",
            ("dflash_config.conv_kernel_size", "dflash_config.conv_group_size"),
            "conv_kernel_size and conv_group_size are both set or both absent (0)",
            _PARSE,
        ),
        Check(
            "selector-pair",
            "DFLASH",
            ("dflash_config.selector_rank", "dflash_config.selector_top_k"),
            "selector_rank and selector_top_k are both set or both absent (0)",
            _PARSE,
        ),
        Check(
            "dflash2-selector",
            "DFLASH",
            ("dflash_config.selector_rank",),
            "a DFlash2 architecture needs dflash_config.selector_rank (the top level is not read)",
            f"{_MODEL}: DFlash2DraftModel.__init__",
        ),
        Check(
            "dflash2-conv",
            "DFLASH",
            ("dflash_config.conv_kernel_size",),
            "a DFlash2 draft's convolution keys are read from dflash_config only: at the top level they are "
            "ignored and the layers are built without convolutions",
            f"{_PARSE}; {_MODEL}: DFlashDraftModel.__init__",
            Outcome.MISALIGNED,
        ),
        Check(
            "output-multiplier-positive",
            "DFLASH",
            ("dflash_config.output_multiplier",),
            "dflash_config.output_multiplier is above 0",
            _PARSE,
        ),
        Check(
            "sliding-window",
            "DFLASH",
            ("layer_types", "sliding_window"),
            "a draft with sliding_attention layers sets sliding_window",
            f"{_UTILS}: get_dflash_attention_sliding_window_size",
        ),
        Check(
            "domino-keys",
            "DFLASH",
            ("shift_label", "pure_draft_prefix_len", "gru_hidden_dim", "emb_dim"),
            "a Domino draft (projector_type domino) sets shift_label (true or false), pure_draft_prefix_len 1, "
            "gru_hidden_dim and emb_dim, with a block size above 1",
            _PARSE,
        ),
        Check(
            "markov-rank",
            "DSPARK",
            ("markov_rank",),
            "markov_rank is above 0: DSPARK serves only drafts with a Markov head",
            f"{_AUX}: _resolve_dflash_aux_hidden_state; {_DSPARK_CONFIG}: resolve_runtime_config",
        ),
        Check(
            "markov-head-type",
            "DSPARK",
            ("markov_head_type",),
            "with markov_rank above 0, markov_head_type is one of vanilla, gated, rnn",
            f"{_DSPARK_CONFIG}: parse_dspark_draft_config",
        ),
        Check(
            "mask-token-id-required",
            "DSPARK",
            ("mask_token_id",),
            "mask_token_id is set, non-negative and below the target's vocabulary size",
            f"{_DSPARK_CONFIG}: resolve_runtime_config",
        ),
    ),
    derive_target_layer_ids=derived_target_layer_ids,
    # The wheel pins transformers==5.19.0 (its Requires-Dist), the table's version.
    config_loading=ConfigLoading(
        engine="sglang",
        parser="sglang/srt/utils/hf_transformers/config.py: HfModelConfigParser.parse",
        transformers="==5.19.0",
        table="5.19.0",
        generated="sglang-0.5.23.json",
        architecture_first=True,
    ),
    launch=(
        LaunchFlag("program", "python -m sglang.launch_server", "the server", "sglang/launch_server.py"),
        LaunchFlag("target", "--model-path", "the target model", "sglang/srt/arg_groups/fields/model.py"),
        LaunchFlag(
            "algorithm",
            "--speculative-algorithm",
            "DFLASH for DFlash and DFlash2, DSPARK for DSpark",
            "sglang/srt/speculative/spec_info.py: SpeculativeAlgorithm",
        ),
        LaunchFlag("draft", "--speculative-draft-model-path", "the draft (required)", f"{_HOOK}: _handle_dflash"),
        LaunchFlag(
            "draft-revision",
            "--speculative-draft-model-revision",
            "the draft's Hub revision",
            "sglang/srt/arg_groups/fields/spec.py",
        ),
        LaunchFlag(
            "draft-tokens",
            "--speculative-num-draft-tokens",
            "DFLASH: the verify window, equal to the block size (drafts = window - 1); absent: the config's "
            f"block_size, else {DEFAULT_BLOCK_SIZE}",
            f"{_HOOK}: _handle_dflash",
        ),
        LaunchFlag(
            "dspark-block-size",
            "--speculative-dspark-block-size",
            "DSPARK: the number of drafts (gamma); the verify window is one more",
            f"{_HOOK}: _handle_dspark",
        ),
        LaunchFlag("target-revision", "--revision", "the target's Hub revision", f"{_FIELDS}/model.py"),
        LaunchFlag("max-model-len", "--context-length", "the longest request in tokens", f"{_FIELDS}/model.py"),
        LaunchFlag(
            "max-num-seqs",
            "--max-running-requests",
            f"the most requests running at once ({DEFAULT_MAX_RUNNING_REQUESTS} with a speculative algorithm when "
            "absent)",
            f"{_FIELDS}/schedule.py",
        ),
        LaunchFlag("tensor-parallel-size", "--tp-size", "GPUs the target is split across", f"{_FIELDS}/parallel.py"),
        LaunchFlag(
            "decode-context-parallel-size",
            "--dcp-size",
            "decode context parallelism of the target",
            f"{_FIELDS}/parallel.py",
        ),
        LaunchFlag("dtype", "--dtype", "the model dtype", f"{_FIELDS}/model.py"),
        LaunchFlag("kv-cache-dtype", "--kv-cache-dtype", "the KV cache dtype", f"{_FIELDS}/model.py"),
    ),
    serving_defaults=(
        ServingDefault(
            "max_running_requests",
            DEFAULT_MAX_RUNNING_REQUESTS,
            f"{_HOOK}: _handle_dflash; {_HOOK}: _handle_dspark",
            paths=("DFLASH", "DSPARK"),
            note="set when the launch line has no --max-running-requests, with a warning in the server log",
        ),
    ),
)
