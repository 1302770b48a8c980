"""Network faults on Hub reads: every one ends in the right exit code, one line, and a next step.

A local HTTP server imitating the Hub's API, file and range endpoints (`tests/hub_server.py`)
serves a sharded DFlash2 draft; the real `dflash-tools` CLI runs against it in a subprocess
through huggingface_hub's own mechanisms (HF_ENDPOINT, HF_HUB_CACHE, HF_HUB_OFFLINE), with the
server injecting one fault per scenario: timeouts, 404s, a gated repo, 403 / 429 / 503 answers,
range responses cut short or ignored, the Hub unreachable, offline mode with a partial cache.

For each scenario the table shows the exit code, the first line of the message (or the findings
of a report that still came out) and the next step offered. Every row is checked against what it
must be; `--check` exits 1 on any mismatch (the test suite runs `--quick --check`).

    python bench/net_faults.py              # every scenario, a markdown table (~1 min)
    python bench/net_faults.py --quick      # the core scenarios, for CI
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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dflash_tools_testing as testing  # noqa: E402
from tests.hub_server import HubServer, safetensors_bytes  # noqa: E402

REPO = "org/draft"
SPEC = replace(testing.TINY_DFLASH2, sample_from_anchor=False)
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def repo_files() -> dict[str, bytes]:
    table = testing.tensor_table(SPEC)
    half = len(table) // 2
    parts = (table[:half], table[half:])
    weight_map = {name: SHARDS[i] for i, part in enumerate(parts) for name, _, _ in part}
    return {
        "config.json": json.dumps(testing.make_config("zlab-dflash2", SPEC), indent=2).encode(),
        "model.safetensors.index.json": json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}).encode(),
        SHARDS[0]: safetensors_bytes(parts[0], {"format": "pt"}),
        SHARDS[1]: safetensors_bytes(parts[1], {"format": "pt"}),
    }


@dataclass
class Scenario:
    name: str
    args: list[str]
    exit_code: int
    expect: list[str]  # substrings of the message line (exit 2) or of the findings (exit 0 / 1)
    expect_hint: list[str] = field(default_factory=list)
    setup: Callable[[HubServer], None] | None = None
    cached: tuple[str, ...] = ()  # files put in the Hub cache (by huggingface_hub) beforehand
    offline: bool = False
    unreachable: bool = False
    quick: bool = False


def slow(fragment: str, seconds: float) -> Callable[[HubServer], None]:
    def setup(hub: HubServer) -> None:
        hub.slow[fragment] = seconds

    return setup


def fail(fragment: str, status: int, message: str) -> Callable[[HubServer], None]:
    def setup(hub: HubServer) -> None:
        hub.fail[fragment] = (status, message)

    return setup


def switch(name: str, value: object) -> Callable[[HubServer], None]:
    def setup(hub: HubServer) -> None:
        setattr(hub, name, value)

    return setup


SCENARIOS = [
    Scenario("healthy repo (reference)", ["inspect", REPO], 0, ["no findings"], quick=True),
    Scenario(
        "repo not found (404 RepoNotFound)",
        ["inspect", "org/missing"],
        2,
        ["no such model repo"],
        ["check the repo id"],
        quick=True,
    ),
    Scenario(
        "revision not found (404 RevisionNotFound)",
        ["inspect", REPO, "--revision", "v9"],
        2,
        ["revision 'v9' does not exist"],
        ["--revision"],
    ),
    Scenario(
        "gated repo (403 GatedRepo)",
        ["inspect", "org/gated"],
        2,
        ["gated repo"],
        ["request access", "hf auth login"],
        quick=True,
    ),
    Scenario(
        "forbidden (403 on the API)",
        ["inspect", REPO],
        2,
        ["forbidden (HTTP 403)"],
        ["token"],
        setup=fail("/api/models/", 403, "Forbidden"),
    ),
    Scenario(
        "rate limited (429)",
        ["inspect", REPO],
        2,
        ["rate-limited"],
        ["wait a minute"],
        setup=fail("/api/models/", 429, "Too Many Requests"),
        quick=True,
    ),
    Scenario(
        "server error (503), nothing cached",
        ["inspect", REPO],
        2,
        ["HTTP 503"],
        ["retry later"],
        setup=fail("/api/models/", 503, "Service Unavailable"),
    ),
    Scenario(
        "timeout on the repo info (--timeout 1)",
        ["inspect", REPO, "--timeout", "1"],
        2,
        ["did not answer within 1s"],
        ["--timeout", "HF_HUB_OFFLINE"],
        setup=slow("/api/models/", 4),
        quick=True,
    ),
    Scenario(
        "timeout on one header range request",
        ["inspect", REPO, "--timeout", "1"],
        2,
        ["did not answer within 1s", SHARDS[1]],
        ["--timeout"],
        setup=slow(SHARDS[1], 4),
    ),
    Scenario(
        "index names a shard the repo lacks (404 EntryNotFound)",
        ["inspect", "org/incomplete"],
        1,
        ["DFT004", SHARDS[1]],
        ["upload the missing shard"],
    ),
    Scenario(
        "a proxy answers a plain 404 for one shard",
        ["inspect", REPO],
        2,
        ["HTTP 404", SHARDS[1]],
        ["HF_DEBUG=1"],
        setup=fail(SHARDS[1], 404, "Not Found"),
    ),
    Scenario(
        "range responses cut short (connection closed after 100 bytes)",
        ["inspect", REPO],
        0,
        ["no findings"],
        setup=switch("truncate_ranges_to", 100),
        quick=True,
    ),
    Scenario(
        "range responses cut to nothing",
        ["inspect", REPO],
        2,
        ["incomplete response"],
        ["retry"],
        setup=switch("truncate_ranges_to", 0),
    ),
    Scenario(
        "short but honest range responses (206, 256 bytes each)",
        ["inspect", REPO],
        0,
        ["no findings"],
        setup=switch("short_ranges", 256),
    ),
    Scenario(
        "range responses of 16 bytes: gives up after 64 requests",
        ["inspect", REPO],
        2,
        ["incomplete response", "1024 of"],
        ["retry", "proxy"],
        setup=switch("short_ranges", 16),
    ),
    Scenario(
        "server ignores Range (200 with the whole file)",
        ["inspect", REPO],
        0,
        ["no findings"],
        setup=switch("ignore_range", True),
    ),
    Scenario(
        "Hub unreachable, nothing cached",
        ["inspect", REPO, "--timeout", "2"],
        2,
        ["cannot"],
        ["network", "HF_HUB_OFFLINE"],
        unreachable=True,
        quick=True,
    ),
    Scenario(
        "Hub unreachable, config + index + 1 of 2 shards cached",
        ["inspect", REPO, "--timeout", "2"],
        0,
        ["DFT007", "DFT005", "1 of 2 shards", SHARDS[1]],
        ["hf download"],
        cached=("config.json", "model.safetensors.index.json", SHARDS[0]),
        unreachable=True,
    ),
    Scenario(
        "offline (HF_HUB_OFFLINE=1), config + index + 1 of 2 shards cached",
        ["inspect", REPO],
        0,
        ["DFT005", "1 of 2 shards", SHARDS[1]],
        ["hf download"],
        cached=("config.json", "model.safetensors.index.json", SHARDS[0]),
        offline=True,
        quick=True,
    ),
    Scenario(
        "offline, config only cached",
        ["inspect", REPO],
        0,
        ["DFT005"],
        ["hf download"],
        cached=("config.json",),
        offline=True,
    ),
    Scenario(
        "offline, nothing cached",
        ["inspect", REPO],
        2,
        ["HF_HUB_OFFLINE", "not in the local Hugging Face cache"],
        ["unset HF_HUB_OFFLINE", "hf download"],
        offline=True,
        quick=True,
    ),
    Scenario(
        "target repo not found",
        ["inspect", REPO, "--target", "org/no-target"],
        2,
        ["no such model repo"],
        ["check the repo id"],
    ),
    Scenario(
        "convert, offline with a partial cache",
        ["convert", REPO, "-o", "{out}"],
        2,
        ["not in the local cache", SHARDS[1]],
        ["hf download", "--dry-run"],
        cached=("config.json", "model.safetensors.index.json", SHARDS[0]),
        offline=True,
    ),
    Scenario(
        "convert, gated repo",
        ["convert", "org/gated", "-o", "{out}"],
        2,
        ["gated repo"],
        ["request access"],
    ),
]


@dataclass
class Row:
    scenario: Scenario
    exit_code: int
    message: str
    hint: str
    seconds: float
    problems: list[str]


def dead_endpoint() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # closed again: connections are refused


def environment(endpoint: str, cache: Path, offline: bool) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DFLASH_TOOLS_DEBUG", "DFLASH_TOOLS_FORMAT"):
        env.pop(key, None)
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HOME=str(cache.parent / "hf-home"),
        HF_HUB_CACHE=str(cache),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_ETAG_TIMEOUT="2",
        HF_HUB_DOWNLOAD_TIMEOUT="2",
        NO_COLOR="1",
        COLUMNS="200",
    )
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return env


def populate(files: tuple[str, ...], endpoint: str, cache: Path) -> None:
    """Fill the Hub cache the way a user would: huggingface_hub's own download."""
    script = "import sys\nfrom huggingface_hub import hf_hub_download\nfor name in sys.argv[1:]:\n"
    script += f"    hf_hub_download({REPO!r}, name)\n"
    subprocess.run(
        [sys.executable, "-c", script, *files],
        env=environment(endpoint, cache, False),
        check=True,
        capture_output=True,
        timeout=120,
    )


def cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dflash_tools", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)


def run_scenario(scenario: Scenario, work: Path) -> Row:
    server = HubServer().start()
    try:
        server.add_repo(REPO, repo_files())
        server.add_repo("org/gated", repo_files(), gated=True)
        server.add_repo("org/incomplete", {k: v for k, v in repo_files().items() if k != SHARDS[1]})
        cache = work / "hub-cache"
        if scenario.cached:
            populate(scenario.cached, server.url, cache)
        if scenario.setup:
            scenario.setup(server)
        endpoint = dead_endpoint() if scenario.unreachable else server.url
        env = environment(endpoint, cache, scenario.offline)
        args = [a.replace("{out}", str(work / "out")) for a in scenario.args]
        started = time.perf_counter()
        done = cli(args, env)
        seconds = time.perf_counter() - started
        message, hint, problems = "", "", []
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        if done.returncode == 2 or lines and lines[0].startswith("error:"):
            message = lines[0].removeprefix("error: ") if lines else ""
            hint = lines[1].removeprefix("hint: ") if len(lines) > 1 else ""
            if len(lines) > 2 or not lines or not lines[0].startswith("error:"):
                problems.append(f"stderr is not one error line and one hint: {done.stderr[:300]!r}")
        else:
            report = json.loads(cli([*args, "--json"], env).stdout)
            findings = report.get("findings", [])
            message = "; ".join(f"{f['code']} {f['message']}" for f in findings) or "no findings"
            hint = "; ".join(f["hint"] for f in findings if f.get("hint"))
        # The local server's port changes every run: show where the real Hub's address would be.
        message, hint = message.replace(endpoint, "$HF_ENDPOINT"), hint.replace(endpoint, "$HF_ENDPOINT")
        if "Traceback" in done.stderr or "internal error" in done.stderr:
            problems.append("a traceback or internal error")
        if done.returncode != scenario.exit_code:
            problems.append(f"exit {done.returncode}, expected {scenario.exit_code}")
        problems += [f"message lacks {s!r}" for s in scenario.expect if s not in message]
        problems += [f"next step lacks {s!r}" for s in scenario.expect_hint if s not in hint]
        if done.returncode == 2 and not hint:
            problems.append("no next step")
        return Row(scenario, done.returncode, message, hint, seconds, problems)
    finally:
        server.stop()


def cell(text: str, limit: int = 150) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the core scenarios (CI)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a row is not what it must be")
    args = parser.parse_args(argv)
    scenarios = [s for s in SCENARIOS if s.quick or not args.quick]
    rows: list[Row] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dflash-net-faults-") as tmp:
        for number, scenario in enumerate(scenarios):
            work = Path(tmp) / f"s{number}"
            work.mkdir()
            rows.append(run_scenario(scenario, work))
    print("| fault | command | exit | message (first line) or findings | next step |")
    print("|---|---|---|---|---|")
    for row in rows:
        command = "dflash-tools " + " ".join(row.scenario.args).replace("{out}", "OUT")
        env = " (HF_HUB_OFFLINE=1)" if row.scenario.offline and "offline" not in row.scenario.name else ""
        print(
            f"| {cell(row.scenario.name)}{env} | `{command}` | {row.exit_code} | {cell(row.message)} | {cell(row.hint, 110)} |"
        )
    failed = [row for row in rows if row.problems]
    print(f"\n{len(rows)} scenarios in {time.perf_counter() - started:.0f} s, {len(failed)} not as expected")
    for row in failed:
        print(f"  {row.scenario.name}: {'; '.join(row.problems)}")
    return 1 if failed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
