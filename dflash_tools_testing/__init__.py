"""Fixture factory: real draft checkpoints of every dialect, in tiny or published shapes.

Used by the test suite, the benchmarks and to regenerate the bundled examples. It lives in the
checkout beside `dflash_tools/`, not in the wheel: nothing in the package imports it, and its
demo training (torch) is maintenance, not something the tool does for its users. An editable
install (`pip install -e .`) puts it on the path; the bundled examples it writes ship in the
wheel (`dflash_tools/examples/`). Configs are written
the way each dialect's own tools write them; tensor tables are spelled out here independently of
`dflash_tools.draft.tensors`, so the checker is tested against an independent statement of the layout.
Files are sparse by default: a 60 GB checkpoint costs no disk.

`demos/` writes the tiny target and drafts of the no-network CPU demos: planted ones (numpy only)
and the bundled trained ones (torch, inside functions).

Imports (from `dflash_tools`): `reading` (`safetensors_header` to encode headers, `local` for the examples folder);
`demos/` also `reference_engine` (its arithmetic to train the demo drafts, its engine to measure
them). `python -m dflash_tools_testing` regenerates the bundled examples.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dflash_tools.reading.safetensors_header import encode_header

TensorSpec = tuple[str, str, tuple[int, ...]]


@dataclass(frozen=True)
class DraftSpec:
    """What a fixture draft is; `sample_from_anchor=None` leaves the key out of the config."""

    algorithm: str = "dflash"
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    vocab_size: int = 512
    draft_vocab_size: int | None = None
    target_layer_ids: tuple[int, ...] = (1, 3)
    num_target_layers: int = 5
    block_size: int = 8
    sample_from_anchor: bool | None = False
    mask_token_id: int = 500
    conv_kernel_size: int = 2
    conv_group_size: int = 16
    selector_rank: int = 16
    selector_top_k: int = 4
    markov_rank: int = 16
    layer_types: tuple[str, ...] | None = ("sliding_attention", "sliding_attention")
    sliding_window: int = 2048
    rope_theta: float = 1_000_000.0
    attention_bias: bool = False
    dtype: str = "BF16"
    with_embed_tokens: bool = False
    verifier: str = "Qwen/Qwen3-Tiny"
    extra_config: dict[str, Any] = field(default_factory=dict)

    @property
    def full_vocab(self) -> bool:
        return self.draft_vocab_size is None or self.draft_vocab_size == self.vocab_size

    @property
    def k_max(self) -> int:
        return self.block_size if self.sample_from_anchor else self.block_size - 1


TINY = DraftSpec()
TINY_DFLASH2 = DraftSpec(algorithm="dflash2")
TINY_DSPARK = DraftSpec(algorithm="dspark", block_size=7, sample_from_anchor=True)

# z-lab/Qwen3.8-27B-DFlash2 as published: 81 tensors, 1,924,404,480 parameters.
QWEN38_27B_DFLASH2 = DraftSpec(
    algorithm="dflash2",
    hidden_size=5120,
    num_hidden_layers=5,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=17408,
    vocab_size=248320,
    target_layer_ids=(5, 19, 33, 47, 61),
    num_target_layers=64,
    block_size=8,
    sample_from_anchor=None,
    mask_token_id=248070,
    conv_kernel_size=2,
    conv_group_size=16,
    selector_rank=256,
    selector_top_k=16,
    layer_types=("sliding_attention",) * 5,
    rope_theta=10_000_000.0,
)
# DaoCloud/Qwen3.8-27B-DFlash2-Exp: same weights' shapes, anchor-first with block 7.
QWEN38_27B_DFLASH2_ANCHOR = replace(QWEN38_27B_DFLASH2, block_size=7, sample_from_anchor=True)
# z-lab/Qwen3-8B-DFlash-b16: 58 tensors.
QWEN3_8B_DFLASH_B16 = DraftSpec(
    algorithm="dflash",
    hidden_size=4096,
    num_hidden_layers=5,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=12288,
    vocab_size=151936,
    target_layer_ids=(1, 9, 17, 25, 33),
    num_target_layers=36,
    block_size=16,
    sample_from_anchor=None,
    mask_token_id=151669,
    layer_types=None,
)


def tensor_table(spec: DraftSpec) -> list[TensorSpec]:
    """Every tensor a complete checkpoint of `spec` stores, in a natural order."""
    h, d, dt = spec.hidden_size, spec.head_dim, spec.dtype
    q, kv, i_size = spec.num_attention_heads * d, spec.num_key_value_heads * d, spec.intermediate_size
    out: list[TensorSpec] = []
    for layer in range(spec.num_hidden_layers):
        p = f"layers.{layer}."
        out += [
            (p + "input_layernorm.weight", dt, (h,)),
            (p + "post_attention_layernorm.weight", dt, (h,)),
            (p + "self_attn.q_proj.weight", dt, (q, h)),
            (p + "self_attn.k_proj.weight", dt, (kv, h)),
            (p + "self_attn.v_proj.weight", dt, (kv, h)),
            (p + "self_attn.o_proj.weight", dt, (h, q)),
            (p + "self_attn.q_norm.weight", dt, (d,)),
            (p + "self_attn.k_norm.weight", dt, (d,)),
            (p + "mlp.gate_proj.weight", dt, (i_size, h)),
            (p + "mlp.up_proj.weight", dt, (i_size, h)),
            (p + "mlp.down_proj.weight", dt, (h, i_size)),
        ]
        if spec.attention_bias:
            out += [(p + f"self_attn.{n}_proj.bias", dt, (s,)) for n, s in (("q", q), ("k", kv), ("v", kv), ("o", h))]
        if spec.algorithm == "dflash2":
            groups = h // spec.conv_group_size
            for conv in ("attention_conv", "mlp_conv"):
                out += [
                    (f"{p}{conv}.base_kernel", dt, (2, spec.conv_kernel_size, h)),
                    (f"{p}{conv}.kernel_projection.weight", dt, (2 * spec.conv_kernel_size * groups, h)),
                ]
    out += [
        ("fc.weight", dt, (h, len(spec.target_layer_ids) * h)),
        ("hidden_norm.weight", dt, (h,)),
        ("norm.weight", dt, (h,)),
    ]
    if spec.with_embed_tokens:
        out.append(("embed_tokens.weight", dt, (spec.vocab_size, h)))
    if not spec.full_vocab:
        assert spec.draft_vocab_size is not None
        out += [
            ("lm_head.weight", dt, (spec.draft_vocab_size, h)),
            ("d2t", "I64", (spec.draft_vocab_size,)),
            ("t2d", "BOOL", (spec.vocab_size,)),
        ]
    if spec.algorithm == "dflash2":
        out += [
            ("candidate_selector.hidden_projection.weight", dt, (spec.selector_rank, h)),
            ("candidate_selector.predecessor_codebook", dt, (spec.vocab_size, spec.selector_rank)),
            ("candidate_selector.successor_codebook", dt, (spec.vocab_size, spec.selector_rank)),
        ]
    if spec.algorithm == "dspark" and spec.markov_rank:
        vd = spec.draft_vocab_size or spec.vocab_size
        out += [
            ("markov_head.markov_w1.weight", dt, (spec.vocab_size, spec.markov_rank)),
            ("markov_head.markov_w2.weight", dt, (vd, spec.markov_rank)),
            ("confidence_head.proj.weight", dt, (1, h + spec.markov_rank)),
            ("confidence_head.proj.bias", dt, (1,)),
        ]
    return out


def _decoder(spec: DraftSpec) -> dict[str, Any]:
    layer_types = (
        list(spec.layer_types)[: spec.num_hidden_layers]
        if spec.layer_types
        else ["full_attention"] * spec.num_hidden_layers
    )
    layer_types += ["sliding_attention"] * (spec.num_hidden_layers - len(layer_types))
    return {
        "attention_bias": spec.attention_bias,
        "attention_dropout": 0.0,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "layer_types": layer_types,
        "max_position_embeddings": 40960,
        "model_type": "qwen3",
        "num_attention_heads": spec.num_attention_heads,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_key_value_heads": spec.num_key_value_heads,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": spec.rope_theta, "rope_type": "default"},
        "sliding_window": spec.sliding_window,
        "tie_word_embeddings": False,
        "use_sliding_window": "sliding_attention" in layer_types,
        "vocab_size": spec.vocab_size,
    }


def make_config(dialect: str, spec: DraftSpec, *, block_size_location: str = "dflash_config") -> dict[str, Any]:
    """A config.json in `dialect`'s own form. `block_size_location` (z-lab DFlash): top, dflash_config, both."""
    config = _BUILDERS[dialect](dialect, spec, block_size_location)
    config.update(spec.extra_config)
    return config


