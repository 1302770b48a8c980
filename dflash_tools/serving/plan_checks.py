"""The numbers a serving plan checks before a launch: token budget, memory, tensor parallelism.

Pure functions over what the reading layer already read (a target's config dict, a draft's
`DraftDescription`, safetensors `TensorHeader`s) and the geometry rules (`draft.geometry`).
Nothing here reads a file, imports an engine or builds a command line; the serving plan does that
and renders what these return. Every rule names the vLLM file it comes from (read in the 0.34.0
sources; 0.33.0 has the same rules unless a function says otherwise).

- Token budget (`check_token_budget`): a DFlash drafter runs every running request's query
  positions in one step that cannot be chunked, `max_num_seqs x Q` rows, and sizes its input
  buffers by `max_num_batched_tokens`; below that product vLLM 0.33.0 and 0.34.0 run fewer
  requests at once (the serving plan says how many, from the engine table's rule), and
  vllm-project/vllm#53970 reports an out-of-bounds index on the GPU for it.
- Memory (`weight_bytes`, `kv_layout`, `check_memory`): weights per tensor-parallel rank from the
  headers, KV bytes per token of the target and the draft (full and sliding-window layers), and how
  much KV fits in `gpu_memory x utilization` after the weights. vLLM refuses to start when one
  request of `max_model_len` does not fit (`vllm/v1/core/kv_cache_planning.py`).
- Tensor parallelism (`check_tensor_parallel`, `padded_vocab`): heads that do not divide, and the
  vocabulary rows vLLM pads to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dflash_tools.draft.description import DraftDescription
from dflash_tools.draft.geometry import layout_name, num_query_tokens
from dflash_tools.errors import SourceError
from dflash_tools.reading.safetensors_header import DTYPE_BITS, TensorHeader

GIB = 1024**3

# vLLM's default `gpu_memory_utilization` when the KV cache is sized from a profiling estimate:
# `CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION` in vllm/config/cache.py (0.34.0; the field default
# in 0.33.0). 0.34.0 on CUDA and ROCm defaults to the extensible KV cache instead, which takes
# everything left after the weights, activations and CUDA graphs (`resolved_gpu_memory_utilization`
# = 1.0); a plan that fits at 0.92 fits there too.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
# vLLM pads embedding and LM-head rows to a multiple of this, then splits them evenly across the
# tensor-parallel ranks (`DEFAULT_VOCAB_PADDING_SIZE`, `pad_vocab_size` and the `divide` of
# `num_embeddings_padded` by tp_size in vllm/model_executor/layers/vocab_parallel_embedding.py).
VOCAB_PADDING = 64

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

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a serving dtype name (`bfloat16`, `float16`, `fp8`, `torch.float32`)."""
    name = dtype.removeprefix("torch.").lower()
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[name]


def gib(value: int | float) -> str:
    """Bytes as GiB with two decimals, the unit vLLM's own memory messages use."""
    return f"{value / GIB:.2f} GiB"


# --- model dimensions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionDims:
    """What the KV cache and tensor parallelism of one model depend on."""

    name: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    layer_types: tuple[str, ...]  # one per layer: full_attention, sliding_attention or another kind
    sliding_window: int | None
    dtype: str | None  # the dtype its config declares (`torch_dtype` / `dtype`), if any

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "layer_types": list(self.layer_types),
            "sliding_window": self.sliding_window,
            "dtype": self.dtype,
        }


