"""Path safety: a checkpoint can only make dflash-tools read its own regular files, and write nowhere.

Shard indexes naming `../x` or absolute paths, links leaving the folder, devices and FIFOs (a
shard linked to /dev/zero must neither hang nor read without bound), output folders that are
links, and `--in-place` on a read-only folder: each is refused with a one-line message, and
nothing outside the checkpoint is read or written. Commands that could hang run as real
subprocesses under a timeout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import dflash_tools_testing as testing
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.checkpoint import INDEX_NAME

CLI = shutil.which("dflash-tools") or str(Path(sys.executable).with_name("dflash-tools"))
SECRET_TENSOR = "outside.secret"


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1", HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", COLUMNS="200")
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=timeout)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error:"), done.stderr
    assert len(lines) <= 2 and "internal error" not in done.stderr, done.stderr
    return lines[0]


def tree(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            out[str(path.relative_to(folder))] = "-> " + str(path.readlink())
        elif path.is_file():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def sharded(tmp_path: Path) -> Path:
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", testing.TINY, shards=2)
    # A valid shard outside the folder, holding a tensor that must never show up.
    testing.write_safetensors(tmp_path / "x.safetensors", [(SECRET_TENSOR, "BF16", (4,))])
    return folder


def point_index(folder: Path, shard: str) -> None:
    index_path = folder / INDEX_NAME
    index = json.loads(index_path.read_text())
    index["weight_map"][SECRET_TENSOR] = shard
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = shard
    index_path.write_text(json.dumps(index))


# --------------------------------------------------------------------------------------------
# What inspect reads
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shard", ["../x.safetensors", "sub/../../x.safetensors", "ABSOLUTE"])
def test_index_naming_files_outside_the_folder(sharded: Path, shard: str) -> None:
    if shard == "ABSOLUTE":
        shard = str(sharded.parent / "x.safetensors")
    point_index(sharded, shard)
    report = inspect_checkpoint(str(sharded))
    assert SECRET_TENSOR not in report.tensors  # never opened
    assert any(f.code == "DFT004" and ("escapes" in f.message or "absolute" in f.message) for f in report.findings)


def test_shard_linking_outside_the_folder(sharded: Path) -> None:
    victim = next(sharded.glob("model-00001-*.safetensors"))
    victim.unlink()
    victim.symlink_to(sharded.parent / "x.safetensors")
    report = inspect_checkpoint(str(sharded))
    assert SECRET_TENSOR not in report.tensors
    assert any(f.code == "DFT004" and "outside the checkpoint folder" in f.message for f in report.findings)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "fifo", "chardev"])
@pytest.mark.parametrize("indexed", [True, False])
def test_devices_and_fifos_do_not_hang(tmp_path: Path, device: str, indexed: bool) -> None:
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", testing.TINY, shards=2 if indexed else 1)
    victim = sorted(folder.glob("*.safetensors"))[0]
    victim.unlink()
    if device == "fifo":
        os.mkfifo(victim)
    elif device == "chardev":
        try:
            os.mknod(victim, 0o600 | 0o020000, os.makedev(1, 5))  # a /dev/zero inside the folder
        except (PermissionError, OSError) as exc:
            pytest.skip(f"cannot create a device node here ({exc.strerror})")
    else:
        victim.symlink_to(device)
    done = cli("inspect", str(folder), "--json", timeout=60)
    assert done.returncode == 1, done.stderr  # a shard that is not a regular file is a DFT004 error
    codes = {f["code"] for f in json.loads(done.stdout)["findings"]}
    assert codes & {"DFT004", "DFT005", "DFT020"}


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom", "folder"])
def test_config_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", testing.TINY)
    config = folder / "config.json"
    config.unlink()
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "folder":
        config.mkdir()
    else:
        config.symlink_to(kind)
    done = cli("inspect", str(folder), "--json", timeout=60)
    assert done.returncode == 1, done.stderr
    assert "DFT001" in {f["code"] for f in json.loads(done.stdout)["findings"]}


@pytest.mark.parametrize("kind", ["/dev/zero", "/dev/urandom", "fifo"])
def test_sources_and_targets_that_are_devices(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "fifo" if kind == "fifo" else Path(kind)
    if kind == "fifo":
        os.mkfifo(path)
    done = cli("inspect", str(path), timeout=60)
    assert done.returncode == 2
    one_line_error(done)
    done = cli("inspect", "example:zlab-dflash", "--target", str(path), timeout=60)
    assert done.returncode == 2
    assert "not a regular file" in one_line_error(done)


# --------------------------------------------------------------------------------------------
# What convert reads and carries into OUT
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shard", ["../x.safetensors", "ABSOLUTE"])
def test_convert_refuses_an_index_pointing_outside(sharded: Path, shard: str) -> None:
    if shard == "ABSOLUTE":
        shard = str(sharded.parent / "x.safetensors")
    point_index(sharded, shard)
    before = tree(sharded)
    out = sharded.parent / "out"
    done = cli("convert", str(sharded), "-o", str(out))
    assert done.returncode == 1
    assert "points outside the output" in one_line_error(done)
    assert not out.exists() and tree(sharded) == before
    assert not [p for p in sharded.parent.iterdir() if ".dflash-tools-" in p.name]  # no staging left


@pytest.mark.parametrize("kind", ["/dev/zero", "/dev/urandom", "fifo", "outside-file"])
@pytest.mark.parametrize("mode", ["output", "copy", "in-place"])
def test_convert_refuses_devices_fifos_and_links_out(tmp_path: Path, kind: str, mode: str) -> None:
    # A link to /dev/zero once filled the disk at gigabytes a second; a link to a file of the
    # user's (~/.ssh/id_rsa) would have been carried into OUT, and on to --push-to-hub.
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", testing.TINY)
    extra = folder / "extra.safetensors" if kind.startswith("/dev") else folder / "notes.txt"
    if kind == "fifo":
        os.mkfifo(extra)
    elif kind == "outside-file":
        (tmp_path / "id_rsa").write_text("PRIVATE KEY")
        extra.symlink_to(tmp_path / "id_rsa")
    else:
        extra.symlink_to(kind)
    before = tree(folder)
    out = tmp_path / "out"
    args = ["--in-place", "--block-size", "8"] if mode == "in-place" else ["-o", str(out)]
    if mode == "copy":
        args += ["--link-mode", "copy"]
    done = cli("convert", str(folder), *args, timeout=60)
    assert done.returncode == 1, done.stderr
    message = one_line_error(done)
    assert "not a regular file" in message or "links outside the checkpoint folder" in message
    assert not out.exists() and tree(folder) == before
    assert not [p for p in tmp_path.iterdir() if ".dflash-tools-" in p.name]


def test_links_inside_the_folder_are_fine(tmp_path: Path) -> None:
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", testing.TINY)
    (folder / "README.md").write_text("# draft\n")
    (folder / "MODEL_CARD.md").symlink_to("README.md")
    done = cli("convert", str(folder), "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "MODEL_CARD.md").read_text() == "# draft\n"


# --------------------------------------------------------------------------------------------
# Where convert writes
# --------------------------------------------------------------------------------------------


def test_output_that_is_a_symlink(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "out"
    link.symlink_to(elsewhere)
    done = cli("convert", "example:zlab-dflash", "-o", str(link))
    assert done.returncode == 2
    assert "not a folder" in one_line_error(done)
    assert not any(elsewhere.iterdir()) and link.is_symlink()


def test_output_reached_through_a_link_into_the_source(tmp_path: Path) -> None:
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", testing.TINY)
    before = tree(folder)
    (tmp_path / "link").symlink_to(folder)
    done = cli("convert", str(folder), "-o", str(tmp_path / "link" / "out"))
    assert done.returncode == 2
    assert "source folder" in one_line_error(done)
    assert tree(folder) == before


def test_output_that_is_a_dangling_symlink(tmp_path: Path) -> None:
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere")
    done = cli("convert", "example:zlab-dflash", "-o", str(link))
    assert done.returncode == 2
    one_line_error(done)
    assert not (tmp_path / "nowhere").exists()


@contextlib.contextmanager
def read_only(folder: Path, how: str) -> Iterator[None]:
    """Make `folder` read-only for root too (chmod does not stop root), or skip."""
    if how == "chattr":
        if shutil.which("chattr") is None:
            pytest.skip("chattr is not installed")
        done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not supported here: {done.stderr.strip()}")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        return
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a read-only bind mount needs root and mount(8)")
    first = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if first.returncode != 0:
        pytest.skip(f"bind mounts are not allowed here: {first.stderr.strip()}")
    try:
        second = subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True, text=True)
        if second.returncode != 0:
            pytest.skip(f"read-only remounts are not allowed here: {second.stderr.strip()}")
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize("how", ["read-only-mount", "chattr"])
def test_in_place_on_a_read_only_folder(tmp_path: Path, how: str) -> None:
    spec = testing.TINY
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", spec)
    config = json.loads((folder / "config.json").read_text())
    del config["dflash_config"]["sample_from_anchor"]  # so there is something to write
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    before = tree(folder)
    with read_only(folder, how):
        probe = subprocess.run(["touch", str(folder / "probe")], capture_output=True)
        assert probe.returncode != 0, "the folder is still writable"
        done = cli("convert", str(folder), "--in-place")
    assert done.returncode == 2, done.stderr
    assert "not writable" in one_line_error(done)
    assert tree(folder) == before
    assert not [p for p in tmp_path.iterdir() if ".dflash-tools-" in p.name]


def test_in_place_with_one_immutable_file(tmp_path: Path) -> None:
    """The folder is writable but config.json cannot be replaced: a clean failure, nothing half-done."""
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", testing.TINY)
    config = json.loads((folder / "config.json").read_text())
    del config["dflash_config"]["sample_from_anchor"]
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    before = tree(folder)
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    if subprocess.run(["chattr", "+i", str(folder / "config.json")], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:
        done = cli("convert", str(folder), "--in-place", "--no-backup")
    finally:
        subprocess.run(["chattr", "-i", str(folder / "config.json")], check=True)
    assert done.returncode in (1, 2), done.stderr
    one_line_error(done)
    assert tree(folder) == before
    assert inspect_checkpoint(str(folder)).ok
