"""What the two planted-pattern demos (`engine_demo`, `vllm_cpu_demo`) build the same way.

numpy only (no torch). Both write a tiny Hugging Face Qwen3ForCausalLM target with a character
tokenizer and z-lab DFlash drafts; they differ in head_dim, the pattern and how the draft copies.
This module holds the shape they share, the target's layers, the draft's `DraftSpec` and the
file writing, so each demo states only its pattern and its draft construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import dflash_tools_testing as testing


@dataclass(frozen=True)
class DemoShape:
    """Dimensions of a demo target + draft pair; each demo subclasses it with its own defaults."""

    vocab_size: int = 128
    hidden_size: int = 64
    target_layers: int = 4
    target_heads: int = 4
    target_kv_heads: int = 2
    head_dim: int = 16
    target_intermediate: int = 64
    draft_layers: int = 2
    draft_intermediate: int = 64
    target_layer_ids: tuple[int, ...] = (1, 2)
    rope_theta: float = 1_000_000.0

    @property
    def mask_token_id(self) -> int:
        return self.vocab_size - 1

    @property
    def eos_token_id(self) -> int:
        return self.vocab_size - 2


def successor_table(cycles: list[list[int]], vocab_size: int) -> np.ndarray:
    """The permutation whose cycles are `cycles` (tokens in none are fixed points): table[t] = T(t)."""
    table = np.arange(vocab_size)
    for cycle in cycles:
        for position, token in enumerate(cycle):
            table[token] = cycle[(position + 1) % len(cycle)]
    return table


def normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    """Gaussian weights of `scale`; zeros (drawing nothing from `rng`) when the scale is 0."""
    return rng.standard_normal(shape) * scale if scale else np.zeros(shape)


def target_config(shape: DemoShape, *, dtype: str, max_position_embeddings: int) -> dict[str, Any]:
    """A complete Hugging Face Qwen3 config.json (transformers 4.56+ and 5.x read it)."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "dtype": dtype,
        "eos_token_id": shape.eos_token_id,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "hidden_size": shape.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": shape.target_intermediate,
        "layer_types": ["full_attention"] * shape.target_layers,
        "max_position_embeddings": max_position_embeddings,
        "max_window_layers": shape.target_layers,
        "model_type": "qwen3",
        "num_attention_heads": shape.target_heads,
        "num_hidden_layers": shape.target_layers,
        "num_key_value_heads": shape.target_kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": shape.rope_theta, "rope_type": "default"},
        "rope_theta": shape.rope_theta,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": shape.vocab_size,
    }


def target_tensors(
    shape: DemoShape, embed: np.ndarray, head: np.ndarray, rng: np.random.Generator, *, noise: float
) -> dict[str, np.ndarray]:
    """Qwen3ForCausalLM weights around the pattern's `embed` and `head`. `noise` scales the layers'
    o_proj and down_proj (their only way into the residual stream): 0 makes every layer a no-op."""
    h, d = shape.hidden_size, shape.head_dim
    q, kv, inter = shape.target_heads * d, shape.target_kv_heads * d, shape.target_intermediate
    tensors: dict[str, np.ndarray] = {"model.embed_tokens.weight": embed}
    for layer in range(shape.target_layers):
        p = f"model.layers.{layer}."
        tensors.update(
            {
                p + "input_layernorm.weight": np.ones(h),
                p + "post_attention_layernorm.weight": np.ones(h),
                p + "self_attn.q_proj.weight": normal(rng, (q, h), 1 / np.sqrt(h)),
                p + "self_attn.k_proj.weight": normal(rng, (kv, h), 1 / np.sqrt(h)),
                p + "self_attn.v_proj.weight": normal(rng, (kv, h), 1 / np.sqrt(h)),
                p + "self_attn.o_proj.weight": normal(rng, (h, q), noise / np.sqrt(q)),
                p + "self_attn.q_norm.weight": np.ones(d),
                p + "self_attn.k_norm.weight": np.ones(d),
                p + "mlp.gate_proj.weight": normal(rng, (inter, h), 1 / np.sqrt(h)),
                p + "mlp.up_proj.weight": normal(rng, (inter, h), 1 / np.sqrt(h)),
                p + "mlp.down_proj.weight": normal(rng, (h, inter), noise / np.sqrt(inter)),
            }
        )
    tensors["model.norm.weight"] = np.ones(h)
    tensors["lm_head.weight"] = head
    return tensors