def _positive_int(config: Mapping[str, Any], key: str, where: str, location: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise SourceError(
            f"target {location}: {where}{key} is {value!r}, not a positive integer",
            "pass the target model's own config.json",
        )
    return value


def _layer_types(raw: Any, layers: int, sliding_window: int | None) -> tuple[str, ...]:
    if isinstance(raw, list) and len(raw) == layers and all(isinstance(t, str) for t in raw):
        return tuple(raw)
    # No per-layer list: a config with a window slides on every layer (Mistral-style), else full.
    return ((SLIDING_ATTENTION if sliding_window else FULL_ATTENTION),) * layers


def _config_dtype(config: Mapping[str, Any]) -> str | None:
    value = config.get("torch_dtype", config.get("dtype"))
    return value.removeprefix("torch.") if isinstance(value, str) else None


def target_dims(config: Mapping[str, Any], name: str, location: str | None = None) -> AttentionDims:
    """A target's dimensions from its config.json (the text model's, for a multimodal target).

    `head_dim` defaults to hidden_size / num_attention_heads and `num_key_value_heads` to
    num_attention_heads, as transformers' configs do. Raises SourceError naming the key.
    """
    location = location or name
    text = config.get("text_config")
    inner: Mapping[str, Any] = text if isinstance(text, Mapping) else config
    where = "text_config." if isinstance(text, Mapping) else ""
    layers = _positive_int(inner, "num_hidden_layers", where, location)
    heads = _positive_int(inner, "num_attention_heads", where, location)
    kv_heads = _positive_int(inner, "num_key_value_heads", where, location) if "num_key_value_heads" in inner else heads
    if inner.get("head_dim") is not None:
        head_dim = _positive_int(inner, "head_dim", where, location)
    else:
        head_dim = _positive_int(inner, "hidden_size", where, location) // heads
    vocab = _positive_int(inner, "vocab_size", where, location)
    window = inner.get("sliding_window")
    window = window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None
    if not inner.get("use_sliding_window", True):
        window = None  # Qwen2-style configs carry a window they do not use
    return AttentionDims(
        name=name,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        layer_types=_layer_types(inner.get("layer_types"), layers, window),
        sliding_window=window,
        dtype=_config_dtype(inner) or _config_dtype(config),
    )


def draft_dims(desc: DraftDescription, name: str) -> AttentionDims:
    """A draft's dimensions from the description its dialect reader produced."""
    decoder = desc.decoder
    layers = decoder.num_hidden_layers
    types = decoder.layer_types
    layer_types = (
        tuple(types)
        if types and len(types) == layers
        else ((SLIDING_ATTENTION if decoder.sliding_window else FULL_ATTENTION),) * layers
    )
    if not decoder.sliding_window:
        # A layer called sliding without a window holds every token (the engine has nothing to cap at).
        layer_types = tuple(FULL_ATTENTION if t == SLIDING_ATTENTION else t for t in layer_types)
    return AttentionDims(
        name=name,
        num_hidden_layers=layers,
        num_attention_heads=decoder.num_attention_heads,
        num_key_value_heads=decoder.num_key_value_heads,
        head_dim=decoder.head_dim,
        vocab_size=decoder.vocab_size,
        layer_types=layer_types,
        sliding_window=decoder.sliding_window,
        dtype=_config_dtype(desc.raw_config),
    )


# --- the token budget --------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenBudget:
    max_num_seqs: int
    num_speculative_tokens: int
    sample_from_anchor: bool
    num_query_tokens: int
    required: int  # max_num_seqs x num_query_tokens
    max_num_batched_tokens: int | None
    ok: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_num_seqs": self.max_num_seqs,
            "num_speculative_tokens": self.num_speculative_tokens,
            "layout": layout_name(self.sample_from_anchor),
            "num_query_tokens": self.num_query_tokens,
            "required_max_num_batched_tokens": self.required,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "ok": self.ok,
            "message": self.message,
        }


