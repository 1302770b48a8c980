"""The numbers a serving plan checks before a launch: the models' dimensions, the token budget, the
tensor parallelism. The memory (weights, KV cache, the fit) is `memory`.

Pure functions over what the lower layers already read (a `TargetDescription`, a draft's
`DraftDescription`) and the geometry rules (`draft.geometry`). Nothing here reads a file, imports
an engine or builds a command line; the serving plan does that and renders what these return.
Every rule names the vLLM file it comes from (read in the sources of the vLLM releases the tool
has tables for, `engine_rules`; the same in each unless a function says otherwise).

- Dimensions (`target_dims`, `draft_dims`): what the KV cache and the parallelism depend on, one
  `AttentionDims` view of each model.
- Token budget (`check_token_budget`): a DFlash drafter runs every running request's query
  positions in one step that cannot be chunked, `max_num_seqs x Q` rows, and sizes its input
  buffers by `max_num_batched_tokens`; below that product the vLLM releases in the tables run
  fewer requests at once (the serving plan says how many, from the engine table's rule), and
  vllm-project/vllm#53970 reports an out-of-bounds index on the GPU for it.
- Tensor parallelism (`check_tensor_parallel`, `padded_vocab`): heads that do not divide, and the
  vocabulary rows vLLM pads to.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.draft.description import DraftDescription
from dflash_tools.draft.geometry import layout_name, num_query_tokens
from dflash_tools.draft.model_limits import shown_integer
from dflash_tools.draft.target import FULL_ATTENTION, SLIDING_ATTENTION, TargetDescription
from dflash_tools.errors import UsageError

__all__ = ["FULL_ATTENTION", "SLIDING_ATTENTION", "AttentionDims", "TargetDescription"]

# vLLM pads embedding and LM-head rows to a multiple of this, then splits them evenly across the
# tensor-parallel ranks (`DEFAULT_VOCAB_PADDING_SIZE`, `pad_vocab_size` and the `divide` of
# `num_embeddings_padded` by tp_size in vllm/model_executor/layers/vocab_parallel_embedding.py).
VOCAB_PADDING = 64


# --- the numbers a plan is asked for ------------------------------------------------------------

# The engines keep counts and lengths in 64-bit integers (torch.int64 tensors, C++ int64_t): a
# larger one is refused at start-up or wraps around, whatever the check before it said.
INT64_MAX = 2**63 - 1
# A GPU's memory in GiB: above every GPU made by far (one petabyte), so that any float the GiB is
# multiplied by stays a float and the byte count an integer (`inf` or 1e308 GiB overflowed).
MAX_GPU_MEMORY_GIB = 1024 * 1024

# Each integer setting a plan takes (the command line, a preset's engine arguments, the Python
# API's `PlanRequest`): at least 1, at most what an engine holds.
INTEGER_SETTINGS = (
    "num_speculative_tokens",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "tensor_parallel_size",
    "decode_context_parallel_size",
)
# Each number that may be fractional, with its range (low exclusive, high inclusive) and unit.
FRACTION_SETTINGS: dict[str, tuple[float, float, str]] = {
    "gpu_memory_gib": (0.0, MAX_GPU_MEMORY_GIB, " GiB"),
    "gpu_memory_utilization": (0.0, 1.0, ""),
}
TEXT_SETTINGS = ("dtype", "kv_cache_dtype")


def setting_problem(name: str, value: Any) -> str | None:
    """Why `value` cannot be setting `name` ("is 'eight', not an integer"), or None when it can.

    Checked before any arithmetic, for every way a value arrives: a type (a string where a
    number belongs, a list, a bool), NaN and the infinities, a count below 1 or beyond 64 bits,
    a fraction outside its range. None is "not given" and always passes.
    """
    if value is None:
        return None
    shown = _shown(value)
    if name in INTEGER_SETTINGS:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"is {shown}, not an integer"
        if value < 1:
            return f"is {shown}, not 1 or more"
        if value > INT64_MAX:
            return f"is {shown}, more than {INT64_MAX:,}, the largest an engine takes (a 64-bit integer)"
        return None
    if name in FRACTION_SETTINGS:
        low, high, unit = FRACTION_SETTINGS[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"is {shown}, not a number"
        if isinstance(value, float) and not math.isfinite(value):
            return f"is {shown}, not a finite number"
        if not low < value <= high:
            return f"is {shown}, not above {low:g} and at most {high:,.10g}{unit}"
        return None
    if name in TEXT_SETTINGS and not isinstance(value, str):
        return f"is {shown}, not a name"
    return None


def _shown(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return shown_integer(value)
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def check_settings(values: Mapping[str, Any], where: Callable[[str], str]) -> None:
    """Raise UsageError for the first value of `values` (setting name -> value) that cannot be
    its setting; `where(name)` names it as the user wrote it (`--max-num-seqs`, `preset X:
    engine_args.max_num_seqs`)."""
    for name, value in values.items():
        problem = setting_problem(name, value)
        if problem is not None:
            default = f"pass {where(name)} as an integer from 1 to 2^63 - 1" if name in INTEGER_SETTINGS else ""
            raise UsageError(f"{where(name)} {problem}", _SETTING_HINTS.get(name, default or "pass a value in range"))


_SETTING_HINTS = {
    "gpu_memory_gib": "pass the GPU's memory: --gpu-memory 80 (GiB), 80GB, 80GiB or 81920MiB",
    "gpu_memory_utilization": "pass a fraction above 0 and at most 1, such as 0.9",
    "num_speculative_tokens": "pass -k with the K to serve, such as -k 7",
}


# --- model dimensions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionDims(JsonDocument):
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


def target_dims(target: TargetDescription, name: str) -> AttentionDims:
    """A view of the target's description (the text model's, for a multimodal target). Raises
    SourceError naming the key when its attention geometry could not be read."""
    target.require_attention()
    assert target.num_attention_heads is not None and target.num_key_value_heads is not None
    assert target.head_dim is not None
    return AttentionDims(
        name=name,
        num_hidden_layers=target.num_hidden_layers,
        num_attention_heads=target.num_attention_heads,
        num_key_value_heads=target.num_key_value_heads,
        head_dim=target.head_dim,
        vocab_size=target.vocab_size,
        layer_types=target.layer_types,
        sliding_window=target.sliding_window,
        dtype=target.dtype,
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


def _config_dtype(config: dict[str, Any]) -> str | None:
    value = config.get("torch_dtype", config.get("dtype"))
    return value.removeprefix("torch.") if isinstance(value, str) else None


# --- the token budget --------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenBudget(JsonDocument):
    max_num_seqs: int
    num_speculative_tokens: int
    sample_from_anchor: bool = field(metadata=json_rules(name="layout", encode=layout_name))
    num_query_tokens: int
    required: int = field(
        metadata=json_rules(name="required_max_num_batched_tokens")
    )  # max_num_seqs x num_query_tokens
    max_num_batched_tokens: int | None
    ok: bool
    message: str


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


# --- tensor parallelism ------------------------------------------------------------------------


def padded_vocab(vocab_size: int, pad_to: int = VOCAB_PADDING) -> int:
    """The embedding / LM-head rows vLLM allocates (`pad_vocab_size`)."""
    return (vocab_size + pad_to - 1) // pad_to * pad_to


@dataclass(frozen=True)
class TensorParallelProblem(JsonDocument):
    model: str
    key: str
    message: str


@dataclass(frozen=True)
class VocabSplit(JsonDocument):
    model: str
    vocab_size: int
    padded: int = field(metadata=json_rules(name="padded_vocab_size"))
    rows_per_rank: int | None  # None when the padded rows do not split evenly

    json_keys: ClassVar[tuple[str, ...]] = ("model", "vocab_size", "padded_vocab_size", "padding_rows", "rows_per_rank")
    json_properties: ClassVar[Mapping[str, str]] = {"padding_rows": "padding_rows"}

    @property
    def padding_rows(self) -> int:
        return self.padded - self.vocab_size


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
class TensorParallelCheck(JsonDocument):
    tensor_parallel_size: int
    draft_tensor_parallel_size: int
    problems: tuple[TensorParallelProblem, ...]
    vocab: tuple[VocabSplit, ...]

    json_keys: ClassVar[tuple[str, ...]] = (
        "tensor_parallel_size",
        "draft_tensor_parallel_size",
        "ok",
        "problems",
        "vocab",
    )
    json_properties: ClassVar[Mapping[str, str]] = {"ok": "ok"}

    @property
    def ok(self) -> bool:
        return not self.problems


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
