"""A hostile server behind `smoke-test --server`: every case of tests/hostile/smoke_cases.py ends cleanly.

In process, against the core entry (`smoke.server.run_server`) with --timeout 0.5 s and
--run-timeout 2 s; the CLI cases below check that a hostile answer through the command line is
one JSON document and one line on stderr.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from tests.hostile.smoke_cases import CASES, Case, problems, run_case
from tests.hostile.smoke_server import HostileServer


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_smoke_server_case_ends_cleanly(case: Case) -> None:
    outcome = run_case(case)
    assert not problems(outcome), problems(outcome)
    if outcome.result is not None:
        assert outcome.result["ok"] and outcome.result["num_drafts"] > 0


@pytest.mark.parametrize(
    ("path", "answer", "exit_code", "expect"),
    [
        ("/v1/models", b"SSH-2.0-OpenSSH_9.6\r\n\r\n", 2, "the server sent a malformed answer"),
        ("/v1/completions", None, 1, "choices[0].token_ids is not a list of token ids"),
    ],
    ids=["not HTTP", "token ids of 1e400"],
)
def test_hostile_answers_through_the_cli_are_one_json_document(
    path: str, answer: bytes | None, exit_code: int, expect: str
) -> None:
    with HostileServer() as server:
        if answer is not None:
            server.routes[path] = lambda c, r: c.send(answer)
        else:

            def handler(connection, request):  # type: ignore[no-untyped-def]
                text = json.dumps(connection.server.completion(request, token_ids="@"))
                connection.respond(200, text.replace('"@"', "[1e400]").encode())

            server.routes[path] = handler
        result = CliRunner().invoke(
            app, ["smoke-test", "--server", server.url, "--num-prompts", "1", "--max-tokens", "4", "--json"]
        )
    assert result.exit_code == exit_code, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["schema_version"] == 1 and document["ok"] is False and document["exit_code"] == exit_code
    assert expect in document["error"]["message"] and "\n" not in document["error"]["message"]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_a_server_stopped_before_its_acceptor_runs_raises_nothing_in_its_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The suite printed "Exception in thread ... (_accept): OSError: [Errno 9] Bad file
    descriptor": a case that stops the server at once closed the socket before the acceptor
    thread set its timeout. Here the stop is made to come first, every time."""
    import threading

    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    server = HostileServer()
    server.stopping.set()
    server._sock.close()  # what stop() does, before the acceptor has run
    server.start()
    server._acceptor.join(timeout=5)
    assert raised == []