def check_token_budget(
    max_num_seqs: int, num_speculative_tokens: int, sample_from_anchor: bool, max_num_batched_tokens: int | None
) -> TokenBudget:
    """`max_num_batched_tokens >= max_num_seqs x Q`, Q = K anchor-first, K + 1 bonus-anchor.

    The drafter proposes for every running request at once (one unchunkable step of
    `max_num_seqs x Q` query rows) while its input buffers hold `max_num_batched_tokens` rows
    (vllm/v1/worker/gpu/spec_decode/dflash/speculator.py; vllm-project/vllm#53970 is the crash and
    its open fix). `max_num_batched_tokens` None: not chosen yet; the message says what to pass.
    """
    if max_num_seqs < 1 or num_speculative_tokens < 1:
        raise ValueError("max_num_seqs and num_speculative_tokens must be >= 1")
    queries = num_query_tokens(num_speculative_tokens, sample_from_anchor)
    required = max_num_seqs * queries
    layout = layout_name(sample_from_anchor)
    product = f"max_num_seqs {max_num_seqs} x {queries} query positions ({layout}, K = {num_speculative_tokens})"
    if max_num_batched_tokens is None:
        ok = True
        message = f"pass --max-num-batched-tokens {required} or more: {product} = {required}"
    elif max_num_batched_tokens >= required:
        ok = True
        message = f"max_num_batched_tokens {max_num_batched_tokens} >= {product} = {required}"
    else:
        ok = False
        message = (
            f"max_num_batched_tokens {max_num_batched_tokens} < {product} = {required}: the draft pass of "
            f"every running request does not fit in one step (vllm-project/vllm#53970); pass "
            f"--max-num-batched-tokens {required} or lower --max-num-seqs to {max_num_batched_tokens // queries}"
        )
    return TokenBudget(
        max_num_seqs, num_speculative_tokens, sample_from_anchor, queries, required, max_num_batched_tokens, ok, message
    )


# --- weights -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightBytes:
    """A checkpoint's weights: bytes as stored by dtype, and in memory on one tensor-parallel rank."""

    stored_by_dtype: dict[str, int]
    stored_total: int
    loaded_total: int  # in the serving dtype, all ranks together
    per_rank: int  # on one rank: matrices split evenly, vectors (norms, biases) on every rank
    tensor_parallel_size: int
    serving_dtype: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "stored_by_dtype": dict(self.stored_by_dtype),
            "stored_total": self.stored_total,
            "loaded_total": self.loaded_total,
            "per_rank": self.per_rank,
            "tensor_parallel_size": self.tensor_parallel_size,
            "serving_dtype": self.serving_dtype,
        }


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
class KvLayout:
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kv_heads_per_rank": self.kv_heads_per_rank,
            "head_dim": self.head_dim,
            "dtype_bytes": self.dtype_bytes,
            "full_layers": self.full_layers,
            "sliding_layers": self.sliding_layers,
            "sliding_window": self.sliding_window,
            "uncounted_layers": dict(self.uncounted_layers),
            "bytes_per_token_per_layer": self.bytes_per_token_per_layer,
            "full_bytes_per_token": self.full_bytes_per_token,
            "sliding_bytes_per_token": self.sliding_bytes_per_token,
        }


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
class MemoryFit:
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
    layouts: tuple[KvLayout, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "usable_bytes": self.usable_bytes,
            "weights_bytes": self.weights_bytes,
            "kv_budget_bytes": self.kv_budget_bytes,
            "max_model_len": self.max_model_len,
            "sequence_bytes": self.sequence_bytes,
            "max_sequences": self.max_sequences,
            "kv_tokens": self.kv_tokens,
            "fits": self.fits,
            "message": self.message,
            "kv": [layout.to_dict() for layout in self.layouts],
        }


