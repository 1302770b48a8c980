"""Concurrent-convert drill (issue 12): two real `dflash-tools convert` processes started together.

Scenarios, each a pair of processes on one checkpoint:

- `config`       two `--in-place` runs whose only change is config.json;
- `repack`       two `--in-place --to zlab` runs that repack a single shard (tensors dropped);
- `sharded`      the same on a two-shard checkpoint (index swap with interim names);
- `output`       two `-o OUT` runs racing for one destination;
- `mixed`        one `--in-place` run and one `-o OUT` run reading the same folder.

After each pair, nothing may be lost: every run exits 0, or 2 with "another convert is writing"
(or, for `-o`, "OUT exists and is not empty" when the other run already filled it);
at least one run wrote; every `.bak` holds the original bytes of its file; the checkpoint (and
OUT) inspect without errors; no staging, interim, link or lock file is left anywhere.

    python bench/lock_drill.py --pairs 100          # each scenario 100 times
    python bench/lock_drill.py --pairs 3 --json     # the short version the test suite runs
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

import dflash_tools_testing as testing
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.safetensors_header import expected_nbytes

SCENARIOS = ("config", "repack", "sharded", "output", "mixed")
BUSY = "another convert is writing"


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()}


def _make(folder: Path, scenario: str) -> None:
    if scenario == "config":
        spec = replace(testing.TINY_DFLASH2, sample_from_anchor=None)
        testing.write_checkpoint(folder, "zlab-dflash2", spec)
        return
    spec = replace(testing.TINY, with_embed_tokens=True, sample_from_anchor=None)
    rng = np.random.default_rng(1)
    data = {name: rng.bytes(expected_nbytes(d, s)) for name, d, s in testing.tensor_table(spec)}
    testing.write_checkpoint(folder, "speculators-dflash", spec, shards=2 if scenario == "sharded" else 1, data=data)


def _commands(scenario: str, folder: Path, out: Path) -> list[list[str]]:
    base = [sys.executable, "-m", "dflash_tools", "convert", str(folder), "-q"]
    to = [] if scenario == "config" else ["--to", "zlab"]
    if scenario == "output":
        return [[*base, "-o", str(out), *to], [*base, "-o", str(out), *to]]
    if scenario == "mixed":
        return [[*base, "--in-place", *to], [*base, "-o", str(out), *to]]
    return [[*base, "--in-place", *to], [*base, "--in-place", *to]]


def _leftovers(*folders: Path) -> list[str]:
    found = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if "dflash-tools" in entry.name or entry.name.endswith(".tmp"):
                found.append(str(entry))
    return found


def run_pair(work: Path, scenario: str, number: int) -> tuple[list[str], list[int]]:
    """One pair; returns (problems, exit codes)."""
    base = work / f"{scenario}-{number}"
    folder, out = base / "draft", base / "out"
    _make(folder, scenario)
    original = _hashes(folder)
    children = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for cmd in _commands(scenario, folder, out)
    ]
    results = [(child.wait(timeout=120), child.communicate()[1]) for child in children]
    problems: list[str] = []
    codes = [code for code, _ in results]
    for code, err in results:
        # Refused cleanly: the other run holds the lock, or already filled OUT.
        if code == 2 and (BUSY in err or "exists and is not empty" in err):
            continue
        if code != 0:
            problems.append(f"exit {code}: {err.strip()[:300]}")
    if 0 not in codes:
        problems.append("no run wrote")
    after = _hashes(folder)
    for name, digest in after.items():
        if name.endswith(".bak") and original.get(name[: -len(".bak")]) != digest:
            problems.append(f"{name} does not hold the original bytes of {name[: -len('.bak')]}")
    in_place_wrote = any(
        code == 0 and "--in-place" in cmd
        for (code, _), cmd in zip(results, _commands(scenario, folder, out), strict=True)
    )
    if not in_place_wrote and after != original:
        problems.append("the source changed although no in-place run wrote")
    for where in (folder, out):
        if where.is_dir():
            report = inspect_checkpoint(str(where))
            if not report.ok:
                problems.append(
                    f"{where.name}: " + "; ".join(f.message for f in report.findings if f.severity == "error")
                )
    problems += [f"left behind: {p}" for p in _leftovers(folder, base)]
    shutil.rmtree(base)
    return problems, codes


def _kind(problem: str) -> str:
    if "does not hold the original" in problem:
        return "backup lost the original"
    if problem.startswith("left behind"):
        return "files left behind"
    if problem.startswith(("draft:", "out:")):
        return "checkpoint inspects with errors"
    if "already exists (a backup" in problem:
        return "refused: stale .bak from the other run"
    if problem.startswith("exit"):
        return "other failed run"
    return problem


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100, help="pairs per scenario (default 100)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="dflash-lock-drill-"))
    started = time.perf_counter()
    figures: dict[str, dict[str, object]] = {}
    failures: list[str] = []
    try:
        for scenario in scenarios:
            outcomes: Counter[str] = Counter()
            kinds: Counter[str] = Counter()
            lost = 0
            for number in range(args.pairs):
                problems, codes = run_pair(work, scenario, number)
                outcomes[" ".join(map(str, sorted(codes)))] += 1
                if problems:
                    lost += 1
                    failures += [f"{scenario} #{number}: {p}" for p in problems[:3]]
                kinds.update({_kind(p) for p in problems})
            figures[scenario] = {
                "pairs": args.pairs,
                "failed": lost,
                "exit codes": dict(outcomes),
                "problems (pairs)": dict(kinds),
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    total = sum(int(f["failed"]) for f in figures.values())  # type: ignore[call-overload]
    if args.json:
        print(json.dumps({"seconds": round(elapsed, 1), "failed_pairs": total, "scenarios": figures}))
    else:
        print(f"lock drill: {args.pairs} pairs x {len(scenarios)} scenarios in {elapsed:.0f} s")
        for scenario, figure in figures.items():
            print(f"  {scenario:8} failed {figure['failed']}/{figure['pairs']}   exit codes {figure['exit codes']}")
            for kind, count in dict(figure["problems (pairs)"]).items():  # type: ignore[call-overload]
                print(f"           {kind}: {count}")
        for line in failures[:20]:
            print("  " + line)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
