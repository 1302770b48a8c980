"""Tensor table against the config (docs/rules.md, "Tensors"): DFT020-DFT023, counts and parameters."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import dflash_tools_testing as testing
from dflash_tools.inspect import inspect_checkpoint
from tests.conftest import CheckpointFactory


def findings(folder: Path) -> list:
    # DFT055 (info) describes every speculators draft with sliding layers; tests/draft/test_sliding_window.py covers it.
    return [f for f in inspect_checkpoint(str(folder)).findings if f.code != "DFT055"]


def codes(folder: Path) -> list[str]:
    return [f.code for f in findings(folder)]


def test_published_qwen38_dflash2_figures(make_checkpoint: CheckpointFactory) -> None:
    """z-lab/Qwen3.8-27B-DFlash2: exactly 81 tensors and 1,924,404,480 parameters (sparse files)."""
    folder = make_checkpoint("zlab-dflash2", testing.QWEN38_27B_DFLASH2, shards=2)
    document = inspect_checkpoint(str(folder)).to_dict()
    assert document["tensors"]["count"] == 81
    assert document["tensors"]["parameters"] == 1_924_404_480
    assert document["tensors"]["bytes"] == 2 * 1_924_404_480
    assert document["tensors"]["dtypes"] == {"BF16": 81}
    assert document["expected_tensors"] == {"count": 81, "parameters": 1_924_404_480}
    assert testing.disk_usage(folder) < 1_000_000
    assert document["profile"]["name"] == "z-lab/Qwen3.8-27B-DFlash2" and document["profile"]["matches"]


def test_published_qwen3_8b_dflash_tensor_count(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash", testing.QWEN3_8B_DFLASH_B16, block_size_location="top")
    assert inspect_checkpoint(str(folder)).to_dict()["tensors"]["count"] == 58


def _without(dialect: str, spec: testing.DraftSpec, *names: str) -> list[testing.TensorSpec]:
    return [t for t in testing.tensor_table(spec) if t[0] not in names]


@pytest.mark.parametrize(
    "name",
    [
        "layers.1.attention_conv.base_kernel",
        "candidate_selector.successor_codebook",
        "fc.weight",
        "hidden_norm.weight",
        "layers.0.self_attn.k_norm.weight",
    ],
)
def test_missing_required_tensor(make_checkpoint: CheckpointFactory, name: str) -> None:
    spec = testing.TINY_DFLASH2
    folder = make_checkpoint("zlab-dflash2", spec, tensors=_without("zlab-dflash2", spec, name))
    found = findings(folder)
    assert [f.code for f in found] == ["DFT020"]
    assert found[0].keys == (name,)


def test_many_missing_tensors_are_summarized(make_checkpoint: CheckpointFactory) -> None:
    spec = testing.TINY_DFLASH2
    table = [t for t in testing.tensor_table(spec) if not t[0].startswith("layers.")]
    found = findings(make_checkpoint("zlab-dflash2", spec, tensors=table))
    assert [f.code for f in found] == ["DFT020"]
    assert "required tensors are missing" in found[0].message


def test_prefixed_names_are_explained(make_checkpoint: CheckpointFactory) -> None:
    spec = testing.TINY
    table = [("model." + n, d, s) for n, d, s in testing.tensor_table(spec)]
    found = findings(make_checkpoint("zlab-dflash", spec, tensors=table))
    missing = next(f for f in found if f.code == "DFT020")
    assert "prefix" in missing.hint
    assert any(f.code == "DFT021" and "prefixed" in f.message for f in found)


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (("layers.0.self_attn.q_proj.bias", "BF16", (64,)), "attention_bias is false"),
        (("layers.7.mlp.up_proj.weight", "BF16", (128, 64)), "num_hidden_layers is 2"),
        (("verifier_norm.weight", "BF16", (64,)), "older speculators"),
        (("mask_hidden", "BF16", (64,)), "asserts"),
        (("d2t", "I64", (512,)), "full vocabulary"),
    ],
)
def test_unexpected_tensor(make_checkpoint: CheckpointFactory, extra: testing.TensorSpec, why: str) -> None:
    table = [*testing.tensor_table(testing.TINY), extra]
    found = findings(make_checkpoint("zlab-dflash", testing.TINY, tensors=table))
    assert [f.code for f in found] == ["DFT021"]
    assert why in found[0].message


def test_optional_tensors_are_not_findings(make_checkpoint: CheckpointFactory) -> None:
    spec = replace(testing.TINY, with_embed_tokens=True)
    table = [*testing.tensor_table(spec), ("lm_head.weight", "BF16", (512, 64))]
    assert codes(make_checkpoint("speculators-dflash", spec, tensors=table)) == []


def test_reduced_vocabulary_needs_head_and_maps(make_checkpoint: CheckpointFactory) -> None:
    spec = replace(testing.TINY, draft_vocab_size=128)
    assert codes(make_checkpoint("speculators-dflash", spec)) == []
    found = findings(make_checkpoint("speculators-dflash", spec, tensors=_without("speculators-dflash", spec, "d2t")))
    assert [f.code for f in found] == ["DFT020"] and found[0].keys == ("d2t",)


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("fc.weight", (64, 64 * 3)),
        ("layers.0.mlp.down_proj.weight", (64, 96)),
        ("candidate_selector.predecessor_codebook", (511, 16)),
        ("layers.1.mlp_conv.kernel_projection.weight", (32, 64)),
    ],
)
def test_wrong_shape(make_checkpoint: CheckpointFactory, name: str, shape: tuple[int, ...]) -> None:
    spec = testing.TINY_DFLASH2
    table = [(n, d, shape if n == name else s) for n, d, s in testing.tensor_table(spec)]
    found = findings(make_checkpoint("zlab-dflash2", spec, tensors=table))
    assert [f.code for f in found] == ["DFT022"]
    assert found[0].values["actual"] == list(shape)


def test_index_map_with_wrong_dtype(make_checkpoint: CheckpointFactory) -> None:
    spec = replace(testing.TINY, draft_vocab_size=128)
    table = [(n, "I32" if n == "d2t" else d, s) for n, d, s in testing.tensor_table(spec)]
    found = findings(make_checkpoint("speculators-dflash", spec, tensors=table))
    assert [f.code for f in found] == ["DFT022"]


def test_mixed_and_unusual_dtypes(make_checkpoint: CheckpointFactory) -> None:
    table = [(n, "F32" if n == "norm.weight" else d, s) for n, d, s in testing.tensor_table(testing.TINY)]
    found = findings(make_checkpoint("zlab-dflash", testing.TINY, tensors=table))
    assert [f.code for f in found] == ["DFT023"]
    table = [(n, "F64", s) for n, _d, s in testing.tensor_table(testing.TINY)]
    found = findings(make_checkpoint("zlab-dflash", testing.TINY, tensors=table))
    assert [f.code for f in found] == ["DFT023"] and "F64" in found[0].message


def test_parameters_exclude_index_maps(make_checkpoint: CheckpointFactory) -> None:
    spec = replace(testing.TINY, draft_vocab_size=128)
    document = inspect_checkpoint(str(make_checkpoint("speculators-dflash", spec))).to_dict()
    floats = sum(
        n_elements
        for name, _dtype, shape in testing.tensor_table(spec)
        if name not in ("d2t", "t2d")
        for n_elements in [__import__("math").prod(shape)]
    )
    assert document["tensors"]["parameters"] == floats
    assert document["tensors"]["dtypes"] == {"BF16": 26, "BOOL": 1, "I64": 1}


def _quantized(spec: testing.DraftSpec, scheme: str) -> list[testing.TensorSpec]:
    """Tensor tables as llm-compressor writes them: FP8 (same shape + scales) or W4A16 (packed)."""
    out: list[testing.TensorSpec] = []
    for name, dtype, shape in testing.tensor_table(spec):
        is_linear = name.endswith("_proj.weight") and len(shape) == 2 and name.startswith("layers.")
        if not is_linear:
            out.append((name, dtype, shape))
            continue
        base = name.removesuffix(".weight")
        rows, cols = shape
        if scheme == "fp8":
            out += [
                (name, "F8_E4M3", shape),
                (f"{base}.weight_scale", "F32", (rows, 1)),
                (f"{base}.input_scale", "F32", (1,)),
            ]
        else:
            out += [
                (f"{base}.weight_packed", "I32", (rows, cols // 8)),
                (f"{base}.weight_scale", "BF16", (rows, cols // 16)),
                (f"{base}.weight_shape", "I64", (2,)),
            ]
    return out


QUANT_CONFIG = {"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized"}}


@pytest.mark.parametrize("scheme", ["fp8", "w4a16"])
def test_quantized_checkpoints_are_recognized(make_checkpoint: CheckpointFactory, scheme: str) -> None:
    spec = replace(testing.TINY, extra_config=QUANT_CONFIG)
    found = findings(make_checkpoint("zlab-dflash", spec, tensors=_quantized(spec, scheme)))
    # DFT035: quantized weights are a feature engines treat differently (tests/dialects/test_features.py).
    assert [f.code for f in found] == ["DFT035", "DFT024"]
    packed = 0 if scheme == "fp8" else 7 * spec.num_hidden_layers
    assert found[1].values["packed"] == packed


def test_quantization_data_without_a_quantization_config_is_unexpected(make_checkpoint: CheckpointFactory) -> None:
    codes_found = codes(make_checkpoint("zlab-dflash", testing.TINY, tensors=_quantized(testing.TINY, "fp8")))
    assert "DFT021" in codes_found and "DFT024" not in codes_found


def test_quantized_checkpoints_still_catch_missing_and_misshapen_weights(make_checkpoint: CheckpointFactory) -> None:
    spec = replace(testing.TINY, extra_config=QUANT_CONFIG)
    table = [t for t in _quantized(spec, "w4a16") if not t[0].startswith("layers.1.mlp.down_proj")]
    assert codes(make_checkpoint("zlab-dflash", spec, tensors=table)) == ["DFT020", "DFT035", "DFT024"]
    table = [(n, d, (8, 64) if n == "layers.0.self_attn.q_proj.weight" else s) for n, d, s in _quantized(spec, "fp8")]
    assert codes(make_checkpoint("zlab-dflash", spec, tensors=table)) == ["DFT022", "DFT035", "DFT024"]
