"""The serving-plan numbers (`plan.checks`, `plan.memory`) against hand computations.

The bundled vllm-cpu-demo pair is read through the real reading layer (config.json and
safetensors headers); its sizes are worked out here from the architecture, element by element,
independently of the header parser. The large cases use headers built in the test with the
shapes of a Qwen3-8B-class pair, since their weights are not in the repository.
"""

from __future__ import annotations

from typing import Any

import pytest

from dflash_tools.draft.description import DraftDescription
from dflash_tools.draft.target import TargetDescription, target_from_config
from dflash_tools.engine_rules import latest
from dflash_tools.errors import SourceError
from dflash_tools.inspect import inspect_loaded
from dflash_tools.plan.checks import (
    AttentionDims,
    check_tensor_parallel,
    check_token_budget,
    draft_dims,
    padded_vocab,
    target_dims,
)
from dflash_tools.plan.memory import MemoryFit, check_memory, kv_layout, weight_bytes
from dflash_tools.plan.model import PlanDraft, PlanRequest, ServingPlan
from dflash_tools.plan.run import plan_launch
from dflash_tools.reading.safetensors_header import TensorHeader
from dflash_tools.reading.source import load_checkpoint

DEMO_TARGET = "example:vllm-cpu-demo/target"
DEMO_DRAFT = "example:vllm-cpu-demo/zlab-dflash"


def demo_target() -> TargetDescription:
    loaded = load_checkpoint(DEMO_TARGET)
    assert loaded.config is not None
    return target_from_config(loaded.config, DEMO_TARGET, loaded.location)


def demo_draft_description() -> DraftDescription:
    report = inspect_loaded(load_checkpoint(DEMO_DRAFT))
    assert report.description is not None
    return report.description


# --- token budget ------------------------------------------------------------------------------


def test_budget_is_max_num_seqs_times_query_positions_per_layout() -> None:
    # 256 sequences x 8 query positions (K 7, bonus-anchor: K + 1) = 2048.
    bonus = check_token_budget(256, 7, False, 2048)
    assert (bonus.num_query_tokens, bonus.required, bonus.ok) == (8, 2048, True)
    # Anchor-first runs K = 7 query positions: 256 x 7 = 1792.
    anchor = check_token_budget(256, 7, True, 2048)
    assert (anchor.num_query_tokens, anchor.required, anchor.ok) == (7, 1792, True)


def test_budget_below_the_product_is_refused_with_the_value_to_use() -> None:
    # vllm-project/vllm#53970's case: the default 2048 with 256 sequences and K = 8 (9 queries).
    budget = check_token_budget(256, 8, False, 2048)
    assert not budget.ok
    assert budget.required == 2304
    assert "pass --max-num-batched-tokens 2304" in budget.message
    # Or the most sequences 2048 tokens can hold at 9 queries each: 2048 // 9 = 227.
    assert "lower --max-num-seqs to 227" in budget.message
    assert check_token_budget(256, 8, False, 2303).ok is False
    assert check_token_budget(256, 8, False, 2304).ok is True


def test_budget_without_a_value_says_what_to_pass() -> None:
    budget = check_token_budget(64, 15, False, None)
    assert budget.ok and budget.required == 64 * 16
    assert budget.message.startswith("pass --max-num-batched-tokens 1024 or more")


# --- dimensions read through the reading layer ---------------------------------------------------


def test_dimensions_of_the_demo_pair_come_from_their_configs() -> None:
    target = target_dims(demo_target(), DEMO_TARGET)
    assert (target.num_hidden_layers, target.num_attention_heads, target.num_key_value_heads) == (4, 4, 2)
    assert (target.head_dim, target.vocab_size, target.dtype) == (64, 128, "float32")
    assert target.layer_types == ("full_attention",) * 4 and target.sliding_window is None
    draft = draft_dims(demo_draft_description(), DEMO_DRAFT)
    # The draft config names a 2048 window but no sliding layer: both layers hold every token.
    assert (draft.num_hidden_layers, draft.num_key_value_heads, draft.head_dim) == (2, 1, 64)
    assert draft.layer_types == ("full_attention",) * 2


def _target_dims(config: dict[str, Any], name: str) -> AttentionDims:
    return target_dims(target_from_config(config, name, f"/{name}/config.json"), name)


