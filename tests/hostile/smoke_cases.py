"""Hostile answers to `smoke-test --server`: a server (tests/hostile/smoke_server.py) that never
answers, stalls, drips, lies about lengths, sends junk, redirects the API key away, sends huge or
deeply nested JSON and impossible numbers, against the core entry (`smoke.server.run_server`).

A case ends cleanly when:

- it raised the error class of its exit code (2: SourceError / UsageError, the server cannot be
  reached, read or addressed; 1: OperationError, it answered something unusable, or the run did not
  finish in time), or ran to a valid result (exit 0) where the answers are usable;
- the message is one line and names the cause (`expect`);
- it ended within its bound: --timeout (TIMEOUT) x the requests that may wait, or --run-timeout
  (RUN_TIMEOUT), plus SLACK_SECONDS;
- no other exception escaped (MemoryError, RecursionError, OverflowError, http.client's
  BadStatusLine, IncompleteRead, LineTooLong: each was one once);
- its own check holds (the API key never reached another origin, ...).

`python -m tests.hostile.smoke_cases` runs every case and prints the table in docs/reliability.md.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dflash_tools.errors import DflashToolsError
from dflash_tools.smoke.server import ServerOptions, run_server
from tests.hostile.smoke_server import Connection, HostileServer, Request

TIMEOUT = 0.5
RUN_TIMEOUT = 2.0
SLACK_SECONDS = 2.0
KEY = "sk-hostile-secret"
MIB = 1024 * 1024

Setup = Callable[[HostileServer, HostileServer], None]
Check = Callable[[HostileServer, HostileServer, str], str | None]


@dataclass
class Case:
    name: str
    setup: Setup
    exit_code: int
    expect: str  # in the one-line message ("" for exit 0)
    bound: float  # seconds the case may take, slack excluded
    options: dict[str, Any] = field(default_factory=dict)
    url: Callable[[HostileServer], str] | None = None
    check: Check | None = None


@dataclass
class Outcome:
    case: Case
    exit_code: int
    message: str
    seconds: float
    internal: str = ""  # an exception that is not ours
    result: dict[str, Any] | None = None


def run_case(case: Case) -> Outcome:
    with HostileServer() as server, HostileServer() as elsewhere:
        case.setup(server, elsewhere)
        url = case.url(server) if case.url else server.url
        options = ServerOptions(url=url, prompts=["a", "b"], max_tokens=8, timeout_s=TIMEOUT, run_timeout_s=RUN_TIMEOUT)
        for key, value in case.options.items():
            setattr(options, key, value)
        started = time.monotonic()
        try:
            result = run_server(options)
        except DflashToolsError as exc:
            outcome = Outcome(case, exc.exit_code, exc.message, time.monotonic() - started)
        except BaseException as exc:  # what must never happen: an internal error
            outcome = Outcome(case, -1, "", time.monotonic() - started, internal=f"{type(exc).__name__}: {exc}"[:300])
        else:
            outcome = Outcome(case, 0, "", time.monotonic() - started, result=dict(result))
        problem = case.check(server, elsewhere, outcome.message) if case.check else None
    if problem:
        outcome.internal = outcome.internal or f"check: {problem}"
    return outcome


def problems(outcome: Outcome) -> list[str]:
    case, found = outcome.case, []
    if outcome.internal:
        found.append(outcome.internal)
    if outcome.exit_code != case.exit_code:
        found.append(f"exit {outcome.exit_code}, expected {case.exit_code} ({outcome.message})")
    if "\n" in outcome.message:
        found.append("the message is more than one line")
    if case.expect and case.expect not in outcome.message:
        found.append(f"{case.expect!r} is not in {outcome.message!r}")
    if outcome.seconds > case.bound + SLACK_SECONDS:
        found.append(f"took {outcome.seconds:.1f} s, bound {case.bound + SLACK_SECONDS:.1f} s")
    return found


# --- handlers ---------------------------------------------------------------------------------------


def route(path: str, handler: Callable[[Connection, Request], None]) -> Setup:
    def setup(server: HostileServer, elsewhere: HostileServer) -> None:
        server.routes[path] = handler

    return setup


def raw(data: bytes, *, hold: float = 0.0) -> Callable[[Connection, Request], None]:
    def handler(connection: Connection, request: Request) -> None:
        connection.send(data)
        if hold:
            connection.hold(hold)

    return handler


def head(status: int = 200, *lines: str) -> bytes:
    return ("\r\n".join([f"HTTP/1.1 {status} X", *lines]) + "\r\n\r\n").encode("latin-1")


def body(text: str | bytes, content_type: str = "application/json") -> Callable[[Connection, Request], None]:
    data = text.encode() if isinstance(text, str) else text
    return lambda c, r: c.respond(200, data, content_type)


def hold(connection: Connection, request: Request) -> None:
    connection.hold()


def drip(connection: Connection, request: Request) -> None:
    data = head(200, "Content-Type: application/json", "Content-Length: 200") + b'{"data": [' + b" " * 190
    for byte in data:
        if not connection.send(bytes([byte])) or connection.server.stopping.wait(0.2):
            return


def stream_forever(connection: Connection, request: Request) -> None:
    """A 200 with no Content-Length, then 100 MB of a model list (the client hangs up at its cap)."""
    if not connection.send(head(200, "Content-Type: application/json", "Connection: close") + b'{"data": ['):
        return
    chunk = b'{"id": "m", "owned_by": "vllm"}, ' * 2000
    sent = 0
    while sent < 100 * MIB and connection.send(chunk):
        sent += len(chunk)


def completion_with(**changes: Any) -> Callable[[Connection, Request], None]:
    def handler(connection: Connection, request: Request) -> None:
        document = connection.server.completion(request)
        for key, value in changes.items():
            if key == "token_ids":
                document["choices"][0]["token_ids"] = value
            else:
                document["usage"][key] = value
        connection.json(document)

    return handler


def literal_completion(token_ids_text: str) -> Callable[[Connection, Request], None]:
    """A completion whose token_ids are written as raw JSON text (1e400 cannot be dumped)."""

    def handler(connection: Connection, request: Request) -> None:
        document = json.dumps(connection.server.completion(request, token_ids="@IDS@"))
        connection.respond(200, document.replace('"@IDS@"', token_ids_text).encode())

    return handler


def metrics_lines(text: str) -> Callable[[Connection, Request], None]:
    return lambda c, r: c.respond(200, text.encode(), "text/plain")


def restarting_metrics(server: HostileServer, elsewhere: HostileServer) -> None:
    scrapes = []

    def handler(connection: Connection, request: Request) -> None:
        scrapes.append(1)
        if len(scrapes) > 1:
            server.counters.drafts = 1  # the counters start again from zero: a restart
        connection.respond(200, server.metrics_text().encode(), "text/plain")

    server.routes["/metrics"] = handler


def redirect(target: Callable[[HostileServer, HostileServer], str], status: int = 307) -> Setup:
    def setup(server: HostileServer, elsewhere: HostileServer) -> None:
        location = target(server, elsewhere)
        server.routes["/v1/models"] = lambda c, r: c.respond(status, b"", headers={"Location": location})

    return setup


def same_origin_redirect(server: HostileServer, elsewhere: HostileServer) -> None:
    server.routes["/v1/models"] = lambda c, r: c.respond(302, b"", headers={"Location": "/v1/models-moved"})
    server.routes["/v1/models-moved"] = lambda c, r: c.json({"data": [{"id": "m", "owned_by": "vllm"}]})


def key_stays_home(server: HostileServer, elsewhere: HostileServer, message: str) -> str | None:
    leaked = [r.path for r in elsewhere.requests if "authorization" in r.headers]
    if leaked:
        return f"the API key went to another port: {leaked}"
    if not elsewhere.requests:
        return "the redirect was not followed"
    if not all(r.headers.get("authorization") == f"Bearer {KEY}" for r in server.requests):
        return "the key was not sent to the server itself"
    return None


def key_kept_on_same_origin(server: HostileServer, elsewhere: HostileServer, message: str) -> str | None:
    moved = [r for r in server.requests if r.path == "/v1/models-moved"]
    if not moved or moved[0].headers.get("authorization") != f"Bearer {KEY}":
        return "the key was not sent after a redirect within the same origin"
    return None


def one_fails_others_hang(server: HostileServer, elsewhere: HostileServer) -> None:
    seen = []

    def handler(connection: Connection, request: Request) -> None:
        seen.append(1)
        if len(seen) == 2:
            connection.server.stopping.wait(0.2)
            connection.respond(500, b'{"error": "boom"}')
        else:
            connection.hold()

    server.routes["/v1/completions"] = handler


def sglang(meta_changes: dict[str, Any] | None = None, server_info_status: int = 200) -> Setup:
    """An SGLang-shaped server (owned_by "sglang", /server_info, /generate) with one thing wrong."""

    def setup(server: HostileServer, elsewhere: HostileServer) -> None:
        server.routes["/v1/models"] = lambda c, r: c.json({"data": [{"id": "m", "owned_by": "sglang"}]})
        info = {
            "version": "0.5.23",
            "speculative_algorithm": "DFLASH",
            "speculative_num_draft_tokens": 5,
            "api_key": KEY,
        }
        server.routes["/server_info"] = lambda c, r: c.json(info, server_info_status)
        server.routes["/metrics"] = lambda c, r: c.json({"detail": "Not Found"}, 404)

        def generate(connection: Connection, request: Request) -> None:
            tokens = (request.json() or {})["sampling_params"]["max_new_tokens"]
            meta = {
                "completion_tokens": tokens,
                "spec_verify_ct": 2,
                "spec_num_correct_drafts": 5,
                "spec_num_proposed_drafts": 8,
                "spec_accept_length": tokens / 2,
                "spec_correct_drafts_histogram": [0, 0, 1, 1],
            }
            meta.update(meta_changes or {})
            connection.json({"text": "x", "output_ids": list(range(tokens)), "meta_info": meta})

        server.routes["/generate"] = generate

    return setup


def key_not_shown(server: HostileServer, elsewhere: HostileServer, message: str) -> str | None:
    return "the API key from /server_info is in the message" if KEY in message else None


def dead_url(server: HostileServer) -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def nothing(server: HostileServer, elsewhere: HostileServer) -> None:
    pass


def several(*setups: Setup) -> Setup:
    def setup(server: HostileServer, elsewhere: HostileServer) -> None:
        for one in setups:
            one(server, elsewhere)

    return setup


MODELS = "/v1/models"
DONE = "/v1/completions"
QUICK = 3 * TIMEOUT  # a few quick requests

CASES: list[Case] = [
    Case("healthy vLLM server (reference)", nothing, 0, "", QUICK),
    Case("accepts and never answers", route(MODELS, hold), 2, "no complete answer within 0.5s", TIMEOUT),
    Case(
        "headers, then the body stops",
        route(MODELS, raw(head(200, "Content-Length: 1000") + b'{"data"', hold=30)),
        2,
        "no complete answer within 0.5s (reading the answer, 7 bytes had arrived)",
        TIMEOUT,
    ),
    Case("answer dripped a byte every 0.2 s", route(MODELS, drip), 2, "no complete answer within 0.5s", TIMEOUT),
    Case(
        "a completion never answers: --run-timeout ends the run",
        route(DONE, hold),
        1,
        "did not finish within --run-timeout 2s",
        RUN_TIMEOUT,
    ),
    Case(
        "a completion's body stops after its headers",
        route(DONE, raw(head(200, "Content-Length: 500") + b'{"choices": [', hold=30)),
        2,
        "no complete answer within 0.5s (reading the answer",
        QUICK + TIMEOUT,
    ),
    Case(
        "concurrent requests: one fails, the others end at once",
        one_fails_others_hang,
        1,
        "HTTP 500",
        QUICK + TIMEOUT,
        options={"concurrency": 4, "prompts": ["a", "b", "c", "d"]},
    ),
    Case(
        "redirect to another port: the API key is not sent there",
        redirect(lambda s, e: f"{e.url}/v1/models"),
        0,
        "",
        QUICK,
        options={"api_key": KEY},
        check=key_stays_home,
    ),
    Case(
        "redirect within the same origin keeps the API key",
        same_origin_redirect,
        0,
        "",
        QUICK,
        options={"api_key": KEY},
        check=key_kept_on_same_origin,
    ),
    Case("redirect loop", redirect(lambda s, e: f"{s.url}/v1/models", 302), 2, "more than 5 redirects", QUICK),
    Case("redirect to file:///etc/passwd", redirect(lambda s, e: "file:///etc/passwd"), 2, "not http(s)", QUICK),
    Case(
        "a model list of 100 MB (Content-Length given)",
        route(MODELS, raw(head(200, f"Content-Length: {100 * MIB}") + b'{"data": [', hold=5)),
        1,
        "larger than 4 MiB (104,857,600 bytes announced): not read",
        QUICK,
    ),
    Case("a model list of 100 MB (no Content-Length)", route(MODELS, stream_forever), 1, "larger than 4 MiB", QUICK),
    Case(
        "a model list of 300,000 entries (MemoryError once)",
        route(MODELS, body('{"data": [' + ",".join(["{}"] * 300_000) + "]}")),
        1,
        "more than 200,000 values",
        QUICK,
    ),
    Case(
        "JSON nested 100,000 levels deep (RecursionError once)",
        route(MODELS, body("[" * 100_000 + "]" * 100_000)),
        1,
        "nested more than 64 levels deep",
        QUICK,
    ),
    Case(
        "token ids of 1e400 (OverflowError once)",
        route(DONE, literal_completion("[1e400, 5]")),
        1,
        "choices[0].token_ids is not a list of token ids",
        QUICK,
    ),
    Case(
        'token_ids "abc" (exit 0 once)',
        route(DONE, completion_with(token_ids="abc")),
        1,
        "choices[0].token_ids is not a list of token ids",
        QUICK,
    ),
    Case(
        "completion_tokens of 10^30",
        route(DONE, completion_with(completion_tokens=10**30)),
        1,
        "usage.completion_tokens is 1000000000000000000000000000000, not a count from 0 to 8",
        QUICK,
    ),
    Case("completion_tokens -5", route(DONE, completion_with(completion_tokens=-5)), 1, "not a count", QUICK),
    Case(
        "an integer of 5,000 digits",
        route(DONE, literal_completion("[" + "9" * 5000 + "]")),
        1,
        "not JSON (Exceeds the limit (4300 digits)",
        QUICK,
    ),
    Case(
        "a counter of +Inf on /metrics",
        route("/metrics", metrics_lines('vllm:spec_decode_num_drafts_total{model_name="m"} +Inf\n')),
        1,
        "is not a counter value",
        QUICK,
    ),
    Case("the counters go down (a restart)", restarting_metrics, 1, "the server restarted", QUICK),
    Case(
        "no speculative-decoding counters: no speculation",
        route("/metrics", metrics_lines('vllm:num_requests_running{model_name="m"} 0\n')),
        1,
        "serves without speculative decoding",
        QUICK,
    ),
    Case(
        "not HTTP at all (BadStatusLine once)",
        route(MODELS, raw(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")),
        2,
        "the server sent a malformed answer",
        QUICK,
    ),
    Case(
        "Content-Length longer than the body (IncompleteRead once)",
        route(MODELS, raw(head(200, "Content-Length: 1000") + b'{"data": []}')),
        2,
        "incomplete answer",
        QUICK,
    ),
    Case(
        "a header line of 200 KB (LineTooLong once)",
        route(MODELS, raw(head(200, "X-Long: " + "a" * 200_000, "Content-Length: 2") + b"{}")),
        2,
        "the server sent a malformed answer",
        QUICK,
    ),
    Case(
        "100,000 headers (too many headers once)",
        route(MODELS, raw(head(200, *[f"X-{i}: y" for i in range(100_000)], "Content-Length: 2") + b"{}")),
        2,
        "the server sent a malformed answer",
        QUICK,
    ),
    Case(
        "a gzip-encoded answer although identity was asked",
        route(MODELS, raw(head(200, "Content-Encoding: gzip", "Content-Length: 4") + b"\x1f\x8b\x08\x00")),
        2,
        "'gzip'-encoded",
        QUICK,
    ),
    Case(
        "an HTML page in place of JSON",
        route(DONE, body("<html>hi</html>", "text/html")),
        1,
        "the answer is not JSON",
        QUICK,
    ),
    Case("HTTP 500 on a completion", route(DONE, lambda c, r: c.respond(500, b"boom")), 1, "HTTP 500: boom", QUICK),
    Case(
        "HTTP 401: the server needs a key",
        route(MODELS, lambda c, r: c.respond(401, b'{"error": "Unauthorized"}')),
        2,
        "needs an API key (HTTP 401)",
        QUICK,
    ),
    Case(
        "CRLF in the URL",
        nothing,
        2,
        "holds a space or a control character",
        QUICK,
        url=lambda s: s.url + "/\r\nX-Injected: 1",
    ),
    Case(
        "credentials in the URL",
        nothing,
        2,
        "the URL holds credentials",
        QUICK,
        url=lambda s: s.url.replace("//", "//u:p@"),
    ),
    Case("connection refused", nothing, 2, "cannot reach the server", QUICK, url=dead_url),
    Case(
        "no engine can be told (owned_by 'proxy', no /model_info, no /version, no /metrics)",
        several(
            route(MODELS, lambda c, r: c.json({"data": [{"id": "m", "owned_by": "proxy"}]})),
            route("/version", lambda c, r: c.json({"detail": "Not Found"}, 404)),
            route("/metrics", lambda c, r: c.json({"detail": "Not Found"}, 404)),
        ),
        1,
        "cannot tell which engine serves here",
        QUICK,
    ),
    Case("SGLang: healthy (reference)", sglang(), 0, "", QUICK),
    Case(
        "SGLang: a histogram that does not add up",
        sglang({"spec_correct_drafts_histogram": [1, 0, 0, 1]}),
        1,
        "spec_correct_drafts_histogram does not add up",
        QUICK,
    ),
    Case(
        "SGLang: spec_accept_length that is not completion tokens / verify steps",
        sglang({"spec_accept_length": 99.0}),
        1,
        "is not completion tokens 8 / spec_verify_ct 2",
        QUICK,
    ),
    Case(
        "SGLang: a verify count of 1e400",
        sglang({"spec_verify_ct": float("inf")}),
        1,
        "spec_verify_ct is inf, not a count",
        QUICK,
    ),
    Case(
        "SGLang: /server_info fails with the API key in its body (never shown)",
        sglang(server_info_status=500),
        1,
        "/server_info: HTTP 500",
        QUICK,
        options={"api_key": KEY},
        check=key_not_shown,
    ),
]


def table(outcomes: list[Outcome]) -> str:
    rows = ["| case | exit | seconds (bound) | message |", "|---|---|---|---|"]
    for outcome in outcomes:
        message = re.sub(r"http://127\.0\.0\.1:\d+", "URL", outcome.message).replace(KEY, "KEY")
        message = message.replace("|", "\\|") or "a valid result"
        message = message if len(message) <= 140 else message[:137] + "..."
        rows.append(
            f"| {outcome.case.name} | {outcome.exit_code} | {outcome.seconds:.1f} "
            f"({outcome.case.bound + SLACK_SECONDS:.1f}) | {message} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    outcomes = [run_case(case) for case in CASES]
    print(table(outcomes))
    bad = [o for o in outcomes if problems(o)]
    print(f"\n{len(CASES)} cases: {len(CASES) - len(bad)} ended cleanly, {len(bad)} did not")
    for outcome in bad:
        print(f"- {outcome.case.name}: {problems(outcome)}")
