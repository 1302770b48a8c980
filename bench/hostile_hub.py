"""A hostile or failing Hub: every case of tests/hostile/hub_cases.py, each in a process of its own.

The stand-in Hub (tests/hub_server.py) runs in this process on 127.0.0.1; the real `dflash-tools`
CLI runs as a child against it through huggingface_hub's own settings (HF_ENDPOINT, HF_HUB_CACHE).
For each case the table shows the exit code, the time against its bound (--timeout x the requests
it needs + a constant), the peak memory of the child (ru_maxrss), and the first line of the
message or the findings. A case ends cleanly under the rules in tests/hostile/hub_cases.py; the
default test suite runs the same cases in process (tests/hostile/test_hostile_hub.py).

    python bench/hostile_hub.py            # every case (~1 min); the table in docs/reliability.md
    python bench/hostile_hub.py --check    # exit 1 unless every case ended cleanly
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.hostile.hub_cases import (  # noqa: E402
    CASES,
    Case,
    Outcome,
    cache_files,
    command_line,
    problems,
    set_up,
    time_bound,
)
from tests.hub_server import HubServer  # noqa: E402


def dead_endpoint() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # closed again: connections are refused


def environment(endpoint: str, work: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "DFLASH_TOOLS_"))}
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HOME=str(work / "hf-home"),
        HF_HUB_CACHE=str(work / "hf-cache"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        NO_COLOR="1",
        COLUMNS="200",
        **extra,
    )
    return env


def run_case(case: Case, work: Path) -> Outcome:
    server = HubServer().start()
    try:
        set_up(case, server)
        endpoint = dead_endpoint() if case.extra.get("unreachable") else server.url
        args, extra = command_line(case, work / "out")
        env = environment(endpoint, work, extra)
        started = time.monotonic()
        child = subprocess.Popen(
            [sys.executable, "-m", "dflash_tools", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        stdout, stderr = child.communicate(timeout=300)
        # communicate() reaped the child; its rusage is what RUSAGE_CHILDREN gained since.
        seconds = time.monotonic() - started
        return Outcome(
            case,
            child.returncode,
            stdout,
            stderr,
            seconds,
            max_rss_mb=_child_peak_mb(),
            cache_files=cache_files(work / "hf-cache"),
        )
    finally:
        server.stop()


def _child_peak_mb() -> float:
    """Peak RSS of the child just reaped: each case runs in a fresh bench process (see main)."""
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def summary(outcome: Outcome) -> str:
    try:
        document = json.loads(outcome.stdout)
    except ValueError:
        return outcome.stderr.splitlines()[0] if outcome.stderr else ""
    if "error" in document:
        return str(document["error"].get("message", ""))
    findings = document.get("findings") or []
    return "; ".join(f"{f['code']} {f['message']}" for f in findings[:2]) or "no findings"


def cell(text: str, limit: int = 140) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one(index: int, startup: float) -> None:
    """Run case `index` and print its outcome as one JSON line (in a process of its own)."""
    case = CASES[index]
    with tempfile.TemporaryDirectory(prefix="dflash-hostile-hub-") as tmp:
        outcome = run_case(case, Path(tmp))
    print(
        json.dumps(
            {
                "exit": outcome.exit_code,
                "seconds": outcome.seconds,
                "bound": time_bound(case, startup),
                "rss_mb": outcome.max_rss_mb,
                "message": summary(outcome),
                "problems": problems(outcome, startup),
            }
        )
    )


def startup_seconds() -> float:
    """What starting the CLI costs here: the slowest of three local `inspect --json` runs (no network)."""
    times = []
    for _ in range(3):
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "dflash_tools", "inspect", "example:zlab-dflash2", "--json"],
            capture_output=True,
            env=environment("http://127.0.0.1:9", Path(tempfile.gettempdir()), {"HF_HUB_OFFLINE": "1"}),
            timeout=120,
        )
        times.append(time.monotonic() - started)
    return max(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 unless every case ended cleanly")
    parser.add_argument(
        "--quick", action="store_true", help="every tenth case only (CI: tests/bench/test_bench_quick.py)"
    )
    parser.add_argument("--case", type=int, help=argparse.SUPPRESS)  # run one case (a child of this script)
    parser.add_argument("--startup", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case is not None:
        one(args.case, args.startup)
        return 0
    started = time.monotonic()
    startup = startup_seconds()
    rows = []
    chosen = list(enumerate(CASES))[:: 10 if args.quick else 1]
    for index, case in chosen:
        # A bench process per case: RUSAGE_CHILDREN then holds that one CLI run's peak memory.
        done = subprocess.run(
            [sys.executable, __file__, "--case", str(index), "--startup", str(startup)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        try:
            result = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            result = {
                "exit": None,
                "seconds": 0,
                "bound": 0,
                "rss_mb": 0,
                "message": "",
                "problems": [done.stderr[-300:]],
            }
        rows.append((case, result))
    print("| case | command | exit | seconds (bound) | peak memory | message (first line) or findings |")
    print("|---|---|---|---|---|---|")
    for case, result in rows:
        command = "dflash-tools " + " ".join(case.args).replace("{out}", "OUT")
        print(
            f"| {cell(case.name, 70)} | `{command}` | {result['exit']} | {result['seconds']:.1f} ({result['bound']:.1f}) "
            f"| {result['rss_mb']:.0f} MB | {cell(result['message'])} |"
        )
    clean = [case for case, result in rows if not result["problems"]]
    peak = max(result["rss_mb"] for _, result in rows)
    print(
        f"\n{len(rows)} hostile cases in {time.monotonic() - started:.0f} s: {len(clean)} ended cleanly, "
        f"{len(rows) - len(clean)} did not; peak memory of any case {peak:.0f} MB; bounds include "
        f"{startup:.1f} s for starting the CLI (measured in this run)"
    )
    for case, result in rows:
        if result["problems"]:
            print(f"  {case.name}: {'; '.join(result['problems'])}")
    return 1 if args.check and len(clean) != len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
