"""`plan` and `smoke-test --dry-run` offline with a target the Hub cannot be asked about (DFT090).

The bundled presets name Hub targets (Qwen/Qwen3-8B, Qwen/Qwen3.8-27B) whose config.json
dflash-tools does not bundle; their z-lab drafts are answered from the bundled profiles (DFT056).
Offline with an empty Hugging Face cache, the plan answers what needs no target and names the
rest; a target that is a missing local path, or a real run, stays an error (exit 2).

The cache is an empty tmp folder and huggingface_hub's own settings (read once at import) are
pointed at it as the environment is, so the machine's real cache cannot answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants
from typer.testing import CliRunner

from dflash_tools.cli import app

runner = CliRunner()
# JSON `not_checked` of a plan whose target was not read (docs/plan.md).
TARGET_CHECKS = ["memory", "tensor_parallel", "max_model_len", "pairing"]


@pytest.fixture
def offline_empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf"
    cache.mkdir()
    for name in ("HF_HOME", "HF_HUB_CACHE"):
        monkeypatch.setenv(name, str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = runner.invoke(app, [*args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def findings(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["code"]: f for f in document["findings"]}


def test_the_qwen3_8b_preset_plans_offline_without_its_target(offline_empty_cache: Path) -> None:
    code, document = run_json("plan", "--preset", "qwen3-8b-dflash-b16", "--gpu-memory", "80")
    assert (code, document["exit_code"], document["ok"], document["schema_version"]) == (0, 0, True, 1)
    (plan,) = document["plans"]
    target = plan["target"]
    assert target["source"] == "Qwen/Qwen3-8B" and target["model"] is None and target["location"] is None
    assert "HF_HUB_OFFLINE" in target["not_read"]["reason"]
    assert "hf download Qwen/Qwen3-8B --include '*.json'" in target["not_read"]["hint"]
    assert plan["not_checked"] == TARGET_CHECKS
    assert plan["memory"] is None and plan["tensor_parallel"] is None and plan["weights"] is None
    unread = findings(plan)["DFT090"]
    assert unread["severity"] == "warning" and unread["values"]["not_checked"] == TARGET_CHECKS
    assert "DFT087" not in findings(plan)  # the memory is named by DFT090, not as "weights unknown"
    # What needs no target: the draft (from its bundled profile), each release, K and queries, lines.
    assert "DFT056" in findings(plan)
    assert set(plan["engines"]) == {"sglang", "vllm==0.33.0", "vllm==0.34.0"}
    for engine in plan["engines"].values():
        assert engine["serves"] and engine["outcome"] == "served"
        assert (engine["num_speculative_tokens"], engine["num_query_tokens"]) == (16, 17)
        assert "Qwen/Qwen3-8B" in engine["launch_command"]
        assert "z-lab/Qwen3-8B-DFlash-b16" in engine["launch_command"]
    vllm = plan["engines"]["vllm==0.34.0"]
    # The budget check with the release's default for the GPU: 8192 >= 16 x 17.
    assert vllm["token_budget"]["ok"] and vllm["token_budget"]["required_max_num_batched_tokens"] == 16 * 17
    assert vllm["settings"]["max_num_batched_tokens"] == {
        "value": 8192,
        "source": "default",
        "note": vllm["settings"]["max_num_batched_tokens"]["note"],
    }
    assert vllm["settings"]["max_model_len"]["value"] == 8192  # the preset's, on the line as given
    assert vllm["launch"]["argv"][:3] == ["vllm", "serve", "Qwen/Qwen3-8B"]


def test_the_qwen38_preset_draft_plans_offline_without_its_target(offline_empty_cache: Path) -> None:
    code, document = run_json(
        "plan", "--preset", "qwen3.8-27b-dflash2", "--draft", "z-lab/Qwen3.8-27B-DFlash2", "--gpu-memory", "80"
    )
    assert (code, document["exit_code"], document["ok"]) == (0, 0, True)
    (plan,) = document["plans"]
    assert "not_read" in plan["target"] and "DFT090" in findings(plan)
    vllm = plan["engines"]["vllm==0.34.0"]
    assert (vllm["num_speculative_tokens"], vllm["num_query_tokens"], vllm["layout"]) == (7, 8, "bonus")
    assert vllm["launch_command"].startswith("vllm serve Qwen/Qwen3.8-27B ")


def test_the_human_plan_names_what_is_not_checked_within_80_columns(
    offline_empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, ["plan", "--preset", "qwen3-8b-dflash-b16", "--gpu-memory", "80"])
    assert result.exit_code == 0, result.stdout
    lines = result.stdout.splitlines()
    assert lines[0].startswith("OK for ")
    assert "target not read (DFT090)" in " ".join(lines[:2])
    assert any(line.startswith("not checked  memory fit") for line in lines)
    assert any("not read: HF_HUB_OFFLINE is set" in line for line in lines)
    launch = [line for line in lines if line.startswith("vllm serve Qwen/Qwen3-8B")]
    assert len(launch) == 2
    # Every line but the launch lines' one-piece JSON fits 80 columns.
    assert all(len(line) <= 80 for line in lines if "speculative-config" not in line and '"method"' not in line)


def test_smoke_dry_run_plans_offline_without_its_target(offline_empty_cache: Path) -> None:
    code, document = run_json("smoke-test", "--preset", "qwen3-8b-dflash-b16", "--dry-run")
    assert (code, document["exit_code"], document["ok"]) == (0, 0, True)
    target = document["target"]
    assert target["source"] == "Qwen/Qwen3-8B" and target["not_checked"] == ["pairing"]
    assert "HF_HUB_OFFLINE" in target["not_read"]["reason"]
    (draft,) = document["drafts"]
    assert draft["runnable"] and draft["preflight"]["ok"]
    assert "DFT090" in [f["code"] for f in draft["preflight"]["findings"]]
    (run,) = draft["runs"]
    assert (run["num_speculative_tokens"], run["num_query_tokens"]) == (16, 17)


def test_a_smoke_run_still_needs_its_target(offline_empty_cache: Path) -> None:
    # Not a dry run: the run cannot start without the target, whatever the engine installed here.
    code, document = run_json("smoke-test", "--preset", "qwen3-8b-dflash-b16", "--runtime", "torch")
    assert code == 2 and document["exit_code"] == 2 and document["ok"] is False
    assert "Qwen/Qwen3-8B" in document["error"]["message"]


def test_a_missing_local_target_stays_an_error(
    offline_empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, document = run_json("plan", "-t", str(tmp_path / "no-such-target"), "-d", "z-lab/Qwen3-8B-DFlash-b16")
    assert code == 2 and document["error"]["kind"] == "source"
    # Shaped like a repo id, but its parent folder is here: a mistyped local path, not the Hub's.
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    code, document = run_json("plan", "-t", "models/no-such-target", "-d", "z-lab/Qwen3-8B-DFlash-b16")
    assert code == 2 and "models/no-such-target" in document["error"]["message"]
    code, document = run_json(
        "smoke-test", "-t", "models/no-such-target", "-d", "z-lab/Qwen3-8B-DFlash-b16", "--dry-run"
    )
    assert code == 2 and document["exit_code"] == 2


def test_an_unreachable_hub_plans_without_its_target(tmp_path: Path) -> None:
    """Online, an endpoint that refuses connections (port 9, discard): the same answer, saying so."""
    cache = tmp_path / "hf"
    cache.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_HOME=str(cache), HF_HUB_CACHE=str(cache), HF_ENDPOINT="http://127.0.0.1:9", COLUMNS="80")
    result = subprocess.run(
        [sys.executable, "-m", "dflash_tools", "plan", "--preset", "qwen3-8b-dflash-b16", "--timeout", "2", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (plan,) = json.loads(result.stdout)["plans"]
    assert "http://127.0.0.1:9 could not be reached" in plan["target"]["not_read"]["reason"]
    assert plan["engines"]["vllm==0.34.0"]["num_query_tokens"] == 17
