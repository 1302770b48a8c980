"""The request/result contract shared by the vLLM and torch engines, and the verdict rules."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dflash_tools import smoke_contract as contract
from dflash_tools.smoke.report import compare_layouts, exit_code, token_identity


def request(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema_version": 1,
        "engine": "torch",
        "target": "Qwen/Qwen3.8-27B",
        "draft": "z-lab/Qwen3.8-27B-DFlash2",
        "algorithm": "dflash2",
        "num_speculative_tokens": 7,
        "block_size": 8,
        "sample_from_anchor": False,
        "num_query_tokens": 8,
        "prompts": ["2 + 2 ="],
        "prompt_token_ids": None,
        "max_tokens": 16,
        "baseline": True,
        "seed": 0,
        "dtype": "bfloat16",
        "device": "cpu",
        "engine_args": {},
        "env": {},
        "revision": None,
    }
    document.update(changes)
    return document


def result(**changes: Any) -> dict[str, Any]:
    document = dict(contract.failed_result("torch", "x"))
    document.update(
        ok=True,
        error=None,
        num_drafts=4,
        num_draft_tokens=28,
        num_accepted_tokens=10,
        accepted_per_position=[4, 3, 2, 1, 0, 0, 0],
        acceptance_rate_per_position=[1.0, 0.75, 0.5, 0.25, 0.0, 0.0, 0.0],
        mean_acceptance_length=3.5,
        output_tokens=16,
        elapsed_s=1.0,
        tokens_per_second=16.0,
        outputs=[[1, 2, 3]],
        baseline={"outputs": [[1, 2, 3]], "output_tokens": 3, "elapsed_s": 2.0, "tokens_per_second": 1.5},
        token_identical=True,
        query_positions_per_step=[8, 8, 8, 8],
    )
    document.update(changes)
    return document


def test_valid_documents() -> None:
    assert contract.validate_request(request())["num_query_tokens"] == 8
    assert contract.validate_request(request(sample_from_anchor=True, num_query_tokens=7, chat=True, label="x"))
    assert contract.validate_request(request(prompts=[], prompt_token_ids=[[1, 2], [3]]))
    assert contract.validate_result(result())["mean_acceptance_length"] == 3.5
    assert contract.validate_result(result(engine_details={"runner": "v2"}, output_texts=["4"]))
    assert contract.validate_result(contract.failed_result("vllm", "boom", log_path="/tmp/x.log"))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"schema_version": 2}, "schema_version 2 is not 1"),
        ({"engine": "tensorrt"}, "engine 'tensorrt' is not one of vllm, torch"),
        ({"num_query_tokens": 7}, "num_query_tokens 7 does not match K 7 with sample_from_anchor=false"),
        ({"num_speculative_tokens": True}, "num_speculative_tokens is True, expected int"),
        ({"max_tokens": 0}, "max_tokens is 0, must be >= 1"),
        ({"prompts": [1]}, "prompts must be a list of strings"),
        ({"prompts": []}, "no prompts"),
        ({"prompt_token_ids": [[1, "a"]]}, "prompt_token_ids must be null or a list of lists of ints"),
        ({"chat": "yes"}, "chat is str, expected bool"),
        ({"dtype": 16}, "dtype is int, expected str or null"),
    ],
)
def test_bad_requests(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(contract.ContractError, match="request: " + message.replace("(", r"\(")):
        contract.validate_request(request(**changes))


def test_missing_keys_are_named() -> None:
    document = request()
    del document["seed"]
    with pytest.raises(contract.ContractError, match="request: missing key 'seed'"):
        contract.validate_request(document)
    with pytest.raises(contract.ContractError, match="request is not a JSON object"):
        contract.validate_request([])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ok": "yes"}, "ok is str, expected bool"),
        ({"num_drafts": -1}, "num_drafts is -1, must be >= 0"),
        ({"accepted_per_position": [1.5]}, "accepted_per_position must be a list of ints"),
        (
            {"acceptance_rate_per_position": [float("nan")]},
            "acceptance_rate_per_position must be a list of finite numbers",
        ),
        ({"outputs": [[1, None]]}, "outputs must be a list of lists of token ids"),
        ({"baseline": {"outputs": []}}, "result.baseline: missing key 'output_tokens'"),
        ({"query_positions_per_step": [7.0]}, "query_positions_per_step must be null or a list of ints"),
        ({"engine_details": []}, "engine_details is list, expected dict"),
    ],
)
def test_bad_results(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(contract.ContractError, match=message):
        contract.validate_result(result(**changes))


def test_derived_numbers() -> None:
    assert contract.mean_acceptance_length(40, 174) == pytest.approx(5.35)
    assert contract.mean_acceptance_length(0, 0) == 0.0
    assert contract.rates(4, [4, 2]) == [1.0, 0.5]
    assert contract.rates(0, [0]) == [0.0]
    assert contract.tokens_per_second(10, 0.0) == 0.0


def test_token_identity() -> None:
    assert token_identity([[1, 2], [3]], [[1, 2], [3]])["token_identical"] is True
    different = token_identity([[1, 2, 9], [3]], [[1, 2, 4], [3]])
    assert different == {
        "token_identical": False,
        "identical_prompts": 1,
        "prompts": 2,
        "first_mismatch": {"prompt": 0, "position": 2},
    }
    assert token_identity([[1, 2]], [[1, 2, 3]])["first_mismatch"] == {"prompt": 0, "position": 2}
    assert token_identity([], [])["token_identical"] is False


def test_layout_comparison() -> None:
    good = contract.validate_result(result())
    bad = contract.validate_result(result(mean_acceptance_length=1.2, acceptance_rate_per_position=[0.1] + [0.0] * 6))
    assert compare_layouts(good, bad, "bonus-anchor")["outcome"] == "declared"  # type: ignore[index]
    flipped = compare_layouts(bad, good, "anchor-first")
    assert flipped is not None and flipped["outcome"] == "flipped" and "mislabeled" in flipped["message"]
    close = contract.validate_result(copy.deepcopy(result(mean_acceptance_length=3.4)))
    assert compare_layouts(good, close, "bonus-anchor")["outcome"] == "inconclusive"  # type: ignore[index]
    assert compare_layouts(good, contract.failed_result("vllm", "x"), "bonus-anchor") is None


def test_exit_codes() -> None:
    assert exit_code([(None, "pass"), (None, "planned")]) == 0
    assert exit_code([(None, "pass"), (None, "fail")]) == 1
    assert exit_code([("preflight", "refused"), (None, "pass")]) == 1
    assert exit_code([("setup", "refused"), (None, "fail")]) == 2
    assert exit_code([(None, "error")]) == 1
