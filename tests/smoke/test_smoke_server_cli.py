"""`smoke-test --server URL` from the command line: the engine option, protocols, datasets and the
report (both definitions of the acceptance length, the distance from a card), against the stand-in
SGLang 0.5.23 server (tests/sglang_server.py, checked against the wheel's own models in the SGLang
source tier) and the stand-in vLLM server of tests/smoke/test_smoke_server.py.

The stand-in's scripted engine accepts a chosen number of drafts per verify step, so every figure
the report prints is known before the run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from tests.sglang_server import FakeSglangServer

runner = CliRunner()
DFLASH2 = "z-lab/Qwen3.8-27B-DFlash2"  # configs/references: the card's GSM8K 5.46 (SGLang's definition)


def gsm8k_file(tmp_path: Path, rows: int = 6) -> Path:
    """A local GSM8K file in the dataset's own columns (`question`, `answer`)."""
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(
        "".join(json.dumps({"question": f"What is {i} plus {i}?", "answer": str(2 * i)}) + "\n" for i in range(rows)),
        encoding="utf-8",
    )
    return path


def card_run(server: FakeSglangServer, tmp_path: Path, *extra: str) -> Any:
    return runner.invoke(
        app,
        [
            "smoke-test", "--server", server.url, "--protocol", "zlab-card", "--dataset", "gsm8k",
            "--dataset-file", str(gsm8k_file(tmp_path)), "--num-prompts", "4", "--max-tokens", "64", *extra,
        ],
    )  # fmt: skip


def test_a_card_protocol_run_states_its_distance_from_the_card(tmp_path: Path) -> None:
    # K = 7 (8 tokens per block); every step accepts 4 drafts: 13 steps per 64-token answer.
    with FakeSglangServer(draft_model_path=DFLASH2, num_draft_tokens=8, accept_pattern=(4,)) as server:
        outcome = card_run(server, tmp_path, "--json")
        bodies = [body for path, body in server.requests if path == "/v1/chat/completions"]
        served = server.outcomes
    assert outcome.exit_code == 0, outcome.stdout + outcome.stderr
    document = json.loads(outcome.stdout)
    assert document["schema_version"] == 1 and document["engine"] == "sglang-server"
    assert document["protocol"]["name"] == "zlab-card" and document["dataset"]["name"] == "gsm8k"
    # The protocol's sampling reached the server: the card's T=1, top-p 0.95, top-k 20, thinking on.
    assert len(bodies) == 5  # one warm-up request and four measured prompts
    for body in bodies:
        assert (body["temperature"], body["top_p"], body["top_k"]) == (1, 0.95, 20)
        assert body["chat_template_kwargs"]["enable_thinking"] is True
    (run,) = document["drafts"][0]["runs"]
    measured = served[1:]
    sglang = sum(o.completion_tokens for o in measured) / sum(o.verify_ct for o in measured)
    lengths = run["acceptance_lengths"]
    assert abs(lengths["sglang"]["mean_per_request"] - sglang) < 0.05
    assert abs(lengths["vllm"]["pooled"] - 5.0) < 0.05
    (reference,) = run["references"]
    assert reference["same_protocol"] is True
    want = f"AL {sglang:.2f}, {sglang / 5.46:.0%} of the card's 5.46 on GSM8K, same protocol"
    assert reference["sentence"].startswith(want), reference["sentence"]

    # The same run for a reader: both definitions named, the card's distance in one sentence.
    with FakeSglangServer(draft_model_path=DFLASH2, num_draft_tokens=8, accept_pattern=(4,)) as server:
        text = card_run(server, tmp_path, "--no-color").stdout
    flat = " ".join(text.split())
    assert "SGLang accept length (completion tokens / verify steps) 4.92" in flat
    assert "vLLM mean acceptance length (1 + accepted / drafts) 5.00" in flat
    assert "(the floor's definition)" in flat
    assert want in flat
    assert "protocol: zlab-card (T=1, top-p 0.95, top-k 20" in flat


def test_the_engine_can_be_named(tmp_path: Path) -> None:
    with FakeSglangServer() as server:
        named = runner.invoke(
            app, ["smoke-test", "--server", server.url, "--server-engine", "sglang", "--num-prompts", "1", "--json"]
        )
        wrong = runner.invoke(
            app, ["smoke-test", "--server", server.url, "--server-engine", "vllm", "--num-prompts", "1", "--json"]
        )
    assert named.exit_code == 0, named.stdout
    details = json.loads(named.stdout)["drafts"][0]["runs"][0]["result"]["engine_details"]
    assert details["detected_by"] == "named by the caller" and details["server_engine"] == "sglang"
    # Named vLLM, the SGLang server has no vLLM counters: one JSON error, not a traceback.
    assert wrong.exit_code in (1, 2)
    error = json.loads(wrong.stdout)["error"]
    assert "/metrics" in error["message"] and "\n" not in error["message"]


def test_a_server_without_speculation_is_one_line_in_the_human_report() -> None:
    with FakeSglangServer(speculative=False) as server:
        outcome = runner.invoke(app, ["smoke-test", "--server", server.url, "--num-prompts", "1", "--no-color"])
    assert outcome.exit_code == 1
    lines = [line for line in (outcome.stdout + outcome.stderr).splitlines() if line.strip()]
    named = [line for line in lines if "serves without speculative decoding" in line]
    assert len(named) == 1 and named[0].startswith("error: ")
    assert "Traceback" not in outcome.stdout + outcome.stderr


def test_per_position_acceptance_not_reported_is_said_and_not_judged() -> None:
    class NoHistogram(FakeSglangServer):
        def _meta_info(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            meta = super()._meta_info(*args, **kwargs)
            meta.pop("spec_correct_drafts_histogram", None)
            return meta

    with NoHistogram() as server:
        outcome = runner.invoke(
            app, ["smoke-test", "--server", server.url, "--num-prompts", "1", "--max-tokens", "64", "--no-color"]
        )
    assert outcome.exit_code == 0, outcome.stdout
    flat = " ".join(outcome.stdout.split())
    assert "per-position acceptance: not available (the server reports no spec_correct_drafts_histogram)" in flat
    assert "drafted 0 positions" not in flat


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--dataset-file", "x.jsonl"], "--dataset-file needs --dataset NAME"),
        (["--dataset", "gsm8k", "--prompts", "p.txt"], "--dataset and --prompts both name the prompts"),
        (["--dataset", "squad"], "squad"),
        (["--protocol", "zlab-card", "--no-chat"], "disagrees with protocol zlab-card"),
        (["--protocol", "no-such-protocol"], "no-such-protocol"),
    ],
)
def test_bad_server_options_are_usage_errors(arguments: list[str], message: str) -> None:
    outcome = runner.invoke(app, ["smoke-test", "--server", "http://127.0.0.1:9", *arguments, "--json"])
    assert outcome.exit_code == 2, outcome.stdout
    document = json.loads(outcome.stdout)
    assert document["schema_version"] == 1
    assert message in document["error"]["message"] + document["error"].get("hint", "")


def test_a_sampling_protocol_needs_a_server(tmp_path: Path) -> None:
    outcome = runner.invoke(
        app,
        ["smoke-test", "-t", "example:engine-demo/target", "-d", "example:engine-demo/zlab-dflash",
         "--protocol", "zlab-card", "--dry-run", "--json"],
    )  # fmt: skip
    assert outcome.exit_code == 2
    error = json.loads(outcome.stdout)["error"]
    assert re.search(r"protocol zlab-card samples .* offline runs decode greedily", error["message"])
    assert "--server URL" in error["hint"]
