"""The process boundary: child command, request file, log, timeout, crashes, invalid results.

The engine child is replaced through `DFLASH_TOOLS_SMOKE_CHILD` by tests/fake_child.py; the real
child entry is also run, up to the point where it needs vLLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

import dflash_tools_testing as testing
from dflash_tools import smoke_contract as contract
from dflash_tools.draft.config_paths import set_path
from dflash_tools.draft.target import load_target
from dflash_tools.plan.presets import DraftEntry
from dflash_tools.smoke.options import SmokeOptions
from dflash_tools.smoke.plan import resolve_plan
from dflash_tools.smoke.runner import CHILD_COMMAND_ENV, RunFiles, run_child
from dflash_tools.smoke.vllm_engine import build_overlay

FAKE_CHILD = Path(__file__).parents[1] / "fake_child.py"


@pytest.fixture
def fake_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHILD_COMMAND_ENV, f"{sys.executable} {FAKE_CHILD}")


def make_request(
    tmp_path: Path, *, engine: str = "vllm", spec: testing.DraftSpec = testing.TINY_DFLASH2
) -> contract.SmokeRequest:
    draft = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash2", spec)
    target = tmp_path / "target"
    testing.write_target(target, spec)
    options = SmokeOptions(
        target=str(target), drafts=[DraftEntry(str(draft))], prompts=["one", "two"], engine=engine, max_tokens=8
    )
    plan = resolve_plan(options, None, load_target(str(target)))
    request = plan.drafts[0].runs[0].request
    assert request is not None
    return request


def test_success_log_and_progress(tmp_path: Path, fake_child: None) -> None:
    request = make_request(tmp_path)
    files = RunFiles.under(tmp_path / "work", "01-draft")
    seen: list[str] = []
    result = run_child(request, files, env={"VLLM_USE_V2_MODEL_RUNNER": "1"}, timeout_s=60, on_progress=seen.append)
    assert result["ok"], result["error"]
    assert result["num_drafts"] == 10 and result["accepted_per_position"] == [10] * 7
    assert result["mean_acceptance_length"] == 8.0
    assert result["log_path"] == str(files.log)
    assert json.loads(files.request.read_text(encoding="utf-8")) == request
    log = files.log.read_text(encoding="utf-8")
    assert "process env: VLLM_USE_V2_MODEL_RUNNER=1" in log  # the plan's environment reaches the child
    assert seen[-2:] == ["loading the target", "generating"]
    assert result["engine_details"]["exit_code"] == 0


def test_child_crash(tmp_path: Path, fake_child: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CHILD_MODE", "crash")
    files = RunFiles.under(tmp_path / "work", "crash")
    result = run_child(make_request(tmp_path), files, env={}, timeout_s=60)
    assert not result["ok"]
    assert result["error"] == (
        "the child exited with code 3 without writing a result; last log line: RuntimeError: CUDA error: out of memory"
    )
    assert result["engine_details"]["log_tail"][-1] == "RuntimeError: CUDA error: out of memory"
    assert result["log_path"] == str(files.log)


def test_child_error_result_and_invalid_result(
    tmp_path: Path, fake_child: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = make_request(tmp_path)
    monkeypatch.setenv("FAKE_CHILD_MODE", "error")
    result = run_child(request, RunFiles.under(tmp_path / "work", "error"), env={}, timeout_s=60)
    assert not result["ok"] and "not supported for DFlash" in (result["error"] or "")
    monkeypatch.setenv("FAKE_CHILD_MODE", "invalid")
    result = run_child(request, RunFiles.under(tmp_path / "work", "invalid"), env={}, timeout_s=60)
    assert not result["ok"]
    assert result["error"] == "the child wrote an invalid result: result: ok is str, expected bool"


def test_timeout_stops_the_whole_process_group(
    tmp_path: Path, fake_child: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "grandchild.pid"
    monkeypatch.setenv("FAKE_CHILD_MODE", "hang")
    monkeypatch.setenv("FAKE_CHILD_PIDFILE", str(pidfile))
    started = time.monotonic()
    result = run_child(make_request(tmp_path), RunFiles.under(tmp_path / "work", "hang"), env={}, timeout_s=2)
    assert time.monotonic() - started < 30
    assert not result["ok"]
    assert result["error"] == "timed out after 2 s; the child and its processes were stopped"
    grandchild = int(pidfile.read_text(encoding="utf-8"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {grandchild} (a vLLM worker, in real life) survived the timeout")


def test_unstartable_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHILD_COMMAND_ENV, str(tmp_path / "no-such-program"))
    result = run_child(make_request(tmp_path), RunFiles.under(tmp_path / "work", "x"), env={}, timeout_s=5)
    assert not result["ok"] and "cannot start the child process" in (result["error"] or "")


# The real child entry, in a Python where vLLM cannot be imported whether or not it is installed:
# a None entry in sys.modules is how Python marks a module as unimportable.
WITHOUT_VLLM = (
    "import runpy, sys; sys.modules['vllm'] = None; "
    "runpy.run_module('dflash_tools.smoke.child', run_name='__main__', alter_sys=True)"
)


def run_real_child(tmp_path: Path, request: dict[str, object]) -> tuple[int, dict[str, object]]:
    request_path = tmp_path / "request.json"
    result_path = tmp_path / "result.json"
    request_path.write_text(json.dumps(request), encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_VLLM, "--request", str(request_path), "--result", str(result_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return completed.returncode, json.loads(result_path.read_text(encoding="utf-8"))


def test_real_child_rejects_a_bad_request(tmp_path: Path) -> None:
    code, result = run_real_child(tmp_path, {"schema_version": 1, "engine": "vllm"})
    assert code == 2
    assert result["ok"] is False and "missing key 'target'" in str(result["error"])
    assert contract.validate_result(result)


def test_real_child_builds_the_overlay_then_needs_vllm(tmp_path: Path) -> None:
    """Up to the process boundary for real: overlay folder, then the import vLLM is needed for."""
    request = dict(make_request(tmp_path))
    request["draft_config_overrides"] = {"dflash_config.sample_from_anchor": True}
    request["label"] = "flip me"
    code, result = run_real_child(tmp_path, request)
    assert code == 1
    assert result["ok"] is False
    assert str(result["error"]).startswith("ModuleNotFoundError: import of vllm halted")
    overlay = tmp_path / "flip_me.overlay"
    config = json.loads((overlay / "config.json").read_text(encoding="utf-8"))
    assert config["dflash_config"]["sample_from_anchor"] is True
    assert (overlay / "model.safetensors").is_symlink()
    original = json.loads((tmp_path / "draft" / "config.json").read_text(encoding="utf-8"))
    assert original["dflash_config"]["sample_from_anchor"] is False  # the checkpoint is untouched


def test_overlay_links_every_file_and_edits_only_the_config(tmp_path: Path) -> None:
    draft = testing.write_checkpoint(
        tmp_path / "draft", "speculators-dflash", replace(testing.TINY, sample_from_anchor=None), shards=2
    )
    before = (draft / "config.json").read_bytes()
    overlay = build_overlay(draft, tmp_path / "overlay", {"sample_from_anchor": True})
    names = sorted(p.name for p in overlay.iterdir())
    assert names == sorted(p.name for p in draft.iterdir())
    assert all((overlay / n).is_symlink() for n in names if n != "config.json")
    assert json.loads((overlay / "config.json").read_text(encoding="utf-8"))["sample_from_anchor"] is True
    assert (draft / "config.json").read_bytes() == before
    build_overlay(draft, tmp_path / "overlay", {"sample_from_anchor": False})  # rebuilt in place
    nested: dict[str, object] = {"a": 1}
    set_path(nested, "b.c.d", 2)
    assert nested == {"a": 1, "b": {"c": {"d": 2}}}