def check_memory(
    *,
    gpu_memory_bytes: int,
    weights: Sequence[WeightBytes],
    layouts: Sequence[KvLayout],
    max_model_len: int,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    in_flight_tokens: int = 0,
) -> MemoryFit:
    """Whether the weights and one request of `max_model_len` fit on one rank, and how much KV fits.

    KV budget = gpu_memory x utilization - the weights on one rank. vLLM also subtracts the peak
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


# --- tensor parallelism ------------------------------------------------------------------------


def padded_vocab(vocab_size: int, pad_to: int = VOCAB_PADDING) -> int:
    """The embedding / LM-head rows vLLM allocates (`pad_vocab_size`)."""
    return (vocab_size + pad_to - 1) // pad_to * pad_to


@dataclass(frozen=True)
class TensorParallelProblem:
    model: str
    key: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"model": self.model, "key": self.key, "message": self.message}


@dataclass(frozen=True)
class VocabSplit:
    model: str
    vocab_size: int
    padded: int
    rows_per_rank: int | None  # None when the padded rows do not split evenly

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "vocab_size": self.vocab_size,
            "padded_vocab_size": self.padded,
            "padding_rows": self.padded - self.vocab_size,
            "rows_per_rank": self.rows_per_rank,
        }


def vocab_split(dims: AttentionDims, tensor_parallel_size: int) -> VocabSplit:
    padded = padded_vocab(dims.vocab_size)
    rows = padded // tensor_parallel_size if padded % tensor_parallel_size == 0 else None
    return VocabSplit(dims.name, dims.vocab_size, padded, rows)


def head_problems(dims: AttentionDims, tensor_parallel_size: int) -> list[TensorParallelProblem]:
    """Heads that a tensor-parallel size cannot split.

    Attention heads must divide evenly (`verify_with_parallel_config` in vllm/config/model.py;
    `divide` in `QKVParallelLinear`). KV heads must divide evenly too, or, when there are fewer KV
    heads than ranks, the ranks must be a multiple of them (each KV head is then replicated:
    `QKVParallelLinear` in vllm/model_executor/layers/linear.py). The padded vocabulary rows
    must split evenly (`VocabParallelEmbedding`).
    """
    tp = tensor_parallel_size
    problems: list[TensorParallelProblem] = []
    if tp == 1:
        return problems
    heads, kv = dims.num_attention_heads, dims.num_key_value_heads
    if heads % tp:
        problems.append(
            TensorParallelProblem(
                dims.name,
                "num_attention_heads",
                f"{dims.name}: {heads} attention heads do not divide by tensor parallel size {tp}",
            )
        )
    if kv >= tp and kv % tp:
        problems.append(
            TensorParallelProblem(
                dims.name,
                "num_key_value_heads",
                f"{dims.name}: {kv} KV heads do not divide by tensor parallel size {tp}",
            )
        )
    elif kv < tp and tp % kv:
        problems.append(
            TensorParallelProblem(
                dims.name,
                "num_key_value_heads",
                f"{dims.name}: tensor parallel size {tp} is not a multiple of its {kv} KV heads (vLLM replicates "
                "KV heads only by a whole factor)",
            )
        )
    split = vocab_split(dims, tp)
    if split.rows_per_rank is None:
        problems.append(
            TensorParallelProblem(
                dims.name,
                "vocab_size",
                f"{dims.name}: vocab_size {dims.vocab_size}, padded to {split.padded} rows (a multiple of "
                f"{VOCAB_PADDING}), does not split across {tp} ranks",
            )
        )
    return problems


@dataclass(frozen=True)
class TensorParallelCheck:
    tensor_parallel_size: int
    draft_tensor_parallel_size: int
    problems: tuple[TensorParallelProblem, ...]
    vocab: tuple[VocabSplit, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor_parallel_size": self.tensor_parallel_size,
            "draft_tensor_parallel_size": self.draft_tensor_parallel_size,
            "ok": self.ok,
            "problems": [p.to_dict() for p in self.problems],
            "vocab": [v.to_dict() for v in self.vocab],
        }


def check_tensor_parallel(
    target: AttentionDims,
    draft: AttentionDims,
    tensor_parallel_size: int,
    draft_tensor_parallel_size: int | None = None,
) -> TensorParallelCheck:
    """The target at `tensor_parallel_size`, the draft at its own size: 1 or the target's, defaulting
    to the target's (`_verify_and_get_draft_tp` in vllm/config/speculative.py)."""
    tp = tensor_parallel_size
    draft_tp = tp if draft_tensor_parallel_size is None else draft_tensor_parallel_size
    problems = head_problems(target, tp)
    if draft_tp not in (1, tp):
        problems.append(
            TensorParallelProblem(
                draft.name,
                "draft_tensor_parallel_size",
                f"draft_tensor_parallel_size {draft_tp} must be 1 or the target's tensor parallel size {tp}",
            )
        )
    else:
        problems.extend(head_problems(draft, draft_tp))
    return TensorParallelCheck(tp, draft_tp, tuple(problems), (vocab_split(target, tp), vocab_split(draft, draft_tp)))


