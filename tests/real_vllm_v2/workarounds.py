"""The named work-arounds that let vLLM's V2 DFlash code run on a CPU, one table per vLLM version.

Each entry works around one place where vLLM assumes a CUDA device or its own compiled extension
(`vllm._C`, absent from the PyPI wheel on a CPU-only machine). They are applied in the V2 tier's
child process only (`harness.py`), never in the plugin or the product. docs/tier-vllm-v2.md lists
them with the same names; `test_docs.py` checks that the two lists agree.

A vLLM release without a row here is refused with a message naming this file: supporting one is
adding its row (copy the previous release's, then run the tier and adjust what breaks).

Imports: torch and vLLM, inside `apply` only (the parent test process imports this module for
the names).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Workaround:
    """One named change to the test process; `env` is set before vLLM is imported, `patch` after."""

    name: str
    where: str  # the vLLM file (or torch call) whose assumption it works around
    why: str
    env: dict[str, str] = field(default_factory=dict)
    patch: Callable[[], None] | None = None


def _no_accelerator_empty_cache() -> None:
    import torch

    # The model loader calls it after loading weights; on a CPU-only torch it raises
    # "Cannot access accelerator device when none is available".
    torch.accelerator.empty_cache = lambda: None


def _triton_attention_on_cpu() -> None:
    from vllm.platforms.cpu import CpuPlatform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    def get_attn_backend_cls(cls: Any, *args: Any, **kwargs: Any) -> str:
        path: str = AttentionBackendEnum.TRITON_ATTN.get_path()
        return path

    CpuPlatform.get_attn_backend_cls = classmethod(get_attn_backend_cls)  # type: ignore[method-assign,assignment]


def _no_uva() -> None:
    import vllm.v1.worker.gpu.buffer_utils as buffer_utils

    # vLLM's own fallback for platforms without pinned memory (NonUvaBuffer).
    buffer_utils.is_uva_available = lambda: False


def _torch_custom_ops() -> None:
    """Plain-torch stand-ins for the two `vllm._C` ops the draft's context K/V precompute and the
    CPU rotary-embedding path call. Test code, not vLLM's: RMSNorm as in any Qwen3 (the weight is
    per layer when it is 2-D, as `_normalize_context_k` passes it), RoPE through vLLM's own
    `RotaryEmbedding.forward_static`, both in place like the ops they replace."""
    import torch
    import vllm._custom_ops as custom_ops
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    def rms_norm(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
        values = x.float()
        normed = values * torch.rsqrt(values.pow(2).mean(-1, keepdim=True) + epsilon)
        if weight.dim() == 2:  # one row per layer, x is [layers, ...]
            weight = weight.view(weight.shape[0], *([1] * (x.dim() - 2)), weight.shape[-1])
        out.copy_((normed * weight.float()).to(out.dtype))

    def rotary_embedding(
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor | None,
        head_size: int,
        cos_sin_cache: torch.Tensor,
        is_neox: bool,
    ) -> None:
        rotated_query, rotated_key = RotaryEmbedding.forward_static(
            positions, query, key, head_size, cos_sin_cache.shape[-1], cos_sin_cache, is_neox
        )
        query.copy_(rotated_query)
        if key is not None and rotated_key is not None:
            key.copy_(rotated_key)

    custom_ops.rms_norm = rms_norm
    custom_ops.rotary_embedding = rotary_embedding


def _interpreter_bool_masks() -> None:
    import numpy as np
    import triton.runtime.interpreter as interpreter

    # `mask & valid` of an int1 block and a loaded int1 scalar reaches the interpreter's masked
    # load as int32 0/1 data, which its C++ load refuses ("mask has unsupported dtype"). A mask is
    # a predicate: nonzero is true, which is what the GPU backends compute.
    load, store = interpreter._interpreter.load, interpreter._interpreter.store

    def as_bool(mask: Any) -> Any:
        return mask if mask.dtype == np.bool_ else mask != 0

    interpreter._interpreter.load = lambda pointers, mask, other, dtype: load(pointers, as_bool(mask), other, dtype)
    interpreter._interpreter.store = lambda pointers, values, mask: store(pointers, values, as_bool(mask))


def _two_d_attention_only() -> None:
    from vllm.v1.attention.backends.triton_attn import TritonAttentionMetadataBuilder

    original = TritonAttentionMetadataBuilder.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        # Batches above this many query blocks take the 2D kernel; 0 sends every batch there.
        self.seq_threshold_3D = 0

    TritonAttentionMetadataBuilder.__init__ = __init__  # type: ignore[method-assign]


def _fixed_device_capability() -> None:
    import torch

    # Only chooses a tile size for the cache-write kernel; any answer gives the same cache.
    torch.cuda.get_device_capability = lambda device=None: (9, 0)


V0_33_0 = (
    Workaround(
        "keep-real-triton",
        "vllm/triton_utils/importing.py",
        "with no active Triton driver vLLM swaps triton for a placeholder; an empty "
        "CUDA_VISIBLE_DEVICES makes it take the lenient 'distributed environment' branch and keep the "
        "real module, whose interpreter then runs every kernel",
        env={"CUDA_VISIBLE_DEVICES": ""},
    ),
    Workaround(
        "no-accelerator-empty-cache",
        "vllm/model_executor/model_loader/base_loader.py",
        "torch.accelerator.empty_cache() raises on a CPU-only torch after weights are loaded; made a no-op",
        patch=_no_accelerator_empty_cache,
    ),
    Workaround(
        "triton-attention-on-cpu",
        "vllm/platforms/cpu.py",
        "the CPU platform always picks CPU_ATTN, whose ops live in vLLM's CPU build (vllm._C); "
        "TRITON_ATTN runs under the interpreter and supports the drafts' non-causal attention",
        patch=_triton_attention_on_cpu,
    ),
    Workaround(
        "no-uva",
        "vllm/v1/worker/gpu/buffer_utils.py",
        "UVA is reported available and pin_memory=True then fails without a GPU; vLLM's own "
        "non-UVA fallback buffers are used instead",
        patch=_no_uva,
    ),
    Workaround(
        "torch-custom-ops",
        "vllm/_custom_ops.py (rms_norm, rotary_embedding)",
        "vllm._C is not in the PyPI wheel on CPU; the draft's context K/V precompute "
        "(qwen3_dflash.py) and CPU RoPE call these two ops, replaced by plain-torch stand-ins (test code)",
        patch=_torch_custom_ops,
    ),
    Workaround(
        "fixed-device-capability",
        "vllm/v1/attention/ops/triton_reshape_and_cache_flash.py",
        "asks torch.cuda.get_device_capability() to size a tile; answered (9, 0)",
        patch=_fixed_device_capability,
    ),
    Workaround(
        "two-d-attention-only",
        "vllm/v1/attention/backends/triton_attn.py (TritonAttentionMetadataBuilder.seq_threshold_3D)",
        "speed only: small causal batches (the target's verification) take TRITON_ATTN's split-softmax 3D "
        "kernel, 16 segments plus a reduction, about 10x the interpreted programs of the 2D kernel that "
        "prefill and the non-causal drafts use; the threshold is set to 0 so every batch takes the 2D one",
        patch=_two_d_attention_only,
    ),
    Workaround(
        "interpreter-bool-masks",
        "triton/runtime/interpreter.py (Triton 3.9.0), hit by DFlash2's _selector_walk_kernel",
        "the interpreter hands `mask & valid` (an int1 block and a loaded int1 scalar) to its masked "
        "load as int32 data and refuses it; masks are turned into booleans (nonzero is true)",
        patch=_interpreter_bool_masks,
    ),
)

# 0.34.0 needs the same eight (each left out in turn fails or, two-d-attention-only, runs slower),
# probed with the stock speculator; anchor-first drafts there wait for the plugin's support.
V0_34_0 = V0_33_0

WORKAROUNDS: dict[str, tuple[Workaround, ...]] = {"0.33.0": V0_33_0, "0.34.0": V0_34_0}


class UnsupportedVllm(RuntimeError):
    pass


def for_version(vllm_version: str) -> tuple[Workaround, ...]:
    try:
        return WORKAROUNDS[vllm_version]
    except KeyError:
        known = ", ".join(sorted(WORKAROUNDS))
        raise UnsupportedVllm(
            f"the V2 tier has no work-around table for vLLM {vllm_version} (it has: {known}); "
            "add one in tests/real_vllm_v2/workarounds.py"
        ) from None
