"""Kill a conversion with SIGKILL at exact points: the source stays intact, the output is whole or absent.

The child process stops at a named point (`DFLASH_TOOLS_TEST_PAUSE_AT`, a test-only hook in
`files.atomic.pause_point`) and announces it through a marker file; the test then kills it, so every
kill lands at the same place on every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import dflash_tools_testing as testing
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.safetensors_header import expected_nbytes

STAGES_TO_OUTPUT = ["staged", "config-written", "repacking", "built", "verified", "published"]


def tree_hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def make_source(tmp_path: Path, shards: int = 2) -> Path:
    """A speculators draft with embed_tokens, so converting to z-lab repacks a shard."""
    spec = replace(testing.TINY, with_embed_tokens=True, sample_from_anchor=None)
    rng = np.random.default_rng(1)
    data = {name: rng.bytes(expected_nbytes(d, s)) for name, d, s in testing.tensor_table(spec)}
    return testing.write_checkpoint(tmp_path / "source", "speculators-dflash", spec, shards=shards, data=data)


def dflash_tools(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `dflash-tools ARGS` to the end (no pause hook); its output captured as text."""
    return subprocess.run([sys.executable, "-m", "dflash_tools", *args], capture_output=True, text=True)


def convert_reference(source: Path, out: Path) -> Path:
    """What an uninterrupted `convert SOURCE -o OUT --to zlab` writes."""
    done = dflash_tools("convert", str(source), "-o", str(out), "--to", "zlab", "-q")
    assert done.returncode == 0, done.stderr
    return out