# --- all of it for one target and draft -------------------------------------------------------------


@dataclass(frozen=True)
class ServingNumbers:
    """The serving plan's checks for one target and draft, as read by `reading` and `inspect`."""

    target: AttentionDims
    draft: AttentionDims
    serving_dtype: str
    kv_cache_dtype: str
    target_weights: WeightBytes
    draft_weights: WeightBytes
    token_budget: TokenBudget
    tensor_parallel: TensorParallelCheck
    memory: MemoryFit | None  # None without --gpu-memory

    @property
    def ok(self) -> bool:
        return self.token_budget.ok and self.tensor_parallel.ok and (self.memory is None or self.memory.fits)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "target": self.target.to_dict(),
            "draft": self.draft.to_dict(),
            "serving_dtype": self.serving_dtype,
            "kv_cache_dtype": self.kv_cache_dtype,
            "weights": {"target": self.target_weights.to_dict(), "draft": self.draft_weights.to_dict()},
            "token_budget": self.token_budget.to_dict(),
            "tensor_parallel": self.tensor_parallel.to_dict(),
            "memory": self.memory.to_dict() if self.memory else None,
        }


def serving_numbers(
    target_config: Mapping[str, Any],
    target_tensors: Mapping[str, TensorHeader],
    draft: DraftDescription,
    draft_tensors: Mapping[str, TensorHeader],
    *,
    num_speculative_tokens: int,
    sample_from_anchor: bool,
    max_num_seqs: int,
    max_model_len: int,
    max_num_batched_tokens: int | None = None,
    tensor_parallel_size: int = 1,
    draft_tensor_parallel_size: int | None = None,
    gpu_memory_bytes: int | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    dtype: str | None = None,
    kv_cache_dtype: str = "auto",
    target_name: str = "target",
    draft_name: str = "draft",
) -> ServingNumbers:
    """Every check for one launch. `target_config` / `target_tensors` are a `LoadedCheckpoint`'s
    `config` and `tensors`; `draft` is the inspect report's description, `draft_tensors` its
    checkpoint's tensors. `dtype` None: the target config's (bfloat16 when it names none);
    `kv_cache_dtype` "auto": the serving dtype, as vLLM's `--kv-cache-dtype auto`. Sliding layers
    keep the tokens of one scheduling step in flight on top of their window."""
    target = target_dims(target_config, target_name)
    draft_view = draft_dims(draft, draft_name)
    serving = dtype or target.dtype or "bfloat16"
    kv_dtype = serving if kv_cache_dtype == "auto" else kv_cache_dtype
    tp = tensor_parallel_size
    tp_check = check_tensor_parallel(target, draft_view, tp, draft_tensor_parallel_size)
    draft_tp = tp_check.draft_tensor_parallel_size
    target_weights = weight_bytes(target_tensors, tp, serving)
    draft_weights = weight_bytes(draft_tensors, draft_tp, serving)
    budget = check_token_budget(max_num_seqs, num_speculative_tokens, sample_from_anchor, max_num_batched_tokens)
    memory = None
    if gpu_memory_bytes is not None:
        kv_bytes = dtype_bytes(kv_dtype)
        memory = check_memory(
            gpu_memory_bytes=gpu_memory_bytes,
            weights=[target_weights, draft_weights],
            layouts=[kv_layout(target, kv_bytes, tp), kv_layout(draft_view, kv_bytes, draft_tp)],
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            in_flight_tokens=max_num_batched_tokens or budget.required,
        )
    return ServingNumbers(
        target, draft_view, serving, kv_dtype, target_weights, draft_weights, budget, tp_check, memory
    )
