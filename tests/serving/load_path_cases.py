"""Draft configs for the load-path steps of the engine columns (config resolution, filled defaults).

Copies of real configs nobody on this team wrote, each with its source, and minimal variants made
from them or from the bundled examples (each says what it changes). The default suite
(tests/serving/test_load_path.py) checks the columns on them; the tiers run the same configs
through the real transformers (and vLLM's `get_config`) and compare (tests/real_vllm/
test_generated_tables.py, tests/real_sglang/test_sglang_config_loading.py).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.engine_cases import example_drafts

Config = dict[str, Any]

# Copy of lightseekorg/TorchSpec torchspec/config/dflash_draft_config.json at commit
# 367846def3da3b570ca29b7315e280c62c931565 (TorchSpec's own DFlash draft config: model_type "dflash").
TORCHSPEC_DFLASH: Config = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "dflash",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 1,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "num_target_layers": 5,
    "target_hidden_size": 3584,
    "target_num_hidden_layers": 28,
    "target_layer_ids": None,
    "mask_token_id": 151669,
    "tie_word_embeddings": False,
}

# Copy of lightseekorg/TorchSpec torchspec/config/dspark_draft_config.json at commit
# 17037f58ba2e4c1700ce81e83875fe2e7f4c32ef (model_type "dspark").
TORCHSPEC_DSPARK: Config = {
    "architectures": ["Qwen3DSparkModel"],
    "model_type": "dspark",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 5,
    "num_draft_layers": 5,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "tie_word_embeddings": False,
    "block_size": 7,
    "num_anchors": 512,
    "mask_token_id": 151669,
    "target_layer_ids": [1, 9, 17, 25, 33],
    "markov_rank": 256,
    "markov_head_type": "vanilla",
    "enable_confidence_head": True,
    "confidence_head_with_markov": True,
}

# Copy of lightseekorg/TorchSpec torchspec/config/domino_draft_config.json at commit
# afe66884e7b71e87be2e428baf5731de243bd41b (model_type "domino").
TORCHSPEC_DOMINO: Config = {
    "architectures": ["DominoDraftModel"],
    "model_type": "domino",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 5,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 151936,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "num_target_layers": 5,
    "target_hidden_size": 4096,
    "target_num_hidden_layers": 36,
    "target_layer_ids": [1, 9, 17, 25, 33],
    "mask_token_id": 151669,
    "gru_hidden_size": 1024,
    "correction_rank": 256,
    "tie_word_embeddings": False,
}

# Copy of z-lab/gpt-oss-20b-DFlash's config.json as quoted (a literal, "as shipped 2026-04-20")
# in osaurus-ai/vmlx-swift-lm Tests/MLXLMTests/DFlashDrafterForwardTests.swift at commit
# 57e3570cc96b5420c9ba0011282780cab04c9651: model_type "gpt_oss", no layer_types, no
# sliding_window, no rope_scaling. The quote may be trimmed; only what it states is used here.
ZLAB_GPT_OSS_DFLASH: Config = {
    "architectures": ["DFlashDraftModel"],
    "attention_bias": True,
    "attention_dropout": 0.0,
    "block_size": 8,
    "bos_token_id": 199998,
    "dflash_config": {"mask_token_id": 200000, "target_layer_ids": [1, 6, 11, 16, 21]},
    "dtype": "bfloat16",
    "eos_token_id": 200002,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2880,
    "initial_context_length": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 7680,
    "max_position_embeddings": 131072,
    "model_type": "gpt_oss",
    "num_attention_heads": 64,
    "num_hidden_layers": 8,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-5,
    "rope_theta": 150000,
    "vocab_size": 201088,
}


def example_config(name: str) -> Config:
    config: Config = json.loads((example_drafts()[name] / "config.json").read_text())
    return config


def _without(config: Config, *keys: str) -> Config:
    out = copy.deepcopy(config)
    for key in keys:
        out.pop(key, None)
    return out


def cases() -> dict[str, Config]:
    """Every config of this module by name: the copies and the variants."""
    zlab = example_config("zlab-dflash")
    return {
        "torchspec-dflash": TORCHSPEC_DFLASH,
        "torchspec-dspark": TORCHSPEC_DSPARK,
        "torchspec-domino": TORCHSPEC_DOMINO,
        "zlab-gpt-oss-dflash": ZLAB_GPT_OSS_DFLASH,
        # The gpt-oss draft stating what GptOssConfig would otherwise fill (full attention, no scaling).
        "zlab-gpt-oss-dflash-stated": {
            **ZLAB_GPT_OSS_DFLASH,
            "layer_types": ["full_attention"] * 8,
            "sliding_window": None,
            "rope_scaling": {"rope_type": "default"},
        },
        # The bundled z-lab example without its model_type.
        "zlab-no-model-type": _without(zlab, "model_type"),
        # The bundled speculators example as it is: no model_type, a speculators_config.
        "speculators-no-model-type": example_config("speculators-dflash"),
        # The bundled z-lab example (Qwen3) without layer_types, and asking Qwen3Config for
        # sliding layers: Qwen3Config computes them from keys the file sets.
        "zlab-qwen3-sliding-no-layer-types": {
            **_without(zlab, "layer_types"),
            "use_sliding_window": True,
            "max_window_layers": 1,
            "sliding_window": 64,
        },
        # An unknown model_type whose config class the repository would supply (remote code).
        "torchspec-dflash-auto-map": {
            **TORCHSPEC_DFLASH,
            "auto_map": {"AutoConfig": "configuration_dflash.DFlashConfig"},
        },
        # The z-lab example declared mistral with layer_types: transformers reads it as ministral.
        "zlab-mistral-layer-types": {**zlab, "model_type": "mistral"},
    }


def corpus_and_cases() -> dict[str, Config]:
    """The cases above, the edge cases of the engine tests, every bundled example draft and
    every corpus file, by name."""
    from tests.corpus.entries import ENTRIES
    from tests.engine_cases import edge_configs

    out = {f"case:{name}": config for name, config in cases().items()}
    out.update({f"edge:{name}": config for name, config in edge_configs().items()})
    out.update({f"example:{name}": example_config(name) for name in example_drafts()})
    out.update({f"corpus:{entry.dir}": entry.config() for entry in ENTRIES})
    return out


def disagreements(resolution: Any, reading: dict[str, Any]) -> list[str]:
    """Where a column's resolution (`config_loading.resolve`, from the generated table) differs
    from what transformers' AutoConfig did with the same config (`transformers_probe.read`).
    Resolutions by an engine's own class (vLLM's speculators translation and registry, SGLang's
    registry) are not transformers' to answer and give none."""
    engine_class = resolution.error is None and not resolution.by_transformers
    if engine_class:
        return []
    if (resolution.error is None) != ("error" not in reading):
        return [f"table: {resolution.error or 'loads'}; transformers: {reading.get('error', 'loads')}"]
    if resolution.error is not None:
        return []
    out = []
    if resolution.config_class != f"transformers' {reading['class']}":
        out.append(f"class: table {resolution.config_class}, transformers {reading['class']}")
    filled = dict(reading["filled"])
    if isinstance(filled.get("rope_parameters"), dict) and reading.get("theta") is not None:
        filled["rope_parameters"] = {**filled["rope_parameters"], "rope_theta": reading["theta"]}
    for key in sorted(set(filled) | set(resolution.filled)):
        if key in resolution.not_tabulated or "*" in resolution.not_tabulated:
            continue
        ours, theirs = resolution.filled.get(key, "<not filled>"), filled.get(key, "<not filled>")
        if json.dumps(ours, sort_keys=True) != json.dumps(theirs, sort_keys=True):
            out.append(f"{key}: table {resolution.filled.get(key, '<not filled>')!r}, transformers {filled.get(key)!r}")
    return out
