"""Target models and the presets' Hub repos, as config.json plus sparse safetensors, for offline tests.

The serving plan reads a target's config and tensor headers (never weights); its tests and the
real-vLLM tier need the presets' targets and drafts without the network. Each is written as a
folder (`write_target`, `testing.write_checkpoint`) or as a repo in a Hugging Face cache folder
(`write_hub_cache`), which the reading layer and vLLM both find with `HF_HUB_OFFLINE=1`.

Qwen/Qwen3-8B is its published config. Qwen/Qwen3.8-27B is a stand-in: what the drafts published
for it say (64 layers, hidden 5120, vocabulary 248320, bfloat16) on a dense Qwen3 attention
layout of 24 query and 4 KV heads of 256; its real config is not in this repository's data, and
vLLM's CPU tier cannot build the hybrid (linear attention) models of that family.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dflash_tools_testing import (
    QWEN3_8B_DFLASH_B16,
    QWEN38_27B_DFLASH2,
    QWEN38_27B_DFLASH2_ANCHOR,
    TensorSpec,
    write_checkpoint,
    write_json,
    write_safetensors,
)

QWEN3_8B: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}

QWEN38_27B_STAND_IN: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "head_dim": 256,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "max_position_embeddings": 262144,
    "model_type": "qwen3",
    "num_attention_heads": 24,
    "num_hidden_layers": 64,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 10000000.0, "rope_type": "default"},
    "tie_word_embeddings": False,
    "dtype": "bfloat16",
    "vocab_size": 248320,
}


def target_tensor_table(config: dict[str, Any], dtype: str = "BF16") -> list[TensorSpec]:
    """Every tensor of a dense Qwen3 checkpoint with `config`, spelled out here (not derived from
    the plan's arithmetic) so that tests compare the plan with an independent statement."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    inter, vocab = config["intermediate_size"], config["vocab_size"]
    table: list[TensorSpec] = [("model.embed_tokens.weight", dtype, (vocab, hidden))]
    for index in range(layers):
        prefix = f"model.layers.{index}."
        table += [
            (prefix + "input_layernorm.weight", dtype, (hidden,)),
            (prefix + "post_attention_layernorm.weight", dtype, (hidden,)),
            (prefix + "self_attn.q_proj.weight", dtype, (heads * head_dim, hidden)),
            (prefix + "self_attn.k_proj.weight", dtype, (kv_heads * head_dim, hidden)),
            (prefix + "self_attn.v_proj.weight", dtype, (kv_heads * head_dim, hidden)),
            (prefix + "self_attn.o_proj.weight", dtype, (hidden, heads * head_dim)),
            (prefix + "self_attn.q_norm.weight", dtype, (head_dim,)),
            (prefix + "self_attn.k_norm.weight", dtype, (head_dim,)),
            (prefix + "mlp.gate_proj.weight", dtype, (inter, hidden)),
            (prefix + "mlp.up_proj.weight", dtype, (inter, hidden)),
            (prefix + "mlp.down_proj.weight", dtype, (hidden, inter)),
        ]
    table.append(("model.norm.weight", dtype, (hidden,)))
    if not config.get("tie_word_embeddings"):
        table.append(("lm_head.weight", dtype, (vocab, hidden)))
    return table


def write_target(folder: Path, config: dict[str, Any]) -> Path:
    """config.json and a sparse model.safetensors with the whole tensor table (zeros: no disk)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", config)
    write_safetensors(folder / "model.safetensors", target_tensor_table(config))
    return folder


# The Hub repos the presets (configs/presets) name, and how to write each.
PRESET_REPOS: dict[str, Callable[[Path], Path]] = {
    "Qwen/Qwen3.8-27B": lambda folder: write_target(folder, QWEN38_27B_STAND_IN),
    "z-lab/Qwen3.8-27B-DFlash2": lambda folder: write_checkpoint(folder, "zlab-dflash2", QWEN38_27B_DFLASH2),
    "DaoCloud/Qwen3.8-27B-DFlash2-Exp": lambda folder: write_checkpoint(
        folder, "zlab-dflash2", QWEN38_27B_DFLASH2_ANCHOR
    ),
    "Qwen/Qwen3-8B": lambda folder: write_target(folder, QWEN3_8B),
    "z-lab/Qwen3-8B-DFlash-b16": lambda folder: write_checkpoint(folder, "zlab-dflash", QWEN3_8B_DFLASH_B16),
}


def write_hub_cache(cache: Path, repo_ids: list[str] | None = None) -> Path:
    """The presets' repos in a Hugging Face cache folder (`HF_HUB_CACHE`), as `hf_hub_download`
    leaves them: `models--ORG--NAME/refs/main` naming a snapshot folder that holds the files."""
    for repo_id in repo_ids or list(PRESET_REPOS):
        commit = hashlib.sha1(repo_id.encode()).hexdigest()
        repo = cache / ("models--" + repo_id.replace("/", "--"))
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(commit, encoding="utf-8")
        PRESET_REPOS[repo_id](repo / "snapshots" / commit)
    return cache
