"""Streaming repack: dropped and renamed tensors, bytes of every kept tensor unchanged, no torch."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from dflash_tools.convert.repack import TensorEdits, plan_repack, repack_file, rewrite_index, write_repacked
from dflash_tools.reading.safetensors_header import expected_nbytes, read_local_header
from dflash_tools_testing import write_safetensors

TENSORS = [
    ("a.weight", "F32", (16, 8)),
    ("embed_tokens.weight", "F16", (64, 8)),
    ("b.bias", "F32", (8,)),
    ("verifier_norm.weight", "F32", (8,)),
    ("c.index", "I64", (5,)),
]


def random_data(seed: int = 0) -> dict[str, bytes]:
    rng = np.random.default_rng(seed)
    return {name: rng.bytes(expected_nbytes(dtype, shape)) for name, dtype, shape in TENSORS}


def tensor_bytes(path: Path) -> dict[str, bytes]:
    """Each tensor's raw bytes, read through our own header parser."""
    header = read_local_header(path)
    with open(path, "rb") as handle:
        out = {}
        for name, tensor in header.tensors.items():
            handle.seek(header.data_start + tensor.data_offsets[0])
            out[name] = handle.read(tensor.num_bytes)
    return out


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    write_safetensors(path, TENSORS, data=random_data(), metadata={"format": "pt", "note": "kept"})
    return path


@pytest.mark.parametrize("kernel_copy", [True, False])
def test_drop_and_rename_keep_every_other_byte(shard: Path, tmp_path: Path, kernel_copy: bool) -> None:
    before = tensor_bytes(shard)
    source_stat = shard.stat()
    edits = TensorEdits(
        drop=frozenset({"embed_tokens.weight", "verifier_norm.weight"}), rename={"b.bias": "model.b.bias"}
    )
    out = tmp_path / "out.safetensors"
    # A 7-byte buffer forces many partial copies through the bounded path.
    plan = repack_file(shard, out, read_local_header(shard), edits, buffer_bytes=7, kernel_copy=kernel_copy)
    after = tensor_bytes(out)
    assert set(after) == {"a.weight", "model.b.bias", "c.index"}
    assert after["a.weight"] == before["a.weight"]
    assert after["model.b.bias"] == before["b.bias"]
    assert after["c.index"] == before["c.index"]
    assert plan.dropped == ("embed_tokens.weight", "verifier_norm.weight")
    assert plan.renamed == (("b.bias", "model.b.bias"),)
    assert out.stat().st_size == plan.size
    # The reference implementation reads it, and the metadata survived.
    loaded = load_file(str(out))
    assert np.array_equal(loaded["c.index"], np.frombuffer(before["c.index"], dtype=np.int64))
    assert read_local_header(out).metadata == {"format": "pt", "note": "kept"}
    # Header padded to 8 bytes so the data stays aligned.
    assert read_local_header(out).header_length % 8 == 0
    assert shard.stat().st_mtime_ns == source_stat.st_mtime_ns


def test_header_order_and_data_order_are_kept(shard: Path) -> None:
    plan = plan_repack(read_local_header(shard), TensorEdits(drop=frozenset({"b.bias"})))
    assert plan.kept == ("a.weight", "embed_tokens.weight", "verifier_norm.weight", "c.index")
    # Tensors adjacent in the input become one copy: a.weight + embed run, then the rest.
    assert len(plan.runs) == 2


def test_rename_only_copies_the_whole_buffer_in_one_run(shard: Path) -> None:
    plan = plan_repack(read_local_header(shard), TensorEdits(rename={"a.weight": "x.weight"}))
    assert len(plan.runs) == 1 and plan.data_bytes == sum(expected_nbytes(d, s) for _, d, s in TENSORS)


def test_two_tensors_may_not_end_up_with_one_name(shard: Path) -> None:
    with pytest.raises(ValueError, match="same name"):
        plan_repack(read_local_header(shard), TensorEdits(rename={"a.weight": "b.bias"}))


def test_repacked_bytes_can_be_streamed_to_an_open_file(shard: Path, tmp_path: Path) -> None:
    plan = plan_repack(read_local_header(shard), TensorEdits(drop=frozenset({"a.weight"})))
    runs: list[int] = []
    with open(tmp_path / "x.safetensors", "wb") as handle:
        copied = write_repacked(shard, handle, plan, on_run=runs.append)
    assert copied == plan.data_bytes and runs == list(range(len(plan.runs)))
    assert read_local_header(tmp_path / "x.safetensors").tensors.keys() == set(plan.kept)


def test_index_rewrite_keeps_order_and_updates_total() -> None:
    index = {"metadata": {"total_size": 100, "format": "pt"}, "weight_map": {"a": "1.st", "b": "1.st", "c": "2.st"}}
    out = rewrite_index(index, TensorEdits(drop=frozenset({"b"}), rename={"c": "model.c"}), removed_bytes=30)
    assert out == {"metadata": {"total_size": 70, "format": "pt"}, "weight_map": {"a": "1.st", "model.c": "2.st"}}
    assert list(out["weight_map"]) == ["a", "model.c"]


def test_repack_does_not_import_torch(shard: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path; from dflash_tools.convert.repack import repack_file, TensorEdits; "
        "from dflash_tools.reading.safetensors_header import read_local_header; "
        f"p = Path({str(shard)!r}); repack_file(p, Path({str(tmp_path / 'y.safetensors')!r}), read_local_header(p), "
        "TensorEdits(drop=frozenset({'a.weight'}))); print('torch' in sys.modules, 'numpy' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ.copy()
    )
    assert result.stdout.strip() == "False False"
