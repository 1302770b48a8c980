"""The memory of a launch: weights per tensor-parallel rank, KV bytes per token, and whether both fit.

Pure functions over safetensors `TensorHeader`s and the models' `AttentionDims` (`checks`);
nothing here reads a file or imports an engine.

- Weights (`weight_bytes`): per tensor-parallel rank from the headers, in the serving dtype.
- KV cache (`kv_layout`): bytes per token of the target and the draft, full and sliding-window
  layers.
- The fit (`check_memory`): how much KV fits in `gpu_memory x utilization` after the weights.
  vLLM refuses to start when one request of `max_model_len` does not fit
  (`vllm/v1/core/kv_cache_planning.py`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.plan.checks import FULL_ATTENTION, SLIDING_ATTENTION, AttentionDims
from dflash_tools.reading.safetensors_header import DTYPE_BITS, TensorHeader

GIB = 1024**3

# Bytes per element of the dtypes a model or KV cache is served in (config `torch_dtype` / `dtype`,
# `--dtype`, `--kv-cache-dtype`). fp8 KV caches store one byte per element.
DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
}
# safetensors dtypes that vLLM casts to the serving dtype when it loads them (quantized or integer
# tensors stay as stored).
_CAST_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a serving dtype name (`bfloat16`, `float16`, `fp8`, `torch.float32`)."""
    name = dtype.removeprefix("torch.").lower()
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[name]


def gib(value: int | float) -> str:
    """Bytes as GiB with two decimals, the unit vLLM's own memory messages use."""
    return f"{value / GIB:.2f} GiB"


# --- weights -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightBytes(JsonDocument):
    """A checkpoint's weights: bytes as stored by dtype, and in memory on one tensor-parallel rank."""

    stored_by_dtype: dict[str, int]
    stored_total: int
    loaded_total: int  # in the serving dtype, all ranks together
    per_rank: int  # on one rank: matrices split evenly, vectors (norms, biases) on every rank
    tensor_parallel_size: int
    serving_dtype: str | None


def weight_bytes(
    tensors: Mapping[str, TensorHeader], tensor_parallel_size: int = 1, serving_dtype: str | None = None
) -> WeightBytes:
    """Weight bytes from safetensors headers; never reads a weight.

    Floating tensors are counted in `serving_dtype` when given (vLLM casts F16/BF16/F32 weights to
    the model dtype on load); quantized and integer tensors as stored. On a rank: a tensor of two
    or more dimensions is split across the ranks (rounded up), a vector is replicated.
    """
    if tensor_parallel_size < 1:
        raise ValueError("tensor_parallel_size must be >= 1")
    element_bits = dtype_bytes(serving_dtype) * 8 if serving_dtype else None
    by_dtype: dict[str, int] = {}
    stored = loaded = per_rank = 0
    for header in tensors.values():
        by_dtype[header.dtype] = by_dtype.get(header.dtype, 0) + header.num_bytes
        stored += header.num_bytes
        if element_bits is not None and header.dtype in _CAST_DTYPES:
            size = (header.num_elements * element_bits + 7) // 8
        else:
            size = (header.num_elements * DTYPE_BITS.get(header.dtype, 8) + 7) // 8
        loaded += size
        per_rank += math.ceil(size / tensor_parallel_size) if len(header.shape) >= 2 else size
    return WeightBytes(dict(sorted(by_dtype.items())), stored, loaded, per_rank, tensor_parallel_size, serving_dtype)


# --- the KV cache ------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvLayout(JsonDocument):
    """Per-token KV bytes of one model on one tensor-parallel rank.

    Full-attention layers hold every token of a sequence; sliding-window layers at most the window
    (plus the tokens in flight, below); other layer kinds (linear attention, state-space) hold a
    fixed state per sequence and are not counted here.
    """

    name: str
    kv_heads_per_rank: int
    head_dim: int
    dtype_bytes: int
    full_layers: int
    sliding_layers: int
    sliding_window: int | None
    uncounted_layers: dict[str, int] = field(default_factory=dict)

    json_properties: ClassVar[Mapping[str, str]] = {
        "bytes_per_token_per_layer": "bytes_per_token_per_layer",
        "full_bytes_per_token": "full_bytes_per_token",
        "sliding_bytes_per_token": "sliding_bytes_per_token",
    }

    @property
    def bytes_per_token_per_layer(self) -> int:
        # K and V: num_kv_heads x head_dim x 2 x dtype bytes per layer and token.
        return self.kv_heads_per_rank * self.head_dim * 2 * self.dtype_bytes

    @property
    def full_bytes_per_token(self) -> int:
        return self.full_layers * self.bytes_per_token_per_layer

    @property
    def sliding_bytes_per_token(self) -> int:
        return self.sliding_layers * self.bytes_per_token_per_layer

    def sliding_tokens(self, length: int, in_flight_tokens: int = 0) -> int:
        """Tokens a sliding layer holds for a sequence of `length`: the window less one, plus the
        tokens scheduled but not yet freed, never more than the sequence (`SlidingWindowSpec.
        max_admission_blocks_per_request` in vllm/v1/kv_cache_interface.py; block rounding left out)."""
        if not self.sliding_layers or self.sliding_window is None:
            return 0
        return min(self.sliding_window - 1 + in_flight_tokens, length)

    def sequence_bytes(self, length: int, in_flight_tokens: int = 0) -> int:
        return self.full_bytes_per_token * length + self.sliding_bytes_per_token * self.sliding_tokens(
            length, in_flight_tokens
        )


