"""`convert` on a config with a long list costs at most twice what `inspect` costs, in CPU and memory.

Builds a real z-lab DFlash checkpoint (testing.TINY) whose config.json also carries a key no engine
reads holding N integers (convert keeps it byte for byte while it normalizes the rest), then runs
the real CLI on it, alternately: `dflash-tools inspect DRAFT --json` and `dflash-tools convert DRAFT
-o OUT` (which writes, verifies and renames a new checkpoint). Each run is its own process; its CPU
time (user + system) and peak memory (max RSS) come from the kernel (`os.wait4`), interpreter start
included for both. Prints, per command, the median and the range over the repetitions, and the
ratio convert / inspect of the medians with the widest range the two ranges allow, all measured in
this run, so a busy machine slows both alike.

`convert/json_edit.py` used to parse the text twice in pure Python, one node object per list entry:
on a million entries, 18 times the CPU of inspect and about 1 GB.

    python bench/bench_convert_lists.py                    # N = 1,000,000, 5 repetitions each
    python bench/bench_convert_lists.py --quick --check    # N = 100,000, 3 each; exit 1 above 2x
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dflash_tools_testing as testing  # noqa: E402

MAX_RATIO = 2.0
LIST_KEY = "dflash_tools_bench_list"  # a key no engine reads (kept as it is by convert)


def build(root: Path, count: int) -> Path:
    folder = testing.write_checkpoint(root / "draft", "zlab-dflash", testing.TINY)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config[LIST_KEY] = [(index * 7919) % 100_003 for index in range(count)]
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return folder


def measure(command: list[str]) -> tuple[float, float, int]:
    """(CPU seconds, peak MiB, exit code) of one process."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.stderr is not None
    error = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    if process.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {process.returncode}: {error[-500:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, process.returncode


def spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 entries, 3 repetitions (CI)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 when a median ratio is above {MAX_RATIO:g}")
    parser.add_argument("--entries", type=int, help="entries in the list (default 1,000,000; --quick 100,000)")
    parser.add_argument("--repeat", type=int, help="repetitions of each command (default 5; --quick 3)")
    args = parser.parse_args(argv)
    count = args.entries or (100_000 if args.quick else 1_000_000)
    repeat = args.repeat or (3 if args.quick else 5)
    cli = [sys.executable, "-m", "dflash_tools"]
    with tempfile.TemporaryDirectory(prefix="bench-convert-lists-") as tmp:
        root = Path(tmp)
        draft = build(root, count)
        size = (draft / "config.json").stat().st_size
        runs: dict[str, list[tuple[float, float]]] = {"inspect": [], "convert": []}
        for index in range(repeat):
            cpu, peak, _ = measure([*cli, "inspect", str(draft), "--json"])
            runs["inspect"].append((cpu, peak))
            out = root / f"out-{index}"
            cpu, peak, code = measure([*cli, "convert", str(draft), "-o", str(out)])
            if code != 0 or not (out / "config.json").is_file():
                raise SystemExit(f"convert did not write {out}")
            kept = json.loads((out / "config.json").read_text(encoding="utf-8"))[LIST_KEY]
            if len(kept) != count:
                raise SystemExit(f"convert lost entries of {LIST_KEY}: {len(kept)} of {count}")
            runs["convert"].append((cpu, peak))
            shutil.rmtree(out)
    print(f"config.json: {size / 2**20:.1f} MiB, a list of {count:,} integers; {repeat} runs of each, alternately")
    print("| command | CPU s, median (range) | peak MiB, median (range) |")
    print("|---|---:|---:|")
    stats = {}
    for name, values in runs.items():
        cpu = spread([c for c, _ in values])
        peak = spread([p for _, p in values])
        stats[name] = (cpu, peak)
        print(f"| {name} | {cpu[0]:.2f} ({cpu[1]:.2f}-{cpu[2]:.2f}) | {peak[0]:.0f} ({peak[1]:.0f}-{peak[2]:.0f}) |")
    failed = []
    for index, what in ((0, "CPU"), (1, "memory")):
        ours, theirs = stats["convert"][index], stats["inspect"][index]
        ratio, low, high = ours[0] / theirs[0], ours[1] / theirs[2], ours[2] / theirs[1]
        print(f"convert / inspect, {what}: {ratio:.2f}x (range {low:.2f}x-{high:.2f}x)")
        if ratio > MAX_RATIO:
            failed.append(f"{what} {ratio:.2f}x")
    if args.check and failed:
        print(f"above {MAX_RATIO:g}x: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
