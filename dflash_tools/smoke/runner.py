"""The process boundary: start the engine child, watch it, time it out, read its result.

The child is `python -m dflash_tools.smoke.child --request REQ --result RES`, started in its own
session (vLLM starts engine-core and worker processes; a timeout ends the whole group), with
stdout and stderr in a log file that outlives the run. `DFLASH_TOOLS_SMOKE_CHILD` replaces the
child command (shell words); it is the one seam tests use to stand in for a GPU engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.smoke.plan import SmokePlan
from dflash_tools.smoke.run_plan import RunPlan
from dflash_tools.vllm_plugin.markers import MARKER_DIR_ENV, read_markers, summarize

CHILD_COMMAND_ENV = "DFLASH_TOOLS_SMOKE_CHILD"
KILL_GRACE_S = 10.0


def child_command() -> list[str]:
    override = os.environ.get(CHILD_COMMAND_ENV)
    if override:
        return shlex.split(override)
    return [sys.executable, "-m", "dflash_tools.smoke.child"]


def write_json_atomic(path: Path, document: Any) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    partial.replace(path)


@dataclass
class RunFiles:
    request: Path
    result: Path
    log: Path
    markers: Path

    @classmethod
    def under(cls, work_dir: Path, slug: str) -> RunFiles:
        return cls(
            request=work_dir / f"{slug}.request.json",
            result=work_dir / f"{slug}.result.json",
            log=work_dir / f"{slug}.log",
            markers=work_dir / f"{slug}.markers",
        )


def _tail(path: Path, lines: int = 15) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


class _LogWatcher:
    """Reads what the child appended to its log and reports `[dflash-tools]` progress lines."""

    def __init__(self, path: Path, on_progress: Callable[[str], None] | None) -> None:
        self.path = path
        self.on_progress = on_progress
        self.offset = 0
        self.partial = ""

    def poll(self) -> None:
        if self.on_progress is None:
            return
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except OSError:
            return
        self.offset += len(chunk)
        text = self.partial + chunk.decode("utf-8", errors="replace")
        *lines, self.partial = text.split("\n")
        for line in lines:
            if line.startswith(contract.PROGRESS_PREFIX):
                self.on_progress(line[len(contract.PROGRESS_PREFIX) :].strip())


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left after a grace period."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=KILL_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_child(
    request: contract.SmokeRequest,
    files: RunFiles,
    *,
    env: dict[str, str],
    timeout_s: float,
    on_progress: Callable[[str], None] | None = None,
) -> contract.SmokeResult:
    """Run one request in a child process; always returns a contract result (ok or not)."""
    engine = request["engine"]
    files.request.parent.mkdir(parents=True, exist_ok=True)
    files.markers.mkdir(parents=True, exist_ok=True)
    files.result.unlink(missing_ok=True)
    write_json_atomic(files.request, request)
    child_env = {**os.environ, **env, MARKER_DIR_ENV: str(files.markers), "PYTHONUNBUFFERED": "1"}
    command = [*child_command(), "--request", str(files.request), "--result", str(files.result)]
    started = time.monotonic()
    with open(files.log, "wb") as log:
        log.write(f"[dflash-tools launcher] {shlex.join(command)}\n".encode())
        log.flush()
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env,
                start_new_session=True,
            )
        except OSError as exc:
            return contract.failed_result(engine, f"cannot start the child process ({exc})", log_path=str(files.log))
        watcher = _LogWatcher(files.log, on_progress)
        timed_out = False
        try:
            while process.poll() is None:
                if time.monotonic() - started > timeout_s:
                    timed_out = True
                    _stop_group(process)
                    break
                watcher.poll()
                time.sleep(0.1)
        except BaseException:
            _stop_group(process)
            raise
        watcher.poll()
    elapsed = time.monotonic() - started
    result = _read_result(engine, files, process.returncode, timed_out, timeout_s)
    result["log_path"] = str(files.log)
    details = dict(result.get("engine_details") or {})
    details.setdefault("wall_s", round(elapsed, 3))
    details.setdefault("exit_code", process.returncode)
    markers = read_markers(files.markers)
    if markers and "plugin" not in details:
        details["plugin"] = summarize(markers, required=bool(request.get("plugin_required")))
    result["engine_details"] = details
    return result


def _read_result(
    engine: str, files: RunFiles, returncode: int | None, timed_out: bool, timeout_s: float
) -> contract.SmokeResult:
    tail = _tail(files.log)
    details = {"log_tail": tail}
    if timed_out:
        return contract.failed_result(
            engine, f"timed out after {timeout_s:g} s; the child and its processes were stopped", details=details
        )
    try:
        document = json.loads(files.result.read_text(encoding="utf-8"))
    except FileNotFoundError:
        how = (
            f"was killed by signal {-returncode}"
            if returncode is not None and returncode < 0
            else f"exited with code {returncode}"
        )
        last = next((line for line in reversed(tail) if line.strip()), "")
        return contract.failed_result(
            engine,
            f"the child {how} without writing a result" + (f"; last log line: {last.strip()[:200]}" if last else ""),
            details=details,
        )
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return contract.failed_result(engine, f"the child wrote an unreadable result ({exc})", details=details)
    try:
        result = contract.validate_result(document)
    except contract.ContractError as exc:
        return contract.failed_result(engine, f"the child wrote an invalid result: {exc}", details=details)
    if not result["ok"]:
        merged = dict(result.get("engine_details") or {})
        merged.setdefault("log_tail", tail)
        result["engine_details"] = merged
    return result


def execute_plan(
    plan: SmokePlan,
    work_dir: Path,
    *,
    timeout_s: float,
    on_start: Callable[[RunPlan, Path], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
    on_done: Callable[[RunPlan, contract.SmokeResult], None] | None = None,
) -> dict[str, contract.SmokeResult]:
    """Run every runnable run of a `SmokePlan` in turn; the target-alone baseline runs once.

    The first run that completes with a baseline provides it to all; when the run that was to
    measure it fails, the next one asks for it again.
    """
    results: dict[str, contract.SmokeResult] = {}
    have_baseline = False
    for _draft, run in plan.runs():
        assert run.request is not None
        request = dict(run.request)
        request["baseline"] = bool(plan.options.baseline and not have_baseline)
        files = RunFiles.under(work_dir, run.slug)
        if on_start is not None:
            on_start(run, files.log)
        result = run_child(
            contract.validate_request(request), files, env=run.env, timeout_s=timeout_s, on_progress=on_progress
        )
        have_baseline = have_baseline or (result["ok"] and result["baseline"] is not None)
        results[run.slug] = result
        if on_done is not None:
            on_done(run, result)
    return results


def execute_references(
    plan: SmokePlan,
    work_dir: Path,
    *,
    timeout_s: float,
    on_start: Callable[[RunPlan, Path], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
    on_done: Callable[[RunPlan, contract.SmokeResult], None] | None = None,
) -> dict[str, contract.SmokeResult]:
    """Repeat every run of the plan on the torch reference engine (the cross-check), by slug."""
    from dflash_tools.smoke.cross_check import reference_request

    references: dict[str, contract.SmokeResult] = {}
    for _draft, run in plan.runs():
        assert run.request is not None
        request = reference_request(run.request)
        files = RunFiles.under(work_dir, f"{run.slug}.torch")
        if on_start is not None:
            on_start(run, files.log)
        result = run_child(request, files, env={}, timeout_s=timeout_s, on_progress=on_progress)
        references[run.slug] = result
        if on_done is not None:
            on_done(run, result)
    return references