def _zlab(dialect: str, spec: DraftSpec, block_size_location: str) -> dict[str, Any]:
    dflash2 = dialect == "zlab-dflash2"
    config: dict[str, Any] = {
        "architectures": ["DFlash2DraftModel" if dflash2 else "DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlash2DraftModel" if dflash2 else "dflash.DFlashDraftModel"},
        "bos_token_id": None,
        "dtype": "bfloat16",
        "eos_token_id": 1,
    }
    if dflash2:
        config["is_causal"] = False
    config.update(_decoder(spec))
    config["num_target_layers"] = spec.num_target_layers
    dflash: dict[str, Any] = {}
    if dflash2 or block_size_location in ("dflash_config", "both"):
        dflash["block_size"] = spec.block_size
    if not dflash2 and block_size_location in ("top", "both"):
        config["block_size"] = spec.block_size
    dflash["mask_token_id"] = spec.mask_token_id
    dflash["target_layer_ids"] = list(spec.target_layer_ids)
    if dflash2:
        dflash.update(
            conv_kernel_size=spec.conv_kernel_size,
            conv_group_size=spec.conv_group_size,
            selector_rank=spec.selector_rank,
            selector_top_k=spec.selector_top_k,
        )
    if spec.sample_from_anchor is not None:
        dflash["sample_from_anchor"] = spec.sample_from_anchor
    config["dflash_config"] = dflash
    config["transformers_version"] = "5.15.0"
    return config