def draft_spec(
    shape: DemoShape,
    *,
    algorithm: str,
    sample_from_anchor: bool,
    num_speculative_tokens: int,
    dtype: str,
    verifier: str,
    **extra: Any,
) -> testing.DraftSpec:
    """The draft's `DraftSpec`: K in both layouts (block K + 1 bonus-anchor, block K anchor-first)."""
    k = num_speculative_tokens
    return testing.DraftSpec(
        algorithm=algorithm,
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.draft_layers,
        # As many KV heads as query heads: values and o_proj can then be exact identities.
        num_attention_heads=shape.hidden_size // shape.head_dim,
        num_key_value_heads=shape.hidden_size // shape.head_dim,
        head_dim=shape.head_dim,
        intermediate_size=shape.draft_intermediate,
        vocab_size=shape.vocab_size,
        target_layer_ids=shape.target_layer_ids,
        num_target_layers=shape.target_layers,
        block_size=k if sample_from_anchor else k + 1,
        sample_from_anchor=sample_from_anchor,
        mask_token_id=shape.mask_token_id,
        layer_types=("full_attention",) * shape.draft_layers,
        rope_theta=shape.rope_theta,
        dtype=dtype,
        verifier=verifier,
        **extra,
    )


def to_bf16_bytes(array: np.ndarray) -> bytes:
    """Round float32 to bfloat16 (nearest, ties to even) and return little-endian bytes."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def encode(array: np.ndarray, dtype: str) -> bytes:
    """A tensor's safetensors bytes in `dtype` (numpy has no bfloat16, so BF16 is rounded by hand)."""
    if dtype == "BF16":
        return to_bf16_bytes(array)
    if dtype == "F32":
        return np.ascontiguousarray(array, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(array, dtype="<f2").tobytes()
    if dtype == "I64":
        return np.ascontiguousarray(array, dtype="<i8").tobytes()
    if dtype == "BOOL":
        return np.ascontiguousarray(array, dtype=np.bool_).tobytes()
    raise ValueError(f"unsupported dtype {dtype}")


def tokenizer_files(shape: DemoShape) -> dict[str, dict[str, Any]]:
    """A character-level tokenizer for the demo target: token id = code point below the EOS id,
    anything else reads as "?". Plain `tokenizers` JSON, so writing it needs no library."""
    special = [(shape.eos_token_id, "<eos>"), (shape.mask_token_id, "<mask>")]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": token_id,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for token_id, content in special
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[\\s\\S]"}, "behavior": "Isolated", "invert": False},
        "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": {chr(i): i for i in range(shape.eos_token_id)}, "unk_token": "?"},
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<eos>",
        "unk_token": "?",
        "model_max_length": 4096,
        "chat_template": "{% for message in messages %}{{ message['content'] }}{% endfor %}",
    }
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": config}


def write_target(
    folder: Path, shape: DemoShape, tensors: dict[str, np.ndarray], config: dict[str, Any], *, dtype: str
) -> Path:
    """A Hugging Face Qwen3ForCausalLM folder: config.json, model.safetensors, a character tokenizer."""
    table = [(name, dtype, tuple(value.shape)) for name, value in tensors.items()]
    testing.write_safetensors(
        folder / "model.safetensors", table, data={n: encode(v, dtype) for n, v in tensors.items()}
    )
    testing.write_json(folder / "config.json", config)
    testing.write_json(
        folder / "generation_config.json", {"bos_token_id": 0, "eos_token_id": shape.eos_token_id, "do_sample": False}
    )
    for name, document in tokenizer_files(shape).items():
        testing.write_json(folder / name, document)
    return folder


def write_draft(
    folder: Path,
    dialect: str,
    dspec: testing.DraftSpec,
    tensors: dict[str, np.ndarray],
    *,
    config: dict[str, Any] | None = None,
) -> Path:
    """A draft checkpoint in `dialect`'s config form holding `tensors`, each in the dtype
    `testing.tensor_table(dspec)` gives it; every tensor the table names must be there."""
    table = testing.tensor_table(dspec)
    missing = [name for name, _, _ in table if name not in tensors]
    if missing:
        raise ValueError(f"no demo weights for {missing}")
    data = {name: encode(tensors[name], dtype) for name, dtype, _ in table}
    testing.write_checkpoint(folder, dialect, dspec, config=config, data=data)
    return folder
