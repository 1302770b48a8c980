"""A hostile or failing Hub: every case of tests/hostile/hub_cases.py ends cleanly, through the real CLI.

In process (the stand-in Hub serves from a thread of this process), so the suite pays for each
case's requests and nothing else; `bench/hostile_hub.py` runs the same cases one process each and
measures their memory (figures in docs/reliability.md).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from huggingface_hub import constants
from typer.testing import CliRunner

from dflash_tools.cli import app
from tests.hostile.hub_cases import CASES, Case, Outcome, cache_files, command_line, problems, set_up
from tests.hub_server import HubServer, point_huggingface_hub_at


def dead_endpoint() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # closed again: connections are refused


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_hub_case_ends_cleanly(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = HubServer().start()
    try:
        set_up(case, server)
        point_huggingface_hub_at(
            monkeypatch, tmp_path, dead_endpoint() if case.extra.get("unreachable") else server.url
        )
        args, env = command_line(case, tmp_path / "out")
        started = time.monotonic()
        result = CliRunner().invoke(app, args, env=env)
        outcome = Outcome(
            case,
            result.exit_code,
            result.stdout,
            result.stderr,
            time.monotonic() - started,
            cache_files=cache_files(Path(constants.HF_HUB_CACHE)),
        )
    finally:
        server.stop()
    assert not problems(outcome), (
        f"{problems(outcome)}\nstdout: {outcome.stdout[:1500]}\nstderr: {outcome.stderr[:1500]}"
    )
