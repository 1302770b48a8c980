"""`python -m dflash_tools_testing`: the maintenance entry point that regenerates the bundled examples."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_tools.reading.local import examples_dir


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dflash_tools_testing", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["-x"], ["--", "--help"]])
def test_options_write_nothing(args: list[str], tmp_path: Path) -> None:
    """`--help` once made a folder named `--help` holding every example."""
    done = run(tmp_path, *args)
    assert list(tmp_path.iterdir()) == []
    if args[-1] in ("--help", "-h") and args[0] != "--":
        assert done.returncode == 0 and done.stdout.startswith("usage: python -m dflash_tools_testing")
    else:
        assert done.returncode == 2 and "usage:" in done.stderr


def test_writes_the_bundled_examples(tmp_path: Path) -> None:
    done = run(tmp_path, "out")
    assert done.returncode == 0, done.stderr
    written = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("config.json"))
    assert len(written) == len(done.stdout.splitlines()) + 1  # and tiny-target, which is not printed
    for name in written:
        assert filecmp.cmp(tmp_path / "out" / name, examples_dir() / name, shallow=False), name