def test_target_dims_defaults_and_errors_name_the_key() -> None:
    config = {"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 512, "vocab_size": 1000}
    dims = _target_dims(config, "t")
    assert (dims.num_key_value_heads, dims.head_dim) == (8, 64)  # kv = heads, head_dim = 512 / 8
    multimodal = _target_dims({"text_config": {**config, "num_key_value_heads": 2}}, "vl")
    assert multimodal.num_key_value_heads == 2
    with pytest.raises(SourceError, match=r"text_config\.vocab_size is None"):
        _target_dims({"text_config": {**config, "vocab_size": None}}, "vl")
    # The attention geometry is read with the target, and refused only when a plan needs it.
    headless = target_from_config({"text_config": {**config, "num_attention_heads": None}}, "vl", "/vl/config.json")
    assert headless.vocab_size == 1000
    with pytest.raises(SourceError, match=r"/vl/config.json: text_config\.num_attention_heads is None"):
        target_dims(headless, "vl")


# --- weights -----------------------------------------------------------------------------------


# The demo target by hand: Qwen3, hidden 64, 4 heads and 2 KV heads of head_dim 64, MLP 64,
# 4 layers, vocab 128, float32.
_LAYER = (
    256 * 64  # q_proj: 4 heads x 64
    + 2 * (128 * 64)  # k_proj, v_proj: 2 KV heads x 64
    + 64 * 256  # o_proj
    + 3 * (64 * 64)  # gate, up, down
)
_LAYER_VECTORS = 4 * 64  # q_norm, k_norm, input and post-attention layernorms
DEMO_TARGET_ELEMENTS = 4 * (_LAYER + _LAYER_VECTORS) + 2 * (128 * 64) + 64  # + embed, lm_head, norm


def test_weight_bytes_of_the_demo_target_match_the_architecture() -> None:
    loaded = load_checkpoint(DEMO_TARGET)
    weights = weight_bytes(loaded.tensors)
    assert DEMO_TARGET_ELEMENTS == 263_232
    assert weights.stored_by_dtype == {"F32": 263_232 * 4}
    assert weights.stored_total == weights.loaded_total == weights.per_rank == 1_052_928
    # Served in bfloat16: every float32 weight is cast, half the bytes.
    assert weight_bytes(loaded.tensors, serving_dtype="bfloat16").loaded_total == 263_232 * 2
    # Two ranks: the matrices split, the 17 vectors (4 per layer and the final norm) stay whole.
    vectors = (4 * 4 + 1) * 64
    split = weight_bytes(loaded.tensors, tensor_parallel_size=2)
    assert split.per_rank == ((263_232 - vectors) // 2 + vectors) * 4


def test_quantized_tensors_keep_their_stored_size() -> None:
    tensors = {
        "w": TensorHeader("w", "F8_E4M3", (1024, 1024), (0, 1024 * 1024), "m.safetensors"),
        "scale": TensorHeader("scale", "F32", (1024,), (1024 * 1024, 1024 * 1024 + 4096), "m.safetensors"),
    }
    weights = weight_bytes(tensors, serving_dtype="bfloat16")
    assert weights.stored_by_dtype == {"F32": 4096, "F8_E4M3": 1024 * 1024}
    assert weights.loaded_total == 1024 * 1024 + 1024 * 2  # fp8 as stored; the F32 scale cast to bf16


# --- KV cache ----------------------------------------------------------------------------------


def test_kv_bytes_per_token_of_the_demo_pair() -> None:
    target = kv_layout(target_dims(demo_target(), "target"), 4)
    draft = kv_layout(draft_dims(demo_draft_description(), "draft"), 4)
    # num_kv_heads x head_dim x 2 (K and V) x 4 bytes x layers
    assert target.full_bytes_per_token == 2 * 64 * 2 * 4 * 4 == 4096
    assert draft.full_bytes_per_token == 1 * 64 * 2 * 4 * 2 == 1024
    assert target.sequence_bytes(1024) + draft.sequence_bytes(1024) == 5120 * 1024


def _dims(name: str, layers: tuple[str, ...], *, kv: int = 8, window: int | None = None) -> AttentionDims:
    return AttentionDims(name, len(layers), 32, kv, 128, 151_936, layers, window, "bfloat16")


def test_sliding_layers_are_capped_by_the_window_and_other_kinds_are_not_counted() -> None:
    kinds = ("sliding_attention", "full_attention", "linear_attention", "sliding_attention")
    layout = kv_layout(_dims("mixed", kinds, window=4096), 2)
    per_layer = 8 * 128 * 2 * 2  # 4096 bytes per token and layer
    assert layout.bytes_per_token_per_layer == per_layer
    assert (layout.full_layers, layout.sliding_layers, layout.uncounted_layers) == (1, 2, {"linear_attention": 1})
    # 32768 tokens: the full layer holds all of them, each sliding layer the window less one.
    assert layout.sequence_bytes(32_768) == per_layer * 32_768 + 2 * per_layer * 4095
    # Shorter than the window: every layer holds the whole sequence.
    assert layout.sequence_bytes(1000) == 3 * per_layer * 1000
    # Tokens in flight stay held on top of the window (never beyond the sequence).
    assert layout.sequence_bytes(32_768, in_flight_tokens=2048) == per_layer * 32_768 + 2 * per_layer * (4095 + 2048)


def test_kv_heads_split_across_ranks_and_replicate_below_one_per_rank() -> None:
    layers = ("full_attention",) * 4
    assert kv_layout(_dims("t", layers, kv=8), 2, tensor_parallel_size=4).kv_heads_per_rank == 2
    assert kv_layout(_dims("t", layers, kv=2), 2, tensor_parallel_size=8).kv_heads_per_rank == 1


# --- memory ------------------------------------------------------------------------------------

GIB = 1024**3
# A Qwen3-8B-class pair in bfloat16: the target 16,384,000,000 bytes, the draft 2,048,000,000.
TARGET_WEIGHTS = {"w": TensorHeader("w", "BF16", (8_000_000, 1024), (0, 16_384_000_000), "t.safetensors")}
DRAFT_WEIGHTS = {"w": TensorHeader("w", "BF16", (1024, 1_000_000), (0, 2_048_000_000), "d.safetensors")}
TARGET_KV = kv_layout(_dims("target", ("full_attention",) * 36), 2)  # 36 x 8 x 128 x 2 x 2 = 147,456 B/token
DRAFT_KV = kv_layout(_dims("draft", ("full_attention",) * 5), 2)  # 5 x 8 x 128 x 2 x 2 = 20,480 B/token


def vllm_utilization() -> float:
    """The newest vLLM table's default gpu_memory_utilization (0.92), what a plan sizes KV with."""
    rules = latest("vllm")
    default = rules.serving_default("gpu_memory_utilization") if rules is not None else None
    assert default is not None
    return float(default.value)


def _fit(gpu_gib: int, max_model_len: int, tensor_parallel_size: int = 1) -> MemoryFit:
    return check_memory(
        gpu_memory_bytes=gpu_gib * GIB,
        weights=[
            weight_bytes(TARGET_WEIGHTS, tensor_parallel_size),
            weight_bytes(DRAFT_WEIGHTS, tensor_parallel_size),
        ],
        layouts=[TARGET_KV, DRAFT_KV],
        max_model_len=max_model_len,
        gpu_memory_utilization=vllm_utilization(),
    )


def test_a_plan_that_cannot_hold_one_request_is_refused_with_the_numbers() -> None:
    assert (TARGET_KV.full_bytes_per_token, DRAFT_KV.full_bytes_per_token) == (147_456, 20_480)
    fit = _fit(24, 40_960)
    # usable = int(24 GiB x 0.92) = 23,708,219,473; weights 18,432,000,000; left 5,276,219,473.
    assert fit.gpu_memory_utilization == 0.92
    assert fit.usable_bytes == 23_708_219_473
    assert fit.weights_bytes == 18_432_000_000
    assert fit.kv_budget_bytes == 5_276_219_473
    # One request of 40,960 tokens: 167,936 B/token x 40,960 = 6,878,658,560 bytes.
    assert fit.sequence_bytes == 6_878_658_560
    assert not fit.fits and fit.max_sequences == 0
    # The longest request that fits: 5,276,219,473 // 167,936 = 31,418 tokens.
    assert "6.41 GiB of KV, but only 4.91 GiB is left" in fit.message
    assert "Lower --max-model-len to 31418 or less" in fit.message


def test_a_plan_that_fits_reports_the_tokens_of_kv() -> None:
    fit = _fit(24, 16_384)
    assert fit.fits
    assert fit.sequence_bytes == 167_936 * 16_384
    assert fit.max_sequences == 1  # 5,276,219,473 // 2,751,463,424
    assert fit.kv_tokens == 31_418  # 5,276,219,473 // 167,936 (no sliding layers)
    assert "31,418 tokens" in fit.message


def test_weights_that_do_not_fit_at_all_are_refused() -> None:
    fit = _fit(16, 4096)
    # int(16 GiB x 0.92) = 15,805,479,649 < 18,432,000,000 of weights.
    assert fit.usable_bytes == 15_805_479_649
    assert not fit.fits and fit.kv_budget_bytes < 0 and fit.kv_tokens == 0
    assert fit.message.startswith("the weights alone (17.17 GiB per rank) do not fit in 16.00 GiB")


def test_two_ranks_halve_the_weights_on_each() -> None:
    fit = _fit(16, 4096, tensor_parallel_size=2)
    assert fit.weights_bytes == 9_216_000_000 and fit.fits


# --- tensor parallelism ------------------------------------------------------------------------


def test_vocab_padding_is_to_a_multiple_of_64() -> None:
    assert padded_vocab(151_936) == 151_936  # 2374 x 64
    assert padded_vocab(152_000) == 152_000  # 2375 x 64
    assert padded_vocab(152_001) == 152_064  # 2376 x 64
    assert padded_vocab(128) == 128 and padded_vocab(129) == 192


def test_tensor_parallel_sizes_the_demo_pair_can_and_cannot_use() -> None:
    target = target_dims(demo_target(), "target")  # 4 heads, 2 KV heads, vocab 128
    draft = draft_dims(demo_draft_description(), "draft")  # 1 head, 1 KV head, vocab 128
    # TP 2: the target splits; the draft's single head does not (it runs at the target's TP).
    two = check_tensor_parallel(target, draft, 2)
    assert [(p.model, p.key) for p in two.problems] == [("draft", "num_attention_heads")]
    assert check_tensor_parallel(target, draft, 2, draft_tensor_parallel_size=1).ok
    # TP 4: 2 KV heads replicate twice; 4 heads split.
    assert check_tensor_parallel(target, draft, 4, draft_tensor_parallel_size=1).ok
    # TP 3: 4 heads, 2 KV heads and 128 padded rows all fail to split.
    three = check_tensor_parallel(target, draft, 3, draft_tensor_parallel_size=1)
    assert [p.key for p in three.problems] == ["num_attention_heads", "num_key_value_heads", "vocab_size"]
    assert three.vocab[0].rows_per_rank is None
    # The draft's own size must be 1 or the target's.
    odd = check_tensor_parallel(target, draft, 4, draft_tensor_parallel_size=2)
    assert [p.key for p in odd.problems] == ["draft_tensor_parallel_size"]


def test_vocab_rows_per_rank_include_the_padding() -> None:
    dims = _dims("t", ("full_attention",), kv=8)
    split = check_tensor_parallel(dims, dims, 8).vocab[0]
    assert (split.padded, split.rows_per_rank) == (151_936, 18_992)


# --- everything for one pair, as `plan` computes it ----------------------------------------------


def demo_plan(**settings: Any) -> ServingPlan:
    """The demo pair planned by the pipeline the command runs (`plan_launch`), on the newest vLLM."""
    rules = latest("vllm")
    assert rules is not None
    request = PlanRequest(target=DEMO_TARGET, drafts=(PlanDraft(DEMO_DRAFT),), engines=(rules.spec,), **settings)
    (plan,) = plan_launch(request).plans
    return plan


def test_the_plan_numbers_of_the_demo_pair() -> None:
    settings: dict[str, Any] = {"max_num_seqs": 16, "max_model_len": 1024, "gpu_memory_gib": 64 / 1024}
    # A float32 target is served in bfloat16 (vLLM's `auto` on a GPU with bfloat16): the one rule.
    assert demo_plan(**settings).serving_dtype == "bfloat16"
    plan = demo_plan(**settings, dtype="float32")
    assert (plan.serving_dtype, plan.kv_cache_dtype) == ("float32", "float32")
    assert plan.weights is not None and plan.memory is not None
    target_weights, draft_weights = plan.weights
    # The draft by hand: 2 layers of (q, k, v, o: 64 x 64 each; gate, up, down: 64 x 64; 4 norms of
    # 64), fc 64 x 128 (two captured layers of 64), hidden_norm and norm: 66,176 float32 elements.
    assert draft_weights.stored_total == (2 * (7 * 64 * 64 + 4 * 64) + 64 * 128 + 2 * 64) * 4 == 264_704
    assert target_weights.stored_total == 1_052_928
    # K 7 bonus-anchor: 8 query positions x 16 sequences.
    (engine,) = plan.engines.values()
    assert engine.token_budget is not None and engine.token_budget.required == 128
    assert plan.memory.fits and plan.memory.gpu_memory_utilization == vllm_utilization() == 0.92
    # int(64 MiB x 0.92) = 61,740,154, less 1,317,632 bytes of weights = 60,422,522; / 5,120 B/token.
    assert plan.memory.kv_budget_bytes == int(64 * 1024 * 1024 * 0.92) - 1_317_632 == 60_422_522
    assert plan.memory.kv_tokens == 60_422_522 // 5120 == 11_801
    assert plan.ok and plan.to_dict()["ok"] is True
    # bfloat16 halves weights and KV; an fp8 KV cache halves the KV again.
    small = demo_plan(**settings, dtype="bfloat16", kv_cache_dtype="fp8")
    assert small.memory is not None and small.memory.layouts[0].full_bytes_per_token == 4096 // 4
    assert small.weights is not None and small.weights[0].loaded_total == 1_052_928 // 2