def _speculators(dialect: str, spec: DraftSpec, _location: str) -> dict[str, Any]:
    kind = dialect.split("-", 1)[1]
    arch = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel", "dspark": "DSparkDraftModel"}[kind]
    config_class = {
        "dflash": "DFlashSpeculatorConfig",
        "dflash2": "DFlash2SpeculatorConfig",
        "dspark": "DSparkSpeculatorConfig",
    }[kind]
    sfa = spec.sample_from_anchor
    config: dict[str, Any] = {
        "architectures": [arch],
        "auto_map": {"": f"config.{config_class}"},
        "aux_hidden_state_layer_ids": [i + 1 for i in spec.target_layer_ids],
        "block_size": spec.block_size,
        "draft_vocab_size": spec.draft_vocab_size or spec.vocab_size,
        "dtype": "bfloat16",
        "mask_token_id": spec.mask_token_id,
    }
    if kind == "dflash2":
        config.update(
            conv_group_size=spec.conv_group_size,
            conv_kernel_size=spec.conv_kernel_size,
            selector_rank=spec.selector_rank,
            selector_top_k=spec.selector_top_k,
        )
    if kind == "dspark":
        config.update(
            confidence_head_with_markov=True,
            enable_confidence_head=True,
            markov_head_type="vanilla",
            markov_rank=spec.markov_rank,
        )
    if sfa is not None:
        config["sample_from_anchor"] = sfa
    config["sliding_window_non_causal"] = kind == "dflash2"
    k_max = spec.block_size if sfa or (sfa is None and kind == "dspark") else spec.block_size - 1
    config["speculators_config"] = {
        "algorithm": kind,
        "default_proposal_method": "greedy",
        "proposal_methods": [
            {"accept_tolerance": 0.0, "proposal_type": "greedy", "speculative_tokens": k_max, "verifier_accept_k": 1}
        ],
        "verifier": {"architectures": ["Qwen3ForCausalLM"], "name_or_path": spec.verifier},
    }
    config["speculators_model_type"] = kind
    config["speculators_version"] = "0.9.0"
    config["target_hidden_size"] = None
    config["tie_word_embeddings"] = False
    config["transformer_layer_config"] = _decoder(spec)
    config["transformers_version"] = "5.19.0"
    return config


def _open_spec(dialect: str, spec: DraftSpec, _location: str) -> dict[str, Any]:
    sfa = bool(spec.sample_from_anchor)
    config: dict[str, Any] = {"open_spec_config_version": "0.0.0", "architectures": ["DflashDraftModel"]}
    config.update(_decoder(spec))
    speculative: dict[str, Any] = {
        "method": "dflash",
        "speculative_tokens": spec.block_size if sfa else spec.block_size - 1,
        "verifier": spec.verifier,
        "target_layer_ids": [i + 1 for i in spec.target_layer_ids],
        "target_layer_start_idx": 1,
        "draft_vocab_size": spec.draft_vocab_size or spec.vocab_size,
        "mask_token_id": spec.mask_token_id,
        "sliding_window_non_causal": True,
        "training_framework": "speculators",
        "training_framework_version": "0.9.0",
    }
    if spec.sample_from_anchor is not None:
        speculative["sample_from_anchor"] = spec.sample_from_anchor
    config["speculative_config"] = speculative
    return config


