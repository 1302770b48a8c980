"""End to end through the real child process with the torch reference engine (CPU, no GPU).

The drafts and target are the reference engine's planted demo pair (dflash_tools_testing.demos.engine_demo,
written here), whose acceptance is known in advance: the full pipeline, plan -> request file ->
child process -> engine -> result file -> verdict, runs for real; only vLLM is absent. The
trained bundled pair's A/B is in test_trained_demo_ab.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from tests.torch_extra import require_torch_extra

require_torch_extra()
demo = pytest.importorskip("dflash_tools_testing.demos.engine_demo")

runner = CliRunner()


def test_dflash2_in_both_layouts_on_cpu(tmp_path: Path) -> None:
    written = demo.write_planted_demo(tmp_path / "demo")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt_token_ids": p}) + "\n" for p in demo.demo_prompts(1)), encoding="utf-8"
    )
    work = tmp_path / "work"
    result = runner.invoke(
        app,
        [
            "smoke-test", "--runtime", "torch", "--device", "cpu", "--dtype", "float32",
            "-t", str(written["target"]), "-d", str(written["zlab-dflash2"]), "-d", str(written["zlab-dflash2-anchor-first"]),
            "--prompts", str(prompts), "--max-tokens", "8", "--output-dir", str(work), "--json",
        ],
    )  # fmt: skip
    document = json.loads(result.stdout)
    assert result.exit_code == 0, [d["verdict"] for d in document["drafts"]]
    assert document["prompts"] == {
        "source": str(prompts), "count": 1, "tokenized": True, "max_tokens": 8, "chat": False, "enable_thinking": False
    }  # fmt: skip
    bonus, anchor = (d["runs"][0] for d in document["drafts"])
    for run, queries in ((bonus, 8), (anchor, 7)):
        outcome = run["result"]
        assert outcome["ok"] and outcome["engine"] == "torch"
        assert len(outcome["accepted_per_position"]) == 7
        assert set(outcome["query_positions_per_step"]) == {queries}  # the layout was honoured
        assert run["token_identity"]["token_identical"] is True  # lossless verification
        assert Path(outcome["log_path"]).is_file()
    assert json.loads((work / f"{bonus['slug']}.request.json").read_text(encoding="utf-8"))["baseline"] is True
