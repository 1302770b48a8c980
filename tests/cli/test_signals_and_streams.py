"""Output that survives any stream and signal (docs/reliability.md, "One JSON document on every path").

- SIGTERM and SIGHUP stop a command the way Ctrl-C (SIGINT) does: exit 128 + the signal's
  number, one JSON document with `error.kind` "interrupted", and nothing left beside OUT (no
  staging folder, no lock, no half-written OUT). The conversion is stopped at an exact point
  (the test-only pause hook `files.atomic.pause_point`, as in tests/convert/test_convert_kill.py).
- A stdout that cannot encode Unicode (`PYTHONIOENCODING=ascii`) gets an ASCII report and, with
  `--json`, a document that parses back; `COLUMNS` that no shell would set is ignored.

Each runs the real CLI in a child process: signals and stream encodings are the process's own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dflash_tools_testing as testing


def default_signals() -> None:
    """The child starts with SIGINT, SIGTERM and SIGHUP at their defaults, as a terminal starts a
    command. Inherited as they are, a suite run under `nohup` (SIGHUP ignored) or as a background
    job of a script (SIGINT ignored) would hand the child ignored signals, which the CLI rightly
    leaves ignored (`cli._signals.signals_handled`), and the child would wait out its pause."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "DFLASH_TOOLS_FORMAT")}
    env.update(HF_HUB_OFFLINE="1", **extra)
    return env


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_mid_conversion_gives_one_document_and_leaves_nothing(tmp_path: Path, signum: int) -> None:
    source = testing.write_checkpoint(tmp_path / "source", "speculators-dflash", testing.TINY)
    out_parent = tmp_path / "outputs"
    out_parent.mkdir()
    marker = tmp_path / "marker"
    env = child_env(DFLASH_TOOLS_TEST_PAUSE_AT="config-written", DFLASH_TOOLS_TEST_PAUSE_FILE=str(marker))
    child = subprocess.Popen(
        [sys.executable, "-m", "dflash_tools", "convert", str(source), "-o", str(out_parent / "out"), "--to", "zlab"]
        + ["--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the conversion never reached its pause point"
        time.sleep(0.01)
    child.send_signal(signum)
    stdout, stderr = child.communicate(timeout=60)
    assert child.returncode == 128 + signum, stderr
    document = json.loads(stdout)  # exactly one document: json.loads refuses trailing text
    assert document["ok"] is False and document["exit_code"] == 128 + signum
    assert document["error"]["kind"] == "interrupted"
    assert "Traceback" not in stderr
    assert sorted(p.name for p in out_parent.iterdir()) == [], "left beside OUT"


def test_a_signal_without_json_is_one_line(tmp_path: Path) -> None:
    source = testing.write_checkpoint(tmp_path / "source", "speculators-dflash", testing.TINY)
    marker = tmp_path / "marker"
    env = child_env(DFLASH_TOOLS_TEST_PAUSE_AT="config-written", DFLASH_TOOLS_TEST_PAUSE_FILE=str(marker))
    child = subprocess.Popen(
        [sys.executable, "-m", "dflash_tools", "convert", str(source), "-o", str(tmp_path / "out"), "--to", "zlab"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM
    assert "terminated by SIGTERM" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "out").exists()


def run(args: list[str], **extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "dflash_tools", *args], env=child_env(**extra), capture_output=True, timeout=120
    )


@pytest.mark.parametrize("source", ["example:zlab-dflash2", "example:speculators-dflash"])
def test_an_ascii_stdout_gets_an_ascii_report_and_a_document(source: str) -> None:
    human = run(["inspect", source, "--engine", "all"], PYTHONIOENCODING="ascii")
    assert human.returncode in (0, 1), human.stderr
    human.stdout.decode("ascii")  # nothing the stream cannot carry
    assert b"Traceback" not in human.stderr and human.stdout.strip()
    document = run(["inspect", source, "--engine", "all", "--json"], PYTHONIOENCODING="ascii")
    assert document.returncode == human.returncode
    parsed = json.loads(document.stdout.decode("ascii"))
    assert parsed["schema_version"] and parsed["source"] == source


@pytest.mark.parametrize("columns", ["abc", "", "0", "-5", "99999999999999999999", "80.5"])
def test_columns_no_shell_would_set_are_ignored(columns: str) -> None:
    done = run(["inspect", "example:zlab-dflash2"], COLUMNS=columns)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"OK") and b"Traceback" not in done.stderr
    assert not done.stderr.strip()
