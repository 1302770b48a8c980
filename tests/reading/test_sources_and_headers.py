"""Reading sources: folders, single files, shards and their index, and corrupt headers (DFT001-5)."""

from __future__ import annotations

import contextlib
import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dflash_tools_testing as testing
from dflash_tools.errors import SourceError
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.safetensors_header import (
    SafetensorsHeaderError,
    encode_header,
    parse_header,
    read_local_header,
)
from dflash_tools.reading.source import load_checkpoint
from tests.conftest import CheckpointFactory


def codes(source: Path | str) -> list[str]:
    return [f.code for f in inspect_checkpoint(str(source)).findings]


@pytest.mark.parametrize("dialect", testing.ALL_DIALECTS)
@pytest.mark.parametrize("shards", [1, 3])
def test_clean_checkpoint_of_every_dialect(make_checkpoint: CheckpointFactory, dialect: str, shards: int) -> None:
    folder = make_checkpoint(dialect, shards=shards)
    report = inspect_checkpoint(str(folder))
    assert report.description is not None
    assert report.description.dialect.value == dialect
    # DFT055 (info): the fixture's sliding layers, trained by speculators, are served with another window rule.
    assert [f.code for f in report.findings if f.code not in ("DFT011", "DFT055")] == []
    assert report.ok
    assert len(report.loaded.shards) == shards


def test_any_safetensors_name(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2")
    (folder / "model.safetensors").rename(folder / "draft_weights.safetensors")
    assert codes(folder) == []


def test_single_safetensors_file_uses_config_beside_it(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2")
    report = inspect_checkpoint(str(folder / "model.safetensors"))
    assert report.ok and report.loaded.weights_inspected and len(report.tensors) == 36


def test_config_json_alone_is_config_only(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2")
    report = inspect_checkpoint(str(folder / "config.json"))
    assert [f.code for f in report.findings] == ["DFT005"]
    assert report.to_dict()["tensors"] is None


def test_folder_without_weights(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2")
    (folder / "model.safetensors").unlink()
    assert codes(folder) == ["DFT005"]


def test_missing_config_is_dft001(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2")
    (folder / "config.json").unlink()
    assert codes(folder) == ["DFT001"]


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "", "\xff\xfe"])
def test_broken_config_is_dft001(make_checkpoint: CheckpointFactory, text: str) -> None:
    folder = make_checkpoint("zlab-dflash2")
    (folder / "config.json").write_bytes(text.encode("latin-1"))
    assert codes(folder) == ["DFT001"]


def test_unknown_dialect_is_dft002_naming_markers(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2")
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}))
    report = inspect_checkpoint(str(folder))
    assert [f.code for f in report.findings] == ["DFT002"]
    assert "speculators_model_type" in report.findings[0].message


def test_no_such_source_raises_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError):
        load_checkpoint(str(tmp_path / "nope"))
    with pytest.raises(SourceError):
        load_checkpoint("not a repo id!")
    with pytest.raises(SourceError):
        load_checkpoint("example:nope")


def test_bundled_examples_load() -> None:
    report = inspect_checkpoint("example:zlab-dflash2")
    assert report.ok and report.loaded.kind == "example" and report.findings == []


# --- sharded checkpoints and their index (DFT004) ---------------------------------------------


def _index(folder: Path) -> dict:
    return json.loads((folder / "model.safetensors.index.json").read_text())


