"""A full disk ends convert with a one-line error naming the file being written (issue 12).

The disk really fills: the output goes to a small tmpfs mounted for the test, so ENOSPC comes
from the kernel, not from a mock. Mounting needs root; elsewhere the test is skipped.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from tests.conftest import CheckpointFactory


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


def test_disk_full_names_the_file(make_checkpoint: CheckpointFactory, small_disk: Path) -> None:
    source = make_checkpoint("zlab-dflash2")
    assert (source / "model.safetensors").stat().st_size > 96 * 1024
    result = CliRunner().invoke(app, ["convert", str(source), "-o", str(small_disk / "out"), "--link-mode", "copy"])
    assert result.exit_code == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error:") and "No space left on device" in lines[0], result.stderr
    assert "model.safetensors" in lines[0], result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    # Nothing half-written is left on the full disk.
    assert list(small_disk.iterdir()) == []


def test_disk_full_while_writing_the_config_names_it(make_checkpoint: CheckpointFactory, small_disk: Path) -> None:
    # A config-only draft on a disk with no room left: the small config write fails inside
    # write()/flush(), where the OS error carries no file name of its own.
    source = small_disk / "draft"
    source.mkdir()
    (source / "config.json").write_bytes((make_checkpoint("zlab-dflash2") / "config.json").read_bytes())
    filler = small_disk / "filler"
    with open(filler, "wb", buffering=0) as handle, pytest.raises(OSError):
        while True:
            handle.write(b"\0" * 4096)
    result = CliRunner().invoke(app, ["convert", str(source), "-o", str(small_disk / "out"), "--to", "speculators"])
    assert result.exit_code == 1, result.stderr
    first = result.stderr.splitlines()[0]
    assert "No space left on device" in first and "config.json" in first, result.stderr
    assert sorted(p.name for p in small_disk.iterdir()) == ["draft", "filler"]