def _dspark_native(dialect: str, spec: DraftSpec, _location: str) -> dict[str, Any]:
    config: dict[str, Any] = {"architectures": ["Qwen3DSparkModel"]}
    config.update(_decoder(spec))
    config.update(
        block_size=spec.block_size,
        confidence_head_with_markov=True,
        enable_confidence_head=True,
        markov_head_type="vanilla",
        markov_rank=spec.markov_rank,
        mask_token_id=spec.mask_token_id,
        num_anchors=512,
        num_target_layers=spec.num_target_layers,
        target_layer_ids=list(spec.target_layer_ids),
    )
    if spec.sample_from_anchor is not None:
        config["sample_from_anchor"] = spec.sample_from_anchor
    return config


def _muse_glimmer(dialect: str, spec: DraftSpec, _location: str) -> dict[str, Any]:
    """As meta-models/Muse-Glimmer-30B-assistant publishes it (z-lab/dflash's fixture
    tests/fixtures/assistant-config.json): keys sorted, algorithm keys at the top level, no
    dflash_config and no vocab_size (the target's)."""
    config: dict[str, Any] = {"architectures": ["MuseGlimmerAssistantModel"]}
    decoder = _decoder(spec)
    for key in ("tie_word_embeddings", "use_sliding_window", "vocab_size"):
        decoder.pop(key)
    decoder["model_type"] = "muse_glimmer_assistant"
    config.update(
        decoder,
        block_size=spec.block_size,
        dtype="bfloat16",
        mask_token_id=spec.mask_token_id,
        target_layer_ids=list(spec.target_layer_ids),
        transformers_version="5.15.0.dev0",
    )
    if spec.vocab_size != 202048:
        config["vocab_size"] = spec.vocab_size  # a tiny draft says which vocabulary it has
    if spec.sample_from_anchor is not None:
        config["dflash_config"] = {"sample_from_anchor": spec.sample_from_anchor}
    return dict(sorted(config.items()))


# The names the Muse Glimmer assistant's weights give the aux-hidden-state encoder.
_TENSOR_NAMES = {
    "muse-glimmer-assistant": {"fc.weight": "encoder.fc.weight", "hidden_norm.weight": "encoder.output_norm_enc.weight"}
}


# One config writer per dialect name (the JSON `dialect` values): a new dialect adds its writer here.
_BUILDERS: dict[str, Callable[[str, DraftSpec, str], dict[str, Any]]] = {
    "zlab-dflash": _zlab,
    "zlab-dflash2": _zlab,
    "speculators-dflash": _speculators,
    "speculators-dflash2": _speculators,
    "speculators-dspark": _speculators,
    "dspark-native": _dspark_native,
    "open-spec": _open_spec,
    "muse-glimmer-assistant": _muse_glimmer,
}
ALL_DIALECTS = tuple(_BUILDERS)


def make_target_config(spec: DraftSpec, *, multimodal: bool = False) -> dict[str, Any]:
    """A target (verifier) config.json that the draft pairs with."""
    text = {
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size * 2,
        "model_type": "qwen3",
        "num_attention_heads": spec.num_attention_heads,
        "num_hidden_layers": spec.num_target_layers,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "rope_parameters": {"rope_theta": spec.rope_theta, "rope_type": "default"},
        "vocab_size": spec.vocab_size,
    }
    if multimodal:
        return {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "text_config": text}
    return text


def write_target(folder: Path, spec: DraftSpec, *, multimodal: bool = False) -> Path:
    """A target folder as an engine finds one: `make_target_config` and a `model.safetensors` with
    the embedding and LM head (zeros, sparse on disk). Enough for planning and the test engine; a
    real forward pass needs a trained target (`dflash_tools/examples/engine-demo/target`)."""
    write_json(folder / "config.json", make_target_config(spec, multimodal=multimodal))
    shape = (spec.vocab_size, spec.hidden_size)
    write_safetensors(
        folder / "model.safetensors",
        [("model.embed_tokens.weight", spec.dtype, shape), ("lm_head.weight", spec.dtype, shape)],
    )
    return folder