def _write_index(folder: Path, index: dict) -> None:
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def test_index_naming_missing_shard(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2", shards=3)
    (folder / "model-00002-of-00003.safetensors").unlink()
    found = codes(folder)
    assert "DFT004" in found and "DFT020" in found


@pytest.mark.parametrize(
    "bad_name", ["../outside.safetensors", "/etc/passwd", "sub/../../x.safetensors", "C:\\x.safetensors"]
)
def test_index_escaping_the_folder(make_checkpoint: CheckpointFactory, bad_name: str) -> None:
    folder = make_checkpoint("zlab-dflash2", shards=2)
    index = _index(folder)
    index["weight_map"]["norm.weight"] = bad_name
    _write_index(folder, index)
    report = inspect_checkpoint(str(folder))
    assert any(f.code == "DFT004" and "norm.weight" in f.keys for f in report.findings)


def test_shard_symlink_leaving_the_folder(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    folder = make_checkpoint("zlab-dflash2", shards=2)
    outside = tmp_path / "elsewhere.safetensors"
    shard = folder / "model-00001-of-00002.safetensors"
    shard.rename(outside)
    shard.symlink_to(outside)
    assert "DFT004" in codes(folder)


def test_hub_cache_snapshot_links_into_blobs_are_inside(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    """A snapshot folder of the Hugging Face cache links every file into the repo's blobs/."""
    source = make_checkpoint("zlab-dflash2", shards=2)
    repo = tmp_path / "hub" / "models--z-lab--tiny"
    snapshot = repo / "snapshots" / ("a" * 40)
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for index, file in enumerate(sorted(source.iterdir())):
        blob = repo / "blobs" / f"{index:064x}"
        file.rename(blob)
        (snapshot / file.name).symlink_to(Path("../../blobs") / blob.name)
    report = inspect_checkpoint(str(snapshot))
    assert report.findings == [] and len(report.tensors) == 36
    # A link out of the snapshot that is not a blob of this repo is still an escape.
    outside = tmp_path / "stray.safetensors"
    shard = snapshot / "model-00001-of-00002.safetensors"
    shard.resolve().rename(outside)
    shard.unlink()
    shard.symlink_to(outside)
    assert "DFT004" in codes(snapshot)


def test_index_entry_not_in_named_shard(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2", shards=2)
    index = _index(folder)
    index["weight_map"]["norm.weight"] = (
        "model-00001-of-00002.safetensors"
        if index["weight_map"]["norm.weight"].startswith("model-00002")
        else "model-00002-of-00002.safetensors"
    )
    _write_index(folder, index)
    report = inspect_checkpoint(str(folder))
    assert any(f.code == "DFT004" and "does not hold it" in f.message for f in report.findings)


def test_tensor_stored_but_not_indexed(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2", shards=2)
    index = _index(folder)
    del index["weight_map"]["norm.weight"]
    _write_index(folder, index)
    report = inspect_checkpoint(str(folder))
    assert any(f.code == "DFT004" and "does not list" in f.message for f in report.findings)


def test_index_not_json(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2", shards=2)
    (folder / "model.safetensors.index.json").write_text("{")
    assert codes(folder) == ["DFT004"]


# --- header validation (DFT003) -----------------------------------------------------------------


def _raw_file(path: Path, header: dict | bytes, data_size: int) -> None:
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + b"\0" * data_size)


GOOD = {
    "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
    "b": {"dtype": "BF16", "shape": [4], "data_offsets": [16, 24]},
}


@pytest.mark.parametrize(
    ("header", "data_size", "reason"),
    [
        ({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}, 12, "needs 16 bytes"),
        ({"a": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 2]}}, 2, "unknown dtype"),
        (
            {
                "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]},
            },
            6,
            "overlaps",
        ),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, 8, "hole"),
        (GOOD, 10, "holds only"),
        (GOOD, 40, "trailing bytes"),
        ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, 4, "non-negative"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}}, 8, "begin, end"),
        ({"__metadata__": {"x": 1}}, 0, "__metadata__"),
        (b"[1,2,3]", 0, "not a JSON object"),
        (b'{"a": 1, "a": 2}', 0, "duplicate"),
        (b"\xff\xfe{}", 0, "not valid JSON"),
    ],
)
def test_corrupt_headers(tmp_path: Path, header: dict | bytes, data_size: int, reason: str) -> None:
    path = tmp_path / "x.safetensors"
    _raw_file(path, header, data_size)
    with pytest.raises(SafetensorsHeaderError, match=reason):
        read_local_header(path)


def test_header_length_bounds(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"\x01\x02")
    with pytest.raises(SafetensorsHeaderError, match="shorter than"):
        read_local_header(path)
    path.write_bytes(struct.pack("<Q", 2**40) + b"{}")
    with pytest.raises(SafetensorsHeaderError, match="exceeds"):
        read_local_header(path)
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(SafetensorsHeaderError, match="past the end"):
        read_local_header(path)


def test_corrupt_shard_is_a_finding_not_a_crash(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2")
    with open(folder / "model.safetensors", "r+b") as handle:
        handle.truncate(1000)
    report = inspect_checkpoint(str(folder))
    assert "DFT003" in [f.code for f in report.findings]
    assert not report.ok


def test_valid_header_round_trip(tmp_path: Path) -> None:
    tensors = [("w", "BF16", (3, 5)), ("b", "F32", (5,)), ("s", "F4", (3,)), ("z", "I64", ())]
    path = tmp_path / "x.safetensors"
    testing.write_safetensors(path, tensors)
    shard = read_local_header(path)
    assert {n: (t.dtype, t.shape) for n, t in shard.tensors.items()} == {n: (d, s) for n, d, s in tensors}
    assert shard.metadata == {"format": "pt"}
    assert shard.data_start % 8 == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_parser_never_raises_anything_else(blob: bytes) -> None:
    with contextlib.suppress(SafetensorsHeaderError):
        parse_header(blob, "fuzz.safetensors", 8 + len(blob) + 64)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "__metadata__"]), json_values, max_size=3))
def test_structured_headers_never_crash(header: dict) -> None:
    body = json.dumps(header).encode()
    with contextlib.suppress(SafetensorsHeaderError):
        parse_header(body, "fuzz.safetensors", None)


def test_encode_header_matches_reference_reader(tmp_path: Path) -> None:
    """Our writer's files open with the safetensors library itself (numpy backend)."""
    np = pytest.importorskip("numpy")
    from safetensors.numpy import load_file

    path = tmp_path / "x.safetensors"
    testing.write_safetensors(path, [("w", "F32", (2, 3)), ("i", "I64", (4,))])
    loaded = load_file(path)
    assert loaded["w"].shape == (2, 3) and loaded["i"].dtype == np.int64
    prefix, offsets = encode_header([("w", "F32", (2, 3))])
    assert offsets == [(0, 24)] and len(prefix) % 8 == 0
