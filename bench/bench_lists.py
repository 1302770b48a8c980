"""Checks of the lists a config carries are linear: a million layer ids cost about ten times 100,000.

For each list a config can carry (z-lab `target_layer_ids`, speculators `aux_hidden_state_layer_ids`,
`layer_types`, `architectures`), builds a real checkpoint whose list holds N entries, out of order
and with repeats (so every list check reports), and times read + inspect (library calls, the best
of three) for a small and a ten times larger N. Prints each time and the ratio against the small N
measured in this run: linear is ~10; the old `ids.count(i)` duplicate check was quadratic (~100,
and 1,000,000 ids never finished). Also the real CLI on the largest config, and the findings count.

    python bench/bench_lists.py            # N = 100,000 and 1,000,000
    python bench/bench_lists.py --quick --check   # N = 10,000 and 100,000, no CLI run; exit 1 on a ratio above 25
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dflash_tools_testing as testing  # noqa: E402
from dflash_tools.inspect import inspect_loaded  # noqa: E402
from dflash_tools.reading.source import load_checkpoint  # noqa: E402

# A ratio above this (for 10x the entries) is not linear, whatever the machine's load.
MAX_RATIO = 25.0


def ids(count: int) -> list[int]:
    return [(index * 7919) % (count // 2 + 1) for index in range(count)]  # out of order, each id twice


LISTS: dict[str, tuple[str, Callable[[dict[str, Any], int], None]]] = {
    "z-lab target_layer_ids": ("zlab-dflash", lambda c, n: c["dflash_config"].__setitem__("target_layer_ids", ids(n))),
    "speculators aux_hidden_state_layer_ids": (
        "speculators-dflash",
        lambda c, n: c.__setitem__("aux_hidden_state_layer_ids", [i + 1 for i in ids(n)]),
    ),
    "layer_types": ("zlab-dflash", lambda c, n: c.__setitem__("layer_types", ["full_attention", "bogus"] * (n // 2))),
    "architectures": ("zlab-dflash", lambda c, n: c.__setitem__("architectures", ["DFlashDraftModel"] * n)),
}


def build(root: Path, name: str, count: int) -> Path:
    dialect, fill = LISTS[name]
    folder = testing.write_checkpoint(root / f"{name.replace(' ', '-')}-{count}", dialect, testing.TINY)
    config = json.loads((folder / "config.json").read_text())
    fill(config, count)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def best_of_three(folder: Path) -> tuple[float, int, int]:
    times = []
    findings = omitted = 0
    for _ in range(3):
        started = time.perf_counter()
        report = inspect_loaded(load_checkpoint(str(folder)))
        times.append(time.perf_counter() - started)
        findings, omitted = len(report.findings), sum(report.omitted.values())
    return min(times), findings, omitted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 and 100,000 entries (CI)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 when a ratio is above {MAX_RATIO:g}")
    parser.add_argument("--sizes", type=int, nargs=2, metavar=("SMALL", "LARGE"), help="entries to compare")
    args = parser.parse_args(argv)
    small, large = args.sizes or ((10_000, 100_000) if args.quick else (100_000, 1_000_000))
    failed = []
    print(f"| list | {small:,} entries | {large:,} entries | ratio (linear ~10) | findings at {large:,} |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="dflash-bench-lists-") as tmp:
        largest: Path | None = None
        for name in LISTS:
            base, _, _ = best_of_three(build(Path(tmp), name, small))
            folder = build(Path(tmp), name, large)
            largest = largest or folder
            seconds, findings, omitted = best_of_three(folder)
            ratio = seconds / max(base, 1e-6)
            print(f"| {name} | {base:.3f} s | {seconds:.3f} s | {ratio:.1f} | {findings} (+{omitted} omitted) |")
            if ratio > MAX_RATIO:
                failed.append(f"{name}: ratio {ratio:.1f}")
        assert largest is not None
        if not args.quick:
            cli_run(largest, large)
    for problem in failed:
        print(f"  not linear: {problem}")
    return 1 if failed and args.check else 0


def cli_run(largest: Path, large: int) -> None:
    """The real CLI on the largest target_layer_ids config (interpreter start included)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "dflash_tools", "inspect", str(largest), "--json"], capture_output=True, timeout=600
    )
    cli = time.perf_counter() - started
    document = json.loads(done.stdout)
    print(
        f"\nreal CLI, `dflash-tools inspect --json` on {large:,} target_layer_ids: {cli:.2f} s "
        f"(exit {done.returncode}, {len(document['findings'])} findings, {len(done.stdout):,} bytes of JSON)"
    )


if __name__ == "__main__":
    sys.exit(main())