def write_safetensors(
    path: Path,
    tensors: list[TensorSpec],
    *,
    data: dict[str, bytes] | None = None,
    metadata: dict[str, str] | None = None,
) -> int:
    """Write a valid safetensors file; tensors without `data` are zeros, left sparse on disk."""
    prefix, offsets = encode_header(tensors, metadata if metadata is not None else {"format": "pt"})
    end = prefix.__len__() + (offsets[-1][1] if offsets else 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(prefix)
        for (name, _dtype, _shape), (begin, stop) in zip(tensors, offsets, strict=True):
            if data and name in data:
                blob = data[name]
                if len(blob) != stop - begin:
                    raise ValueError(f"{name}: {len(blob)} bytes of data for a {stop - begin}-byte tensor")
                handle.seek(len(prefix) + begin)
                handle.write(blob)
        handle.truncate(end)
    return end


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def write_checkpoint(
    folder: Path,
    dialect: str,
    spec: DraftSpec = TINY,
    *,
    shards: int = 1,
    config: dict[str, Any] | None = None,
    tensors: list[TensorSpec] | None = None,
    data: dict[str, bytes] | None = None,
    block_size_location: str = "dflash_config",
) -> Path:
    """Write config.json plus weights (one `model.safetensors`, or N shards with an index)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(
        folder / "config.json",
        config if config is not None else make_config(dialect, spec, block_size_location=block_size_location),
    )
    names = _TENSOR_NAMES.get(dialect, {})
    table = tensors if tensors is not None else [(names.get(n, n), d, s) for n, d, s in tensor_table(spec)]
    if shards <= 1:
        write_safetensors(folder / "model.safetensors", table, data=data)
        return folder
    per_shard = -(-len(table) // shards)
    weight_map: dict[str, str] = {}
    total = 0
    for index in range(shards):
        chunk = table[index * per_shard : (index + 1) * per_shard]
        name = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(folder / name, chunk, data=data)
        for tensor_name, dtype, shape in chunk:
            weight_map[tensor_name] = name
            from dflash_tools.reading.safetensors_header import expected_nbytes

            total += expected_nbytes(dtype, shape)
    write_json(folder / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})
    return folder


def disk_usage(folder: Path) -> int:
    """Bytes actually allocated (sparse files count only what was written)."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


# The bundled examples: one clean, normalized checkpoint per dialect, one anchor-first DFlash2,
# one legacy speculators save with the pre-April proposal count, and a target they pair with.
# name -> (dialect, draft, block_size_location); the z-lab DFlash example states B in both places.
EXAMPLES: dict[str, tuple[str, DraftSpec, str]] = {
    "zlab-dflash": ("zlab-dflash", replace(TINY, sample_from_anchor=False), "both"),
    "zlab-dflash2": ("zlab-dflash2", replace(TINY_DFLASH2, sample_from_anchor=False), "dflash_config"),
    "zlab-dflash2-anchor-first": (
        "zlab-dflash2",
        replace(TINY_DFLASH2, block_size=7, sample_from_anchor=True),
        "dflash_config",
    ),
    "speculators-dflash": ("speculators-dflash", replace(TINY, sample_from_anchor=False), "dflash_config"),
    "speculators-dflash2": ("speculators-dflash2", replace(TINY_DFLASH2, sample_from_anchor=False), "dflash_config"),
    "speculators-dspark": ("speculators-dspark", TINY_DSPARK, "dflash_config"),
    "dspark-native": ("dspark-native", replace(TINY_DSPARK, sample_from_anchor=None), "dflash_config"),
    "open-spec": ("open-spec", replace(TINY, sample_from_anchor=False), "dflash_config"),
}


def write_examples(root: Path) -> list[Path]:
    written = []
    for name, (dialect, spec, location) in EXAMPLES.items():
        written.append(write_checkpoint(root / name, dialect, spec, block_size_location=location))
    legacy = make_config("speculators-dflash", replace(TINY, sample_from_anchor=None))
    legacy["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = TINY.block_size
    legacy["speculators_version"] = "0.7.0.dev0"
    written.append(write_checkpoint(root / "speculators-dflash-legacy", "speculators-dflash", TINY, config=legacy))
    write_json(root / "tiny-target" / "config.json", make_target_config(TINY))
    return written
