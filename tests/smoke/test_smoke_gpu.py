"""The real thing, on a GPU host with vLLM installed: `pytest -m gpu tests/smoke/test_smoke_gpu.py`.

Skipped by default (the pytest addopts deselect `gpu`). `DFLASH_TOOLS_GPU_PRESET` picks the
preset (default qwen3.8-27b-dflash2: the vLLM PR's plan, one H200); bench/gpu_smoke.sh runs the
same thing and keeps the JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


def test_preset_passes_on_gpu(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    preset = os.environ.get("DFLASH_TOOLS_GPU_PRESET", "qwen3.8-27b-dflash2")
    completed = subprocess.run(
        [sys.executable, "-m", "dflash_tools", "smoke-test", "--preset", preset, "--runtime", "vllm",
         "--json", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=7200, check=False,
    )  # fmt: skip
    document = json.loads(completed.stdout)
    failures = {d["label"]: d["verdict"] for d in document["drafts"] if d["verdict"]["status"] != "pass"}
    assert completed.returncode == 0, failures
    for draft in document["drafts"]:
        (run,) = draft["runs"]
        result = run["result"]
        assert len(result["accepted_per_position"]) == run["num_speculative_tokens"]
        assert result["engine_details"]["runner"] == "v2"
        if run["serving"] == "plugin":
            assert result["engine_details"]["plugin"]["active"]
            assert result["query_positions_per_step"] == [run["num_query_tokens"]] * len(
                result["query_positions_per_step"]
            )