def run_until(stage: str, args: list[str], marker: Path) -> int:
    """Start `dflash-tools ARGS`, wait for it to reach `stage`, SIGKILL it; returns its status."""
    env = dict(os.environ, DFLASH_TOOLS_TEST_PAUSE_AT=stage, DFLASH_TOOLS_TEST_PAUSE_FILE=str(marker))
    child = subprocess.Popen(
        [sys.executable, "-m", "dflash_tools", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        if child.poll() is not None:
            out, err = child.communicate()
            raise AssertionError(f"child exited {child.returncode} before {stage}: {err.decode()}")
        if time.monotonic() > deadline:  # pragma: no cover - a hang is a failure, not a wait
            child.kill()
            raise AssertionError(f"child never reached {stage}")
        time.sleep(0.01)
    assert marker.read_text() == stage
    child.send_signal(signal.SIGKILL)
    child.communicate()
    return child.returncode


def assert_complete_and_valid(folder: Path, reference: Path) -> None:
    report = inspect_checkpoint(str(folder))
    assert report.ok, [f.message for f in report.findings]
    assert not {f.code for f in report.findings} & {"DFT010", "DFT011", "DFT012"}
    assert tree_hashes(folder) == tree_hashes(reference)


@pytest.mark.parametrize("stage", STAGES_TO_OUTPUT)
def test_killed_conversion_leaves_source_intact_and_output_whole_or_absent(tmp_path: Path, stage: str) -> None:
    source = make_source(tmp_path)
    before = tree_hashes(source)
    reference = convert_reference(source, tmp_path / "reference")
    out = tmp_path / "out"
    status = run_until(stage, ["convert", str(source), "-o", str(out), "--to", "zlab"], tmp_path / "marker")
    assert status == -signal.SIGKILL
    assert tree_hashes(source) == before
    if stage == "published":
        assert_complete_and_valid(out, reference)
    else:
        assert not out.exists()
    # Whatever the kill left behind is hidden and named as dflash-tools' staging, never `out`.
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in {"source", "reference", "out", "marker"}]
    assert all(name.startswith(".out.dflash-tools-") for name in leftovers)
    # A rerun succeeds (stale staging folders do not get in the way).
    rerun = dflash_tools("convert", str(source), "-o", str(out), "--to", "zlab", "--force", "-q")
    assert rerun.returncode == 0, rerun.stderr
    assert_complete_and_valid(out, reference)


def test_killed_replacement_of_an_existing_output(tmp_path: Path) -> None:
    source = make_source(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("previous result")
    status = run_until(
        "verified", ["convert", str(source), "-o", str(out), "--to", "zlab", "--force"], tmp_path / "marker"
    )
    assert status == -signal.SIGKILL
    assert (out / "old.txt").read_text() == "previous result"


# A single-file checkpoint has no index to stage renames through: no "renamed" stage with 1 shard.
IN_PLACE_KILLS = [
    (stage, shards)
    for shards in (1, 2)
    for stage in ("verified", "backed-up", "replaced", "renamed", "config-replaced")
    if not (stage == "renamed" and shards == 1)
]


@pytest.mark.parametrize(("stage", "shards"), IN_PLACE_KILLS)
def test_killed_in_place_conversion_leaves_a_consistent_folder(tmp_path: Path, stage: str, shards: int) -> None:
    source = make_source(tmp_path, shards)
    original = tree_hashes(source)
    new = tree_hashes(convert_reference(source, tmp_path / "expected"))
    status = run_until(stage, ["convert", str(source), "--in-place", "--to", "zlab"], tmp_path / "marker")
    assert status == -signal.SIGKILL
    now = tree_hashes(source)
    for name, digest in now.items():
        if name.endswith(".bak"):
            assert digest == original[name.removesuffix(".bak")]
        elif "dflash-tools-new" in name:
            assert digest in new.values(), name  # a new shard under its interim name
        elif name != "model.safetensors.index.json":
            assert digest in (original.get(name), new.get(name)), name
    json.loads((source / "config.json").read_text())
    # Whatever the instant, the folder is a consistent checkpoint: the index names files that
    # hold what it promises, and the config describes the weights.
    report = inspect_checkpoint(str(source))
    assert report.ok, [f.message for f in report.findings]
    if stage == "config-replaced":
        assert now["config.json"] == new["config.json"]


@pytest.mark.parametrize("stage", ["replaced", "renamed"])
def test_rerun_after_a_killed_in_place_swap_restores_final_shard_names(tmp_path: Path, stage: str) -> None:
    """A kill between the two index writes leaves interim shard names; the next in-place run finishes the swap."""
    source = make_source(tmp_path, shards=2)
    expected = convert_reference(source, tmp_path / "expected")
    status = run_until(stage, ["convert", str(source), "--in-place", "--to", "zlab"], tmp_path / "marker")
    assert status == -signal.SIGKILL
    rerun = dflash_tools("convert", str(source), "--in-place", "--to", "zlab", "--force", "--json")
    assert rerun.returncode == 0, rerun.stderr
    index = json.loads((source / "model.safetensors.index.json").read_text())
    assert not any("dflash-tools-new" in name for name in index["weight_map"].values())
    assert not list(source.glob("*dflash-tools-new*"))
    final = {k: v for k, v in tree_hashes(source).items() if not k.endswith(".bak")}
    assert final == tree_hashes(expected)
    assert inspect_checkpoint(str(source)).ok


def test_staging_folders_of_killed_runs_are_removed(tmp_path: Path) -> None:
    source = make_source(tmp_path)
    dead_pid = 2**22 + 12345  # above the default pid_max: no such process
    stale = tmp_path / f".out.dflash-tools-partial-{dead_pid}-0badc0de"
    live = tmp_path / f".out.dflash-tools-partial-{os.getpid()}-feedbeef"
    aside = tmp_path / f".out.dflash-tools-old-{dead_pid}-0badc0de"
    for folder in (stale, live, aside):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    done = dflash_tools("convert", str(source), "-o", str(tmp_path / "out"), "-q")
    assert done.returncode == 0, done.stderr
    assert not stale.exists()
    assert live.exists()  # a run still in progress keeps its folder
    assert aside.exists()  # a previous OUT moved aside is never deleted by a later run
