"""Numerical building blocks shared by the draft and the built-in target (torch).

Conventions follow Hugging Face Qwen3 so that the built-in target reproduces transformers'
numbers: RMSNorm in float32 then cast back before the weight, rotate-half RoPE with inverse
frequencies computed in float32, attention scores and softmax in float32.
"""

from __future__ import annotations

from typing import Any

import torch

from dflash_tools.errors import OperationError


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    hidden = x.to(torch.float32)
    hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + eps)
    return weight * hidden.to(dtype)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight, bias)


def rope_inverse_frequencies(head_dim: int, rope: dict[str, Any], where: str) -> tuple[torch.Tensor, float]:
    """(inverse frequencies [head_dim/2] in float32, position scale) for the RoPE settings.

    Only the types whose frequencies are a closed form of theta are implemented; anything else is
    refused by name rather than silently run with the wrong rotation.
    """
    rope_type = rope.get("rope_type") or rope.get("type") or "default"
    scaling = rope.get("rope_scaling")
    if isinstance(scaling, dict):
        rope_type = scaling.get("rope_type") or scaling.get("type") or rope_type
    theta = rope.get("rope_theta")
    if not isinstance(theta, int | float) or isinstance(theta, bool) or theta <= 0:
        theta = 10_000.0
    factor = rope.get("partial_rotary_factor", 1.0)
    if factor not in (None, 1, 1.0):
        raise OperationError(f"{where}: partial_rotary_factor {factor} is not supported by the torch engine", "")
    position_scale = 1.0
    if rope_type == "linear":
        source = scaling if isinstance(scaling, dict) else rope
        position_scale = 1.0 / float(source.get("factor", 1.0))
    elif rope_type != "default":
        raise OperationError(
            f"{where}: rope_type {rope_type!r} is not supported by the torch engine (default and linear are)",
            "use --runtime vllm for this checkpoint",
        )
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim
    return 1.0 / (float(theta) ** exponents), position_scale


def rope_cos_sin(
    positions: torch.Tensor, inverse_frequencies: torch.Tensor, position_scale: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [n, head_dim] for integer positions [n]."""
    freqs = positions.to(torch.float32)[:, None] * position_scale * inverse_frequencies.to(positions.device)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [heads, n, head_dim]; cos/sin [n, head_dim]."""
    return x * cos[None] + rotate_half(x) * sin[None]


def attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """Grouped-query attention. queries [nh, nq, d], keys/values [nkv, nk, d], allowed [nq, nk] bool.

    Returns [nq, nh * d]. A query row with no allowed key gets zeros.
    """
    num_heads, num_kv = queries.shape[0], keys.shape[0]
    if num_heads != num_kv:
        repeat = num_heads // num_kv
        keys = keys.repeat_interleave(repeat, dim=0)
        values = values.repeat_interleave(repeat, dim=0)
    scores = torch.matmul(queries.to(torch.float32), keys.to(torch.float32).transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed[None], float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)
    out = torch.matmul(weights.to(values.dtype), values)
    return out.transpose(0, 1).reshape(queries.shape[1], num_heads * queries.shape[2])


def silu_mlp(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    return linear(torch.nn.functional.silu(linear(x, gate)) * linear(x, up), down)


def resolve_dtype(name: str | None, device: torch.device) -> torch.dtype:
    """The compute dtype: float32 on CPU and bfloat16 on accelerators unless the request says."""
    if name is None or name == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    table = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "float": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
        "half": torch.float16,
        "float64": torch.float64,
    }
    if name not in table:
        raise OperationError(
            f"dtype {name!r} is not one of {', '.join(sorted(table))}", "pass --dtype bfloat16, float16 or float32"
        )
    return table[name]


def resolve_device(name: str | None) -> torch.device:
    if name is None or name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise OperationError(f"device {name!r} is not a torch device", "pass --device cpu or --device cuda") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise OperationError(f"device {name!r} requested but torch sees no CUDA device", "pass --device cpu")
    return device


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so wall-clock timings mean what they say."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
