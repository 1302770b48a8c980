"""Safe writes: atomic files, byte-faithful JSON rewrites, links, staging folders, cache detection."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dflash_tools_testing as testing
from dflash_tools.convert.json_edit import detect_style, dumps_like, same_json
from dflash_tools.files.atomic import (
    LinkMode,
    atomic_write,
    atomic_write_text,
    is_empty_dir,
    make_staging_dir,
    pause_point,
    place_file,
    publish_dir,
)
from dflash_tools.files.hf_cache import is_in_hf_cache

# --------------------------------------------------------------------------------------------
# Atomic writes
# --------------------------------------------------------------------------------------------


def test_atomic_write_keeps_the_mode_of_the_file_it_replaces(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{}")
    path.chmod(0o640)
    atomic_write_text(path, '{"a": 1}\n')
    assert path.read_text() == '{"a": 1}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_new_file_gets_the_umask_mode_not_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "new.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644


def test_atomic_write_replaces_a_symlink_never_its_target(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    blob.write_text("shared bytes")
    link = tmp_path / "config.json"
    link.symlink_to(blob)
    atomic_write_text(link, "new")
    assert blob.read_text() == "shared bytes"
    assert not link.is_symlink() and link.read_text() == "new"


def test_failed_write_leaves_target_and_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("old")

    def boom(handle: Any) -> None:
        handle.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, boom)
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


# --------------------------------------------------------------------------------------------
# JSON fidelity
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", testing.ALL_DIALECTS)
def test_unchanged_config_is_byte_identical(dialect: str) -> None:
    config = testing.make_config(dialect, testing.TINY_DFLASH2 if "dflash2" in dialect else testing.TINY)
    for text in (
        json.dumps(config, indent=2) + "\n",
        json.dumps(config, indent=4, sort_keys=True),
        json.dumps(config, indent="\t", ensure_ascii=True) + "\n",
        json.dumps(config, separators=(",", ":")),
        json.dumps(config) + "\r\n",
    ):
        assert dumps_like(json.loads(text), text) == text


def test_only_the_changed_members_move() -> None:
    text = (
        '{\n  "a": 1e-6,\n  "ids": [1, 9, 17],\n  "rope": {"theta": 1000000, "type": "default"},\n'
        '  "dflash_config": {\n    "mask_token_id": 5,\n    "block_size": 16\n  },\n  "name": "caf\\u00e9"\n}\n'
    )
    value = json.loads(text)
    value["dflash_config"]["sample_from_anchor"] = False
    value["block_size"] = 16
    out = dumps_like(value, text)
    assert json.loads(out) == value
    # Unchanged members keep their exact spelling: 1e-6, the inline list, the \u escape.
    assert '"a": 1e-6,' in out and '"ids": [1, 9, 17],' in out and '"caf\\u00e9"' in out
    assert '"rope": {"theta": 1000000, "type": "default"}' in out
    assert '    "block_size": 16,\n    "sample_from_anchor": false\n  },' in out
    assert out.endswith('"name": "caf\\u00e9",\n  "block_size": 16\n}\n')


def test_changed_inline_list_stays_inline() -> None:
    text = '{\n  "ids": [1, 9, 17],\n  "x": 1\n}'
    value = json.loads(text)
    value["ids"] = [2, 10, 18]
    assert dumps_like(value, text) == '{\n  "ids": [2, 10, 18],\n  "x": 1\n}'


def test_style_detection() -> None:
    assert detect_style(json.dumps({"a": {"b": 1}}, indent=4)).indent == "    "
    assert detect_style(json.dumps({"a": 1}, indent="\t") + "\n").trailing == "\n"
    assert detect_style('{"a":1}').indent is None
    assert detect_style('{"k": "\\u00e9"}').ensure_ascii
    assert not detect_style('{"k": "é"}').ensure_ascii


def test_fresh_document_in_the_style_of_another() -> None:
    out = dumps_like({"a": {"b": [1]}}, None, style_from=json.dumps({"x": 1}, indent=4) + "\n")
    assert out == json.dumps({"a": {"b": [1]}}, indent=4) + "\n"
    assert dumps_like({"é": 1}, None) == '{\n  "é": 1\n}\n'


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=20,
)
_styles = st.sampled_from(
    [
        {"indent": 2},
        {"indent": 4, "sort_keys": True},
        {"indent": "\t", "ensure_ascii": False},
        {"separators": (",", ":")},
        {},
    ]
)


@settings(max_examples=150, deadline=None)
@given(value=st.dictionaries(st.text(max_size=6), _values, max_size=6), style=_styles, edit=_values)
def test_rewrite_property(value: dict[str, Any], style: dict[str, Any], edit: Any) -> None:
    text = json.dumps(value, **style) + "\n"
    parsed = json.loads(text)
    assert dumps_like(parsed, text) == text
    changed = dict(parsed)
    if changed:
        changed[next(iter(changed))] = edit
    changed["__edited__"] = edit
    rewritten = json.loads(dumps_like(changed, text))
    assert rewritten == changed
    if not _has_sorted_object(parsed):
        # New keys are appended, unless the file keeps an object's keys sorted.
        assert same_json(rewritten, changed)


def _has_sorted_object(value: Any) -> bool:
    if isinstance(value, dict):
        keys = list(value)
        return (len(keys) > 2 and keys == sorted(keys)) or any(_has_sorted_object(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_sorted_object(v) for v in value)
    return False


def test_sorted_files_get_new_keys_in_sorted_place() -> None:
    text = json.dumps({"a": 1, "c": 3, "e": {"w": 0, "x": 1, "z": 2}}, indent=2, sort_keys=True)
    value = json.loads(text)
    value["d"] = 4
    value["e"]["y"] = 5
    assert dumps_like(value, text) == json.dumps(value, indent=2, sort_keys=True)


def test_same_json_tells_types_apart() -> None:
    assert not same_json(1, 1.0) and not same_json(1, True) and not same_json({"a": 1}, {"a": 1.0})
    assert not same_json({"a": 1, "b": 2}, {"b": 2, "a": 1})  # order matters for the file
    assert same_json(float("nan"), float("nan"))


# --------------------------------------------------------------------------------------------
# Links
# --------------------------------------------------------------------------------------------


def test_place_file_modes(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"weights" * 100)
    source.chmod(0o640)
    linked = place_file(source, tmp_path / "hard.bin", LinkMode.HARDLINK)
    assert linked.method == "hardlink" and linked.bytes_copied == 0
    assert (tmp_path / "hard.bin").stat().st_ino == source.stat().st_ino
    assert place_file(source, tmp_path / "auto.bin", LinkMode.AUTO).method == "hardlink"
    copied = place_file(source, tmp_path / "copy.bin", LinkMode.COPY)
    assert copied.method == "copy" and copied.bytes_copied == 700
    assert (tmp_path / "copy.bin").stat().st_ino != source.stat().st_ino
    assert stat.S_IMODE((tmp_path / "copy.bin").stat().st_mode) == 0o640
    symlinked = place_file(source, tmp_path / "sym.bin", LinkMode.SYMLINK)
    assert symlinked.method == "symlink" and (tmp_path / "sym.bin").resolve() == source.resolve()


def test_links_go_to_the_real_blob_not_the_snapshot_link(tmp_path: Path) -> None:
    blob = tmp_path / "blobs" / "abc"
    blob.parent.mkdir()
    blob.write_bytes(b"x")
    link = tmp_path / "file"
    link.symlink_to(blob)
    place_file(link, tmp_path / "out", LinkMode.HARDLINK)
    assert (tmp_path / "out").stat().st_ino == blob.stat().st_ino


def _other_filesystem(tmp_path: Path) -> Path | None:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shm.stat().st_dev != tmp_path.stat().st_dev:
        return shm
    return None


def test_auto_falls_back_to_copy_across_file_systems(tmp_path: Path) -> None:
    other = _other_filesystem(tmp_path)
    if other is None:
        pytest.skip("no second file system to link across")
    source = tmp_path / "src.bin"
    source.write_bytes(b"abc")
    target = other / f"dflash-tools-test-{os.getpid()}.bin"
    try:
        placed = place_file(source, target, LinkMode.AUTO)
        assert placed.method == "copy" and placed.fallback_reason and target.read_bytes() == b"abc"
        target.unlink()
        with pytest.raises(OSError):
            place_file(source, target, LinkMode.HARDLINK)
    finally:
        target.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# Staging and publishing
# --------------------------------------------------------------------------------------------


def test_staging_is_a_hidden_sibling(tmp_path: Path) -> None:
    stage = make_staging_dir(tmp_path / "out")
    assert stage.parent == tmp_path and stage.name.startswith(".out.dflash-tools-partial-")


def test_publish_into_absent_empty_and_occupied_destinations(tmp_path: Path) -> None:
    for name, occupied in (("absent", False), ("empty", False), ("full", True)):
        destination = tmp_path / name
        if name != "absent":
            destination.mkdir()
        if occupied:
            (destination / "old.txt").write_text("old")
        stage = make_staging_dir(destination)
        (stage / "config.json").write_text("{}")
        if occupied:
            with pytest.raises(FileExistsError):
                publish_dir(stage, destination, replace_existing=False)
            assert (destination / "old.txt").exists()
        publish_dir(stage, destination, replace_existing=occupied)
        assert sorted(p.name for p in destination.iterdir()) == ["config.json"]
    # No staging or set-aside folder is left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["absent", "empty", "full"]
    assert not is_empty_dir(tmp_path / "absent")


def test_hf_cache_detection(tmp_path: Path) -> None:
    snapshot = tmp_path / "models--org--name" / "snapshots" / ("a" * 40)
    blobs = tmp_path / "models--org--name" / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    (blobs / "123").write_text("{}")
    (snapshot / "config.json").symlink_to(Path("../../blobs/123"))
    assert is_in_hf_cache(snapshot) and is_in_hf_cache(snapshot / "config.json")
    # A snapshot folder copied elsewhere still links into the shared blobs.
    copied = tmp_path / "elsewhere"
    copied.mkdir()
    (copied / "config.json").symlink_to(blobs / "123")
    assert is_in_hf_cache(copied)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    assert not is_in_hf_cache(plain)
    assert is_in_hf_cache(Path(os.environ["HF_HUB_CACHE"]) / "anything")


def test_pause_point_is_inert_unless_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DFLASH_TOOLS_TEST_PAUSE_AT", raising=False)
    pause_point("staged")
    marker = tmp_path / "marker"
    monkeypatch.setenv("DFLASH_TOOLS_TEST_PAUSE_AT", "other")
    monkeypatch.setenv("DFLASH_TOOLS_TEST_PAUSE_FILE", str(marker))
    pause_point("staged")
    assert not marker.exists()


def test_a_plain_folder_named_blobs_is_not_the_cache(tmp_path: Path) -> None:
    # Issue 12: a shard linked to `store/blobs/x` in an ordinary folder was refused as "inside the
    # Hugging Face cache". The cache's layout is models--*/{blobs,snapshots}, not a folder name.
    store = tmp_path / "store" / "blobs"
    store.mkdir(parents=True)
    (store / "x").write_text("{}")
    plain = tmp_path / "ckpt"
    plain.mkdir()
    (plain / "model.safetensors").symlink_to(store / "x")
    assert not is_in_hf_cache(plain) and not is_in_hf_cache(plain / "model.safetensors")
    # A folder named like a snapshot, outside a cached repo, is not the cache either.
    fake = tmp_path / "work" / "snapshots" / ("b" * 40)
    fake.mkdir(parents=True)
    assert not is_in_hf_cache(fake)
    # The same link into a real cached repo's blobs is.
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots").mkdir()
    (repo / "blobs" / "y").write_text("{}")
    (plain / "config.json").symlink_to(repo / "blobs" / "y")
    assert is_in_hf_cache(plain)
