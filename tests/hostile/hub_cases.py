"""Hostile Hub cases: a local stand-in Hub (tests/hub_server.py) that drips, stalls, lies about
lengths, sends junk, redirects, rate-limits and answers with huge bodies, against the real CLI.

Shared by `tests/hostile/test_hostile_hub.py` (every case, in process, in the default suite) and
`bench/hostile_hub.py` (every case in its own process, with its memory; the figures in
docs/reliability.md). Loopback only; every request loop of the server is bounded.

A case ends cleanly when:

- its exit code is the one expected (1 or 2 for a failure; 0 where the answer is usable);
- it ended within `--timeout` x the requests it needs, plus SLACK_SECONDS;
- stdout is one JSON document (`--json`, or DFLASH_TOOLS_FORMAT=json) with `schema_version`;
- a failure is one line naming the file and the cause (and a hint line), on stderr and in the
  document; a usable answer names the problem in a finding;
- no traceback, no "internal error", no retry chatter from a library on stderr;
- nothing was written into the Hub cache (inspect never writes there; convert only what it downloads).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dflash_tools_testing as testing
from tests.hub_server import HubServer, safetensors_bytes

REPO = "org/draft"
TIMEOUT = 1.0
# What a case may take beyond its requests in process (parsing, rendering, a loaded CI machine).
# Run as a process of its own, the interpreter's start is added (bench/hostile_hub.py measures it).
SLACK_SECONDS = 2.5
SPEC = replace(testing.TINY_DFLASH2, sample_from_anchor=False)
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
INDEX = "model.safetensors.index.json"
MIB = 1024 * 1024


def draft_files() -> dict[str, bytes]:
    """A real sharded DFlash2 draft: config, index and two shards."""
    table = testing.tensor_table(SPEC)
    half = len(table) // 2
    parts = (table[:half], table[half:])
    weight_map = {name: SHARDS[i] for i, part in enumerate(parts) for name, _, _ in part}
    return {
        "config.json": json.dumps(testing.make_config("zlab-dflash2", SPEC), indent=2).encode(),
        INDEX: json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}).encode(),
        SHARDS[0]: safetensors_bytes(parts[0], {"format": "pt"}),
        SHARDS[1]: safetensors_bytes(parts[1], {"format": "pt"}),
        "README.md": b"# draft\n",
    }


def index_naming(files: dict[str, bytes], tensor_shard: dict[str, str]) -> dict[str, bytes]:
    index = json.loads(files[INDEX])
    index["weight_map"].update(tensor_shard)
    return {**files, INDEX: json.dumps(index).encode()}


@dataclass
class Case:
    name: str
    args: list[str]  # the command line; "{out}" becomes a fresh output folder
    exit_code: int
    expect: tuple[str, ...]  # in the error message (exit 2), or in some finding's code + message
    requests: int  # requests the command needs: the time bound is TIMEOUT x requests + SLACK_SECONDS
    setup: Callable[[HubServer], None] | None = None
    json_env: bool = False  # JSON through DFLASH_TOOLS_FORMAT=json rather than --json
    heavy: bool = False  # a huge answer: its memory is also checked in the default suite (tracemalloc)
    writes_cache: bool = False  # convert downloads into the cache
    extra: dict[str, Any] = field(default_factory=dict)


def _switch(**switches: Any) -> Callable[[HubServer], None]:
    def setup(hub: HubServer) -> None:
        for name, value in switches.items():
            getattr(hub, name).update(value) if isinstance(value, dict) else setattr(hub, name, value)

    return setup


def _fail(fragment: str, status: int, message: str = "no", *, times: int | None = None, **headers: str):  # type: ignore[no-untyped-def]
    def setup(hub: HubServer) -> None:
        hub.fail[fragment] = (status, message)
        if times is not None:
            hub.fail_times[fragment] = times
        if headers:
            hub.fail_headers[fragment] = {k.replace("_", "-"): v for k, v in headers.items()}

    return setup


def _repo(repo_id: str, files: Callable[[], dict[str, bytes]]) -> Callable[[HubServer], None]:
    def setup(hub: HubServer) -> None:
        hub.add_repo(repo_id, files())

    return setup


def _many_shards(count: int) -> dict[str, bytes]:
    files = draft_files()
    names = [f"extra-{i:05d}-of-{count:05d}.safetensors" for i in range(count)]
    files.update({name: safetensors_bytes([(f"extra.{i}.weight", "BF16", (1,))]) for i, name in enumerate(names)})
    return index_naming(files, {f"extra.{i}.weight": name for i, name in enumerate(names)})


def _many_files(count: int) -> dict[str, bytes]:
    files = draft_files()
    files.update({f"docs/page-{i:06d}.md": b"" for i in range(count)})
    return files


API = "/api/models/"
CONFIG = "/config.json"
T = ["--timeout", f"{TIMEOUT:g}"]
INSPECT = ["inspect", REPO, *T]

CASES: list[Case] = [
    Case("healthy repo (reference)", INSPECT, 0, (), 5),
    # -- hangs: drip and stall, on each file ---------------------------------------------------
    Case(
        "repo info dripped, 1 byte / 0.2 s",
        INSPECT,
        2,
        ("did not answer within 1s", "the repo info"),
        1,
        _switch(drip={API: 0.2}),
    ),
    Case(
        "config.json dripped",
        INSPECT,
        2,
        ("did not answer within 1s", "config.json"),
        2,
        _switch(drip={CONFIG: 0.2}),
        json_env=True,
    ),
    Case("index dripped", INSPECT, 2, ("did not answer within 1s", INDEX), 3, _switch(drip={INDEX: 0.2})),
    Case(
        "safetensors header range dripped",
        INSPECT,
        2,
        ("did not answer within 1s", SHARDS[1]),
        4,
        _switch(drip={SHARDS[1]: 0.2}),
        json_env=True,
    ),
    Case(
        "repo info: headers, then the body stalls",
        INSPECT,
        2,
        ("did not answer within 1s", "the repo info"),
        1,
        _switch(stall_body={API: 30}),
    ),
    Case(
        "config.json: headers, then the body stalls",
        INSPECT,
        2,
        ("did not answer within 1s", "config.json"),
        2,
        _switch(stall_body={CONFIG: 30}),
    ),
    Case(
        "header range: no answer at all for 30 s",
        INSPECT,
        2,
        ("did not answer within 1s", SHARDS[0]),
        4,
        _switch(slow={SHARDS[0]: 30}),
    ),
    # -- rate limits and server errors ---------------------------------------------------------
    Case(
        "429 Retry-After: 3600 on config.json",
        INSPECT,
        2,
        ("HTTP 429", "config.json", "3600 s"),
        2,
        _fail(CONFIG, 429, "slow down", Retry_After="3600"),
        json_env=True,
    ),
    Case(
        "429 Retry-After: 3600 on the repo info",
        INSPECT,
        2,
        ("HTTP 429", "the repo info", "3600 s"),
        1,
        _fail(API, 429, "slow down", Retry_After="3600"),
    ),
    Case(
        "429 Retry-After as an HTTP date a day ahead",
        INSPECT,
        2,
        ("HTTP 429", "config.json", "asked to wait"),
        2,
        _fail(CONFIG, 429, "slow down", Retry_After="Fri, 31 Dec 2100 23:59:59 GMT"),
    ),
    Case(
        "429 Retry-After: 1 once (honoured, then it works)",
        ["inspect", REPO, "--timeout", "3"],
        0,
        (),
        6,
        _fail(CONFIG, 429, "slow down", times=1, Retry_After="1"),
    ),
    Case("503 once, then it works (one retry)", INSPECT, 0, (), 6, _fail(CONFIG, 503, "busy", times=1)),
    Case("401 on config.json", INSPECT, 2, ("HTTP 401", "config.json"), 2, _fail(CONFIG, 401, "bad token")),
    Case(
        "403 on config.json after the repo info",
        INSPECT,
        2,
        ("HTTP 403", "config.json"),
        2,
        _fail(CONFIG, 403, "Forbidden"),
        json_env=True,
    ),
    Case("403 on the repo info", INSPECT, 2, ("HTTP 403", "the repo info"), 1, _fail(API, 403, "Forbidden")),
    Case(
        "plain 404 on config.json listed by the repo info",
        INSPECT,
        2,
        ("HTTP 404", "config.json"),
        2,
        _fail(CONFIG, 404, "Not Found"),
    ),
    Case("500 on config.json, every time", INSPECT, 2, ("HTTP 500", "config.json"), 2, _fail(CONFIG, 500, "oops")),
    Case("503 on the index, every time", INSPECT, 2, ("HTTP 503", INDEX), 3, _fail(INDEX, 503, "busy")),
    Case("503 on one header range, every time", INSPECT, 2, ("HTTP 503", SHARDS[0]), 4, _fail(SHARDS[0], 503, "busy")),
    Case(
        "403 whose error body is not UTF-8",
        INSPECT,
        2,
        ("forbidden (HTTP 403)", "config.json"),
        2,
        lambda hub: (hub.fail.update({CONFIG: (403, "Forbidden")}), hub.fail_body.update({CONFIG: b"\xb8 not UTF-8"})),
    ),
    Case(
        "403 with a 10 MB error body",
        INSPECT,
        2,
        ("HTTP 403", "config.json"),
        2,
        _fail(CONFIG, 403, "x" * (10 * MIB), X_Error_Message="Forbidden"),
    ),
    # -- lies about lengths, junk --------------------------------------------------------------
    Case(
        "config.json: Content-Length longer than the body",
        INSPECT,
        2,
        ("incomplete response", "config.json"),
        2,
        _switch(lie_length={CONFIG: 100_000}),
    ),
    Case(
        "repo info: Content-Length longer than the body",
        INSPECT,
        2,
        ("incomplete response", "the repo info"),
        1,
        _switch(lie_length={API: 100_000}),
    ),
    Case(
        "repo info is a JSON list",
        INSPECT,
        2,
        ("malformed answer", "the repo info", "JSON list"),
        1,
        _switch(replace_body={API: b"[1, 2, 3]"}),
        json_env=True,
    ),
    Case(
        "repo info 'siblings' is an object",
        INSPECT,
        2,
        ("malformed answer", "siblings"),
        1,
        _switch(replace_body={API: b'{"sha": "' + b"a" * 40 + b'", "siblings": {"rfilename": "x"}}'}),
    ),
    Case(
        "repo info 'sha' is '../..'",
        INSPECT,
        2,
        ("malformed answer", "'../..'"),
        1,
        _switch(replace_body={API: b'{"sha": "../..", "siblings": []}'}),
    ),
    Case(
        "repo info lists a file '../../etc/passwd'",
        INSPECT,
        2,
        ("malformed answer", "../../etc/passwd"),
        1,
        _switch(replace_body={API: b'{"siblings": [{"rfilename": "../../etc/passwd"}]}'}),
    ),
    Case(
        "repo info is an HTML page",
        INSPECT,
        2,
        ("malformed answer", "not JSON"),
        1,
        _switch(replace_body={API: b"<html><body>Welcome to the proxy</body></html>"}),
    ),
    Case(
        "repo info is a million nested lists",
        INSPECT,
        2,
        ("malformed answer", "the repo info"),
        1,
        _switch(replace_body={API: b"[" * 1_000_000 + b"]" * 1_000_000}),
    ),
    Case(
        "X-Repo-Commit '../../..' on config.json",
        INSPECT,
        2,
        ("malformed answer", "config.json", "X-Repo-Commit"),
        2,
        _switch(extra_headers={CONFIG: {"X-Repo-Commit": "../../.."}}),
    ),
    Case(
        "not HTTP at all (junk bytes)",
        INSPECT,
        2,
        ("malformed answer", "the repo info"),
        1,
        _switch(raw={API: b"SSH-2.0-OpenSSH_9.6\r\n\r\n"}),
    ),
    Case(
        "gzip-encoded config.json although identity was asked",
        INSPECT,
        2,
        ("malformed answer", "config.json"),
        2,
        _switch(extra_headers={CONFIG: {"Content-Encoding": "gzip"}}),
    ),
    Case(
        "redirect loop on config.json",
        INSPECT,
        2,
        ("malformed answer", "config.json", "redirects"),
        2,
        _switch(redirect={CONFIG: "/org/draft/resolve/main/config.json?again=1"}),
    ),
    Case(
        "redirect to file:///etc/passwd",
        INSPECT,
        2,
        ("malformed answer", "config.json", "not http"),
        2,
        _switch(redirect={CONFIG: "file:///etc/passwd"}),
    ),
    # -- huge answers (each also measured for memory in a process of its own) -----------------
    Case(
        "config.json of 200 MB (Content-Length given)",
        INSPECT,
        1,
        ("DFT001", "larger than 64 MiB: not a config"),
        5,
        _switch(huge={CONFIG: (200 * MIB, b" ", True)}),
        heavy=True,
    ),
    Case(
        "config.json of 200 MB (no Content-Length)",
        INSPECT,
        1,
        ("DFT001", "larger than 64 MiB: not a config"),
        5,
        _switch(huge={CONFIG: (200 * MIB, b" ", False)}),
        heavy=True,
        json_env=True,
    ),
    Case(
        "repo info of 300 MB (Content-Length given)",
        INSPECT,
        2,
        ("the repo info", "larger than 16 MiB"),
        1,
        _switch(huge={API: (300 * MIB, b" ", True)}),
        heavy=True,
    ),
    Case(
        "repo info of 300 MB (no Content-Length)",
        INSPECT,
        2,
        ("the repo info", "larger than 16 MiB"),
        1,
        _switch(huge={API: (300 * MIB, b"[", False)}),
        heavy=True,
    ),
    Case(
        "index of 200 MB",
        INSPECT,
        1,
        ("DFT004", "larger than 64 MiB"),
        5,
        _switch(huge={INDEX: (200 * MIB, b" ", False)}),
        heavy=True,
    ),
    Case(
        "index naming 10,000 existing shards",
        ["inspect", "org/many-shards", *T, "--fail-on", "warning"],
        1,
        ("DFT005", "10,002 safetensors files"),
        3,
        _repo("org/many-shards", lambda: _many_shards(10_000)),
        heavy=True,
    ),
    Case(
        "repo with 100,000 files: inspect",
        ["inspect", "org/many-files", "--timeout", "5"],
        0,
        (),
        5,
        _repo("org/many-files", lambda: _many_files(100_000)),
    ),
    Case(
        "repo with 100,000 files: convert",
        ["convert", "org/many-files", "-o", "{out}", "--timeout", "5"],
        1,
        ("100,005 files", "nothing was downloaded"),
        6,
        _repo("org/many-files", lambda: _many_files(100_000)),
    ),
    Case(
        "--target: a 200 MB config.json",
        ["inspect", REPO, "--target", "org/target", *T],
        2,
        ("org/target/config.json", "larger than 64 MiB: not a config"),
        2,
        lambda hub: (
            hub.add_repo("org/target", {"config.json": b"{}"}),
            hub.huge.update({"org/target/resolve/": (200 * MIB, b" ", False)}),
        ),
    ),
    Case(
        "--target: repo info dripped",
        ["inspect", REPO, "--target", "org/target", *T],
        2,
        ("did not answer within 1s", "org/target"),
        1,
        lambda hub: (hub.add_repo("org/target", {"config.json": b"{}"}), hub.drip.update({"org/target": 0.2})),
    ),
    # -- traversal in an index: a finding in inspect, the same refusal in convert -------------
    Case(
        "index names '../x.safetensors': inspect",
        ["inspect", "org/escape", *T],
        1,
        ("DFT004", "'../x.safetensors'", "escapes"),
        5,
        _repo("org/escape", lambda: index_naming(draft_files(), {"fc.weight": "../x.safetensors"})),
    ),
    Case(
        "index names '../x.safetensors': convert",
        ["convert", "org/escape", "-o", "{out}", *T],
        1,
        ("'../x.safetensors'", "escapes", "refusing"),
        6,
        _repo("org/escape", lambda: index_naming(draft_files(), {"fc.weight": "../x.safetensors"})),
    ),
    Case(
        "index names '/etc/passwd': convert",
        ["convert", "org/escape", "-o", "{out}", *T],
        1,
        ("'/etc/passwd'", "absolute path", "refusing"),
        6,
        _repo("org/escape", lambda: index_naming(draft_files(), {"fc.weight": "/etc/passwd"})),
        json_env=True,
    ),
    Case(
        "convert: X-Repo-Commit '../../..' on a file it downloads",
        ["convert", REPO, "-o", "{out}", *T],
        2,
        ("malformed answer", "README.md"),
        12,
        _switch(extra_headers={"README.md": {"X-Repo-Commit": "../../.."}}),
        writes_cache=True,
    ),
    Case(
        "convert: config.json dripped",
        ["convert", REPO, "-o", "{out}", *T],
        2,
        ("did not answer within 1s", "config.json"),
        2,
        _switch(drip={CONFIG: 0.2}),
    ),
    Case(
        "--author: the model list names '/etc/passwd'",
        ["inspect", "--author", "org", *T],
        2,
        ("malformed answer", "the model list", "/etc/passwd"),
        1,
        _switch(replace_body={"/api/models?": b'[{"id": "org/draft"}, {"id": "/etc/passwd"}]'}),
    ),
    Case(
        "--author: the model list dripped",
        ["inspect", "--author", "org", *T],
        2,
        ("did not answer within 1s", "the model list"),
        1,
        _switch(drip={"/api/models?": 0.2}),
    ),
    # -- the network itself --------------------------------------------------------------------
    Case(
        "Hub unreachable (connection refused)",
        INSPECT,
        2,
        ("cannot connect", "the repo info"),
        3,
        extra={"unreachable": True},
    ),
    Case(
        "range answers of 16 bytes: gives up after 64 requests",
        INSPECT,
        2,
        ("incomplete response", "1024 of"),
        64,
        _switch(short_ranges=16),
    ),
]


# Cases about the clock run with --timeout 1; the others with 5, so that a slow (loaded) machine
# cannot turn them into timeouts: their subject is the answer, not the time it takes.
_ABOUT_TIME = ("dripped", "stalls", "no answer at all", "Retry-After", "unreachable")
for _case in CASES:
    if not any(word in _case.name for word in _ABOUT_TIME):
        _at = _case.args.index("--timeout") + 1
        _case.args = [*_case.args[:_at], "5", *_case.args[_at + 1 :]]


# --------------------------------------------------------------------------------------------
# Running a case, and what makes it clean
# --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    case: Case
    exit_code: int
    stdout: str
    stderr: str
    seconds: float
    max_rss_mb: float | None = None  # measured in a process of its own (bench/hostile_hub.py)
    cache_files: list[str] = field(default_factory=list)


def command_line(case: Case, out: Path) -> tuple[list[str], dict[str, str]]:
    """The arguments and extra environment of a case (JSON asked for one way or the other)."""
    args = [arg.replace("{out}", str(out)) for arg in case.args]
    if case.json_env:
        return args, {"DFLASH_TOOLS_FORMAT": "json"}
    return [*args, "--json"], {}


def set_up(case: Case, hub: HubServer) -> None:
    hub.add_repo(REPO, draft_files())
    if case.setup is not None:
        case.setup(hub)


def timeout_of(case: Case) -> float:
    return float(case.args[case.args.index("--timeout") + 1])


def time_bound(case: Case, startup: float = 0.0) -> float:
    """--timeout x the requests the case needs, plus SLACK_SECONDS (and the process start, if any)."""
    return timeout_of(case) * case.requests + SLACK_SECONDS + startup


def cache_files(cache: Path) -> list[str]:
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()) if cache.exists() else []


def problems(outcome: Outcome, startup: float = 0.0) -> list[str]:
    """Everything that keeps a case from ending cleanly (empty: it did)."""
    case = outcome.case
    found: list[str] = []
    if outcome.exit_code != case.exit_code:
        found.append(f"exit {outcome.exit_code}, expected {case.exit_code}")
    if outcome.seconds > time_bound(case, startup):
        found.append(f"took {outcome.seconds:.1f} s, more than {time_bound(case, startup):.1f} s")
    if outcome.max_rss_mb is not None and outcome.max_rss_mb >= 200:
        found.append(f"{outcome.max_rss_mb:.0f} MB of memory")
    if outcome.cache_files and not case.writes_cache:
        found.append(f"wrote into the Hub cache: {outcome.cache_files[:3]}")
    for bad in ("Traceback", "internal error", "Retrying in", "Waiting ", "thrown while requesting"):
        if bad in outcome.stderr or bad in outcome.stdout:
            found.append(f"{bad!r} in the output")
    try:
        document = json.loads(outcome.stdout)
    except ValueError:
        return [*found, f"stdout is not one JSON document: {outcome.stdout[:200]!r}"]
    # Each document kind has its own version (docs/json.md, "Versions"): inspect's report is at 2.
    if not isinstance(document, dict) or document.get("schema_version") not in (1, 2):
        return [*found, "the JSON document has no schema_version"]
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    if outcome.exit_code == 2:
        message = (document.get("error") or {}).get("message", "")
        if "\n" in message or not message:
            found.append(f"the error is not one line: {message!r}")
        if len(lines) != 2 or not lines[0].startswith("error: ") or not lines[1].startswith("hint: "):
            found.append(f"stderr is not one error line and one hint: {outcome.stderr[:300]!r}")
        text = message
    else:
        findings = document.get("findings") or []
        text = " | ".join(f"{f.get('code')} {f.get('message')}" for f in findings)
        if "error" in document and outcome.exit_code == 1:
            text = (document.get("error") or {}).get("message", "")
            if len(lines) != 2 or not lines[0].startswith("error: "):
                found.append(f"stderr is not one error line and one hint: {outcome.stderr[:300]!r}")
    found += [f"message lacks {want!r}: {text[:300]!r}" for want in case.expect if want not in text]
    # Every repo here exists: once its repo info arrived, no failure may call the source unknown.
    if "no Hub repo of that name" in text or ("no local folder" in text and "the repo info" not in text):
        found.append(f"a repo that exists is called unknown: {text[:200]!r}")
    return found
