"""Two converts never write one folder at once (issue 12): locks, refusals, mid-swap repair, a short drill.

The locks are real `flock`s; a lock held by this test process conflicts with the one the CLI
takes (flock locks belong to open file descriptions, not processes).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dflash_tools_testing as testing
from dflash_tools.cli import app
from dflash_tools.files.locking import LockBusy, folder_lock, lock_file_path, name_lock
from dflash_tools.inspect import inspect_checkpoint
from tests.conftest import CheckpointFactory

ROOT = Path(__file__).parents[2]
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stderr


def hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def unnormalized(make_checkpoint: CheckpointFactory) -> Path:
    return make_checkpoint("zlab-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=None))


def test_in_place_refuses_while_another_run_writes(make_checkpoint: CheckpointFactory) -> None:
    folder = unnormalized(make_checkpoint)
    before = hashes(folder)
    with folder_lock(folder, exclusive=True):
        code, err = invoke("convert", str(folder), "--in-place")
    assert code == 2
    assert err.startswith(f"error: another convert is writing {folder}")
    assert hashes(folder) == before
    # Released, the same command works, and leaves no lock or staging file anywhere.
    code, err = invoke("convert", str(folder), "--in-place")
    assert code == 0, err
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]


def test_output_refuses_while_another_run_writes_the_same_destination(
    make_checkpoint: CheckpointFactory, tmp_path: Path
) -> None:
    source = make_checkpoint("zlab-dflash2")
    out = tmp_path / "out"
    with name_lock(out):
        code, err = invoke("convert", str(source), "-o", str(out))
        assert code == 2 and f"another convert is writing {out}" in err
        assert not out.exists()
    assert not lock_file_path(out).exists()
    code, err = invoke("convert", str(source), "-o", str(out))
    assert code == 0, err
    assert not lock_file_path(out).exists()
    assert inspect_checkpoint(str(out)).ok


def test_reading_a_source_that_is_being_rewritten_is_refused(
    make_checkpoint: CheckpointFactory, tmp_path: Path
) -> None:
    source = unnormalized(make_checkpoint)
    with folder_lock(source, exclusive=True):
        code, err = invoke("convert", str(source), "-o", str(tmp_path / "out"))
    assert code == 2 and f"another convert is writing {source}" in err
    # Two readers do not block each other, and the lock writes nothing into the source.
    with folder_lock(source, exclusive=False):
        code, err = invoke("convert", str(source), "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert sorted(p.name for p in source.iterdir()) == ["config.json", "model.safetensors"]


def test_second_in_place_run_during_the_swap_loses_nothing(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    """The issue's reproduction, made deterministic: the first run pauses between backup and swap."""
    folder = unnormalized(make_checkpoint)
    original = (folder / "config.json").read_bytes()
    marker = tmp_path / "marker"
    env = dict(os.environ, DFLASH_TOOLS_TEST_PAUSE_AT="backed-up", DFLASH_TOOLS_TEST_PAUSE_FILE=str(marker))
    first = subprocess.Popen(
        [sys.executable, "-m", "dflash_tools", "convert", str(folder), "--in-place", "-q"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.exists(), first.communicate()
    second = subprocess.run(
        [sys.executable, "-m", "dflash_tools", "convert", str(folder), "--in-place", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    marker.unlink()
    assert first.wait(timeout=60) == 0, first.communicate()
    assert second.returncode == 2 and "another convert is writing" in second.stderr
    assert (folder / "config.json.bak").read_bytes() == original
    assert inspect_checkpoint(str(folder)).ok


def _index_naming_an_interim_shard(tmp_path: Path) -> tuple[Path, str, str]:
    """A 2-shard draft whose index names its first shard by the interim name an in-place run
    gives a new shard: (folder, the shard's final name, its interim name)."""
    spec = replace(testing.TINY, with_embed_tokens=True, sample_from_anchor=None)
    folder = testing.write_checkpoint(tmp_path / "draft", "speculators-dflash", spec, shards=2)
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    first = sorted(set(index["weight_map"].values()))[0]
    interim = first.replace(".safetensors", ".dflash-tools-new.safetensors")
    index["weight_map"] = {k: interim if v == first else v for k, v in index["weight_map"].items()}
    index_path.write_text(json.dumps(index, indent=2))
    return folder, first, interim


def test_index_left_naming_renamed_shards_is_repaired(tmp_path: Path) -> None:
    # A run killed after renaming the shards but before the final index write: the interim names
    # in the index point at files that are gone, while the final names hold the new shards.
    folder, first, _ = _index_naming_an_interim_shard(tmp_path)
    (folder / f".{first}.dflash-tools-link").write_bytes(b"")
    assert not inspect_checkpoint(str(folder)).ok
    code, err = invoke("convert", str(folder), "--in-place", "--to", "zlab")
    assert code == 0, err
    assert inspect_checkpoint(str(folder)).ok
    assert not [p.name for p in folder.iterdir() if "dflash-tools" in p.name]


def test_index_naming_lost_shards_is_named_not_reported_normalized(tmp_path: Path) -> None:
    folder, first, interim = _index_naming_an_interim_shard(tmp_path)
    (folder / first).unlink()
    code, err = invoke("convert", str(folder), "--in-place")
    assert code == 1
    assert "part way through an in-place conversion" in err and interim in err
    assert "already normalized" not in err


def test_short_lock_drill() -> None:
    """bench/lock_drill.py with 2 pairs per scenario (the full run is 100 pairs, by hand)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "lock_drill.py"), "--pairs", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout)
    assert figures["failed_pairs"] == 0
    assert set(figures["scenarios"]) == {"config", "repack", "sharded", "output", "mixed"}


def test_a_run_that_locked_a_removed_lock_file_tries_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock file is removed on release, so a run that opened it just before may lock a file
    that is no longer at the path. It must notice and try again, or two runs would both hold OUT.

    The interleaving is forced at the OS boundary: the racing thread's flock() waits until the
    holder has released (and removed) the file and a new holder has taken a new one.
    """
    destination = tmp_path / "out"
    real_flock = fcntl.flock
    racer: list[int] = []
    opened, released = threading.Event(), threading.Event()

    def flock(fd: int, operation: int) -> None:
        if threading.get_ident() in racer and not released.is_set():
            opened.set()
            released.wait(10)
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    outcome: list[str] = []

    def race() -> None:
        racer.append(threading.get_ident())
        try:
            with name_lock(destination):
                outcome.append("held")
        except LockBusy:
            outcome.append("busy")

    with name_lock(destination):
        thread = threading.Thread(target=race)
        thread.start()
        assert opened.wait(10)
    # The first holder is gone and its file removed; a second run takes a new lock file.
    with name_lock(destination):
        released.set()
        thread.join(10)
        assert outcome == ["busy"]
    assert not lock_file_path(destination).exists()
