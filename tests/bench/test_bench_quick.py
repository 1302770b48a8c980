"""Every script in bench/ runs in CI in a quick mode, so none can break unnoticed.

`bench/bench_convert.py` once failed at its first line (`from dflash_tools import repack`, a module
that had moved) and nothing noticed: the docs cited it, nothing ran it. Each script is listed here
with its quick command line, or with the test that already runs its quick mode; a new script
must be added (the first test fails until it is). The runs take a minute or more in all, so they
are `ci_only` (.ci/run runs them after the default suite).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

# Script -> its quick command line (run here), or the test file that runs its quick mode.
QUICK: dict[str, list[str] | str] = {
    "bench_startup.py": [sys.executable, "bench/bench_startup.py", "--quick"],
    "bench_inspect.py": [sys.executable, "bench/bench_inspect.py", "--quick"],
    "bench_convert.py": [sys.executable, "bench/bench_convert.py", "--quick"],
    "bench_engine.py": [sys.executable, "bench/bench_engine.py", "--quick"],
    "bench_prediction.py": [sys.executable, "bench/bench_prediction.py", "--quick"],
    "gpu_smoke.sh": ["bash", "bench/gpu_smoke.sh"],  # QUICK=1: the same steps on the CPU, no install
    "figures.py": [sys.executable, "bench/figures.py", "--check"],
    "kill_drill.py": "tests/hostile/test_hostile_kill_drill.py",
    "lock_drill.py": "tests/convert/test_convert_lock.py",
    "net_faults.py": "tests/hostile/test_hostile_network.py",
    "bench_lists.py": "tests/hostile/test_hostile_lists.py",
    "bench_convert_lists.py": "tests/hostile/test_hostile_readers.py",
    "hostile_hub.py": [sys.executable, "bench/hostile_hub.py", "--quick", "--check"],
}
NEEDS_TORCH = {"bench_engine.py", "bench_prediction.py", "gpu_smoke.sh"}


def test_every_bench_script_has_a_quick_run() -> None:
    scripts = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")}
    assert scripts == set(QUICK), "add the new script to QUICK with its quick command line"
    for script, runner in QUICK.items():
        if isinstance(runner, str):
            text = (ROOT / runner).read_text(encoding="utf-8")
            assert f'"{script}"' in text or f"bench/{script}" in text, f"{runner} does not run {script}"


@pytest.mark.ci_only
@pytest.mark.parametrize("script", [s for s, r in QUICK.items() if isinstance(r, list)])
def test_quick_mode_runs(script: str, tmp_path: Path) -> None:
    if script in NEEDS_TORCH:
        pytest.importorskip("torch", reason="the reference engine needs torch (the torch extra)")
    env = {**os.environ, "QUICK": "1", "OUT": str(tmp_path / "out"), "TMPDIR": str(tmp_path)}
    done = subprocess.run(QUICK[script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{script}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip() or done.stderr.strip()