def kv_layout(dims: AttentionDims, kv_dtype_bytes: int, tensor_parallel_size: int = 1) -> KvLayout:
    """KV heads are split across the ranks; with fewer KV heads than ranks each rank keeps one
    (`get_num_kv_heads` in vllm/config/model.py)."""
    full = sum(1 for t in dims.layer_types if t == FULL_ATTENTION)
    sliding = sum(1 for t in dims.layer_types if t == SLIDING_ATTENTION)
    other: dict[str, int] = {}
    for kind in dims.layer_types:
        if kind not in (FULL_ATTENTION, SLIDING_ATTENTION):
            other[kind] = other.get(kind, 0) + 1
    return KvLayout(
        name=dims.name,
        kv_heads_per_rank=max(1, dims.num_key_value_heads // tensor_parallel_size),
        head_dim=dims.head_dim,
        dtype_bytes=kv_dtype_bytes,
        full_layers=full,
        sliding_layers=sliding,
        sliding_window=dims.sliding_window if sliding else None,
        uncounted_layers=other,
    )


@dataclass(frozen=True)
class MemoryFit(JsonDocument):
    gpu_memory_bytes: int
    gpu_memory_utilization: float
    usable_bytes: int  # gpu_memory x utilization
    weights_bytes: int  # target + draft on one rank
    kv_budget_bytes: int  # what is left for the KV cache (an upper bound: see check_memory)
    max_model_len: int
    sequence_bytes: int  # KV of one request of max_model_len, target + draft
    max_sequences: int  # requests of max_model_len whose KV fits
    kv_tokens: int  # tokens of KV that fit, in requests of max_model_len
    fits: bool
    message: str
    layouts: tuple[KvLayout, ...] = field(default=(), metadata=json_rules(name="kv"))


def check_memory(
    *,
    gpu_memory_bytes: int,
    weights: Sequence[WeightBytes],
    layouts: Sequence[KvLayout],
    max_model_len: int,
    gpu_memory_utilization: float,
    in_flight_tokens: int = 0,
) -> MemoryFit:
    """Whether the weights and one request of `max_model_len` fit on one rank, and how much KV fits.

    KV budget = gpu_memory x utilization - the weights on one rank (the utilization: given, else
    the release's default, `EngineRules.serving_default("gpu_memory_utilization")`). vLLM also subtracts the peak
    activation memory, CUDA graphs and non-torch allocations it measures at start-up, which a plan
    cannot know, so this budget is an upper bound: a plan refused here cannot start; one that
    passes may still need a lower max_model_len. vLLM refuses to start when one request of
    max_model_len does not fit ("To serve at least one request with the model's max seq len",
    vllm/v1/core/kv_cache_planning.py); `kv_tokens` counts sliding-window layers at their share
    of a max_model_len request.
    """
    if gpu_memory_bytes <= 0 or max_model_len < 1 or not 0 < gpu_memory_utilization <= 1:
        raise ValueError("gpu_memory_bytes, max_model_len and gpu_memory_utilization must be positive")
    usable = int(gpu_memory_bytes * gpu_memory_utilization)
    weights_total = sum(w.per_rank for w in weights)
    budget = usable - weights_total
    sequence = sum(layout.sequence_bytes(max_model_len, in_flight_tokens) for layout in layouts)
    if budget <= 0:
        sequences = tokens = 0
    elif sequence <= 0:
        # Nothing grows per token (no attention layer counted): only the weights can fail to fit.
        sequences = tokens = 0
    else:
        sequences = budget // sequence
        tokens = budget * max_model_len // sequence
    where = f"{gib(gpu_memory_bytes)} x gpu_memory_utilization {gpu_memory_utilization:g} = {gib(usable)}"
    if budget <= 0:
        fits = False
        message = (
            f"the weights alone ({gib(weights_total)} per rank) do not fit in {where}; "
            "use more tensor-parallel ranks, a smaller dtype or a larger GPU"
        )
    elif sequence > budget:
        fits = False
        longest = _longest_fitting(layouts, budget, in_flight_tokens, max_model_len)
        message = (
            f"one request of max_model_len {max_model_len} needs {gib(sequence)} of KV, but only {gib(budget)} "
            f"is left in {where} after {gib(weights_total)} of weights; vLLM refuses to start. "
            f"Lower --max-model-len to {longest} or less, or add memory"
        )
    else:
        fits = True
        message = (
            f"{gib(budget)} of KV after {gib(weights_total)} of weights in {where}: "
            f"{tokens:,} tokens, {sequences:,} request(s) of max_model_len {max_model_len} (an upper bound: "
            "activations and CUDA graphs come out of it too)"
        )
    return MemoryFit(
        gpu_memory_bytes,
        gpu_memory_utilization,
        usable,
        weights_total,
        budget,
        max_model_len,
        sequence,
        sequences,
        tokens,
        fits,
        message,
        tuple(layouts),
    )


def _longest_fitting(layouts: Sequence[KvLayout], budget: int, in_flight_tokens: int, upper: int) -> int:
    """The largest length whose KV fits the budget (bisection; KV grows with length)."""
    low, high = 0, upper
    while low < high:
        middle = (low + high + 1) // 2
        if sum(layout.sequence_bytes(middle, in_flight_tokens) for layout in layouts) <= budget:
            low = middle
        else:
            high = middle - 1
    return low
