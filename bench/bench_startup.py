"""CLI start-up: `dflash-tools --help` and `dflash-tools inspect --help` against `import typer`.

typer is the floor (the CLI cannot parse a command line without it); the goal is help within 1.5x
the CPU time of `python -c "import typer"`. The three commands run side by side, interleaved round
after round (so the machine's load falls on all of them alike), each in a fresh interpreter with
byte-code caching as an installed package has it (a first, unmeasured round writes the caches).
The CPU time (user + system) of each child comes from wait4; the medians and their ratios are
printed, with the modules the help path loads beyond typer's (what would make it slow: rich,
pydantic, importlib.metadata, a core module).

    python bench/bench_startup.py            # 40 rounds: the figure in docs/benchmarks.md
    python bench/bench_startup.py --quick    # 5 rounds, for CI
    python bench/bench_startup.py --check    # also exit 1 when a ratio is above 1.5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

GOAL = 1.5
HEAVY = {"rich", "pydantic", "torch", "huggingface_hub", "importlib.metadata"}
# The modules a command loads: those of `import typer` alone (no arguments), or of the CLI.
SHOW_MODULES = """
import json, sys
if len(sys.argv) == 1:
    import typer
else:
    from dflash_tools.cli import main
    sys.argv = ["dflash-tools", *sys.argv[1:]]
    try:
        main()
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def cli() -> list[str]:
    """The installed `dflash-tools` script, as a user runs it (else `python -m dflash_tools`)."""
    script = Path(sys.executable).with_name("dflash-tools")
    found = str(script) if script.exists() else shutil.which("dflash-tools")
    return [found] if found else [sys.executable, "-m", "dflash_tools"]


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {process.returncode}")
    return usage.ru_utime + usage.ru_stime


def modules(args: list[str], env: dict[str, str]) -> set[str]:
    done = subprocess.run(
        # -P: the installed package (or PYTHONPATH), not a checkout that happens to be the current folder.
        [sys.executable, "-P", "-c", SHOW_MODULES, *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="5 rounds (CI: it still runs)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 when a ratio is above {GOAL}")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()
    rounds = 5 if args.quick else args.rounds
    # Byte-code caches as an installed package has them (pip compiles on install).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    commands = {
        "import typer": [sys.executable, "-c", "import typer"],
        "dflash-tools --help": [*cli(), "--help"],
        "dflash-tools inspect --help": [*cli(), "inspect", "--help"],
    }
    for argv in commands.values():
        cpu_seconds(argv, env)  # writes the byte-code caches; not measured
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            times[name].append(cpu_seconds(argv, env))
    medians = {name: statistics.median(values) for name, values in times.items()}
    baseline = medians["import typer"]
    ratios = {name: medians[name] / baseline for name in commands if name != "import typer"}
    base = modules([], env)
    extra = {
        "dflash-tools --help": sorted(modules(["--help"], env) - base),
        "dflash-tools inspect --help": sorted(modules(["inspect", "--help"], env) - base),
    }
    if args.json:
        document = {"schema_version": 1, "rounds": rounds, "cpu_seconds": medians, "ratios": ratios, "extra": extra}
        print(json.dumps(document, indent=2))
    else:
        print(f"CPU time (user + system), median of {rounds} interleaved rounds, {os.cpu_count()} CPUs:")
        for name, seconds in medians.items():
            ratio = f"  {ratios[name]:.2f}x import typer (goal <= {GOAL})" if name in ratios else ""
            print(f"  {name:<28} {seconds * 1000:6.0f} ms{ratio}")
        for name, names in extra.items():
            tops = {"importlib.metadata" if m.startswith("importlib.metadata") else m.split(".")[0] for m in names}
            heavy = ", ".join(sorted(tops & HEAVY)) or "none"
            print(f"  {name}: {len(names)} modules beyond typer's, of which heavy: {heavy}")
    return 1 if args.check and any(r > GOAL for r in ratios.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
