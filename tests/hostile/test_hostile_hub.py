"""A hostile or failing Hub: every case of tests/hostile/hub_cases.py ends cleanly, through the real CLI.

In process (the stand-in Hub serves from a thread of this process), so the suite pays for each
case's requests and nothing else; `bench/hostile_hub.py` runs the same cases one process each and
measures their memory (figures in docs/reliability.md).
"""

from __future__ import annotations

import socket
import time
import tracemalloc
from pathlib import Path

import pytest
from huggingface_hub import constants
from typer.testing import CliRunner

from dflash_tools.cli import app
from tests.hostile.hub_cases import CASES, Case, Outcome, cache_files, command_line, problems, set_up
from tests.hub_server import HubServer, point_huggingface_hub_at

# What one huge answer may cost in Python allocations; with the interpreter and imports (~50 MB)
# the process stays under the 200 MB that docs/reliability.md promises.
MAX_PYTHON_MEMORY_MB = 140


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
        if case.heavy:
            tracemalloc.start()
        started = time.monotonic()
        result = CliRunner().invoke(app, args, env=env)
        seconds = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1] / 2**20 if case.heavy else None
        tracemalloc.stop()
        outcome = Outcome(
            case,
            result.exit_code,
            result.stdout,
            result.stderr,
            seconds,
            cache_files=cache_files(Path(constants.HF_HUB_CACHE)),
        )
    finally:
        server.stop()
    # Python's own allocations while the case ran (the stand-in Hub's included): bench/hostile_hub.py
    # measures each case's whole process, interpreter and imports included, and finds the same order.
    assert peak is None or peak < MAX_PYTHON_MEMORY_MB, f"{peak:.0f} MB allocated"
    assert not problems(outcome), (
        f"{problems(outcome)}\nstdout: {outcome.stdout[:1500]}\nstderr: {outcome.stderr[:1500]}"
    )
