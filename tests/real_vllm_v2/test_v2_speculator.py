"""vLLM's V2 DFlash / DFlash2 speculator executed on CPU, with the plugin applied and without.

`harness.py` builds each draft's real speculator, loads the real weights and calls `propose()`
six times for a batch of three requests whose drafts are verified in between (accepted and
rejected tokens), every Triton kernel run by Triton's interpreter. These tests check what it
recorded against the layout the draft declares (our own `inspect`) and against the torch
reference engine's draft tokens for the same context.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.real_vllm_v2.conftest import PLAN, V2Draft

pytestmark = pytest.mark.real_vllm_v2

CASES = [f"{algorithm}@{layout}" for algorithm in ("dflash", "dflash2") for layout in ("bonus-anchor", "anchor-first")]
PAD_SLOT_ID = -1  # vllm/v1/attention/backends/utils.py


def case_of(run: dict[str, Any], name: str) -> dict[str, Any]:
    """What the child recorded for one draft: the harness itself must not have failed on it."""
    case: dict[str, Any] = run["cases"][name]
    assert "error" not in case, case.get("traceback", case.get("error"))
    return case


def served(run: dict[str, Any], name: str) -> dict[str, Any]:
    """A draft vLLM built a speculator for (the tests that read its steps need one)."""
    case = case_of(run, name)
    assert "speculator_error" not in case, f"vLLM refused {name} (plugin: {run['plugin']}): {case['speculator_error']}"
    return case


def test_the_plugin_is_registered_only_where_it_should_be(patched: dict[str, Any], stock: dict[str, Any]) -> None:
    assert patched["plugin"]["status"] == "patched", patched["plugin"]
    assert stock["plugin"] is None  # VLLM_PLUGINS= kept vLLM's loader from registering it
    assert patched["workarounds"] == stock["workarounds"]


@pytest.mark.parametrize("name", CASES)
def test_speculator_runs_the_declared_layout(name: str, drafts: dict[str, V2Draft], patched: dict[str, Any]) -> None:
    draft, case = drafts[name], served(patched, name)
    assert case["speculator"]["class"] == ("DFlash2Speculator" if draft.algorithm == "dflash2" else "DFlashSpeculator")
    assert case["speculator"]["num_query_per_req"] == draft.num_query_tokens
    assert case["speculator"]["sample_from_anchor"] is draft.sample_from_anchor
    assert case["num_lookahead_tokens"] == draft.num_query_tokens
    if draft.algorithm == "dflash2":
        # The grouped convolution's block is the per-request query count, in every layer.
        assert case["conv_block_sizes"] == [[draft.num_query_tokens] * 2] * len(case["conv_block_sizes"])


def slot(position: int, block_ids: list[int], block_size: int) -> int:
    return block_ids[position // block_size] * block_size + position % block_size


def expected_kernel_outputs(draft: V2Draft, case: dict[str, Any], step: dict[str, Any]) -> dict[str, list[Any]]:
    """What `_prepare_dflash_inputs_kernel` must build for this step, from first principles.

    Per request i (batch row) the query block is Q rows at i * Q: the anchor (the token the target
    just sampled, at the position after the last accepted one) then Q - 1 mask tokens, at
    consecutive positions. Anchor-first (Q = K) samples rows 0 .. K - 1, each predicting the next
    position; bonus-anchor (Q = K + 1) samples rows 1 .. K at their own positions: both predict
    the K positions after the anchor. Rejected target rows store no context (slot -1).
    """
    spec = case["speculator"]
    q, k, block_size = draft.num_query_tokens, draft.k, case["kv_block_size"]
    max_num_reqs, max_num_tokens = spec["max_num_reqs"], spec["max_num_tokens"]
    target = step["target"]
    num_reqs = len(target["positions"])
    out: dict[str, list[Any]] = {
        "input_ids": [0] * max_num_tokens,
        "positions": [0] * max_num_tokens,
        "is_padding": [True] * max_num_tokens,
        "query_slot_mapping": [PAD_SLOT_ID] * max_num_tokens,
        "query_start_loc": [num_reqs * q] * (max_num_reqs + 1),
        "seq_lens": [0] * max_num_reqs,
        "context_positions": [],
        "context_slot_mapping": [],
        "sample_indices": [0] * (max_num_reqs * k),
        "sample_pos": [0] * (max_num_reqs * k),
        "sample_idx_mapping": [-1] * (max_num_reqs * k),
    }
    first_sampled_row = 0 if draft.sample_from_anchor else 1
    for i in range(num_reqs):
        positions, rejected, blocks = target["positions"][i], target["num_rejected"][i], target["block_ids"][i]
        valid = len(positions) - rejected
        anchor = positions[valid - 1] + 1
        for j in range(q):
            row = i * q + j
            out["input_ids"][row] = target["bonus"][i] if j == 0 else spec["mask_token_id"]
            out["positions"][row] = anchor + j
            out["is_padding"][row] = False
            out["query_slot_mapping"][row] = slot(anchor + j, blocks, block_size)
        out["query_start_loc"][i] = i * q
        out["seq_lens"][i] = anchor + q
        out["context_positions"] += [p if n < valid else 0 for n, p in enumerate(positions)]
        out["context_slot_mapping"] += [
            slot(p, blocks, block_size) if n < valid else PAD_SLOT_ID for n, p in enumerate(positions)
        ]
        for j in range(k):
            out["sample_indices"][i * k + j] = i * q + first_sampled_row + j
            out["sample_pos"][i * k + j] = anchor + 1 + j
            out["sample_idx_mapping"][i * k + j] = target["state_index"][i]
    return out


@pytest.mark.parametrize("name", CASES)
def test_input_kernel_builds_the_declared_layout(
    name: str, drafts: dict[str, V2Draft], patched: dict[str, Any]
) -> None:
    draft, case = drafts[name], served(patched, name)
    assert len(case["steps"]) == PLAN["steps"]
    for number, step in enumerate(case["steps"]):
        expected = expected_kernel_outputs(draft, case, step)
        for field, want in expected.items():
            assert step["kernel"][field] == want, f"step {number}: {field}"


@pytest.mark.parametrize("name", CASES)
def test_draft_tokens_equal_the_reference_engine(
    name: str, drafts: dict[str, V2Draft], patched: dict[str, Any]
) -> None:
    draft, case = drafts[name], served(patched, name)
    for number, step in enumerate(case["steps"]):
        assert step["drafts"] == step["reference"], (
            f"step {number}: vLLM drafted {step['drafts']}, the reference {step['reference']}"
        )
    # Not a vacuous match: the steps saw drafts accepted and drafts rejected.
    accepted = [count for step in case["steps"] for count in step["accepted"]]
    assert max(accepted) == draft.k and min(accepted) == 0, accepted


@pytest.mark.parametrize("name", [c for c in CASES if c.endswith("anchor-first")])
def test_stock_vllm_refuses_anchor_first_drafts(name: str, stock: dict[str, Any]) -> None:
    case = case_of(stock, name)
    assert case["speculator_error"] == (
        "ValueError: sample_from_anchor=True is not supported for DFlash. DFlash uses a fixed 1+N query "
        "layout where the anchor is the bonus token."
    )
    assert "steps" not in case and "speculator" not in case  # nothing was drafted, in any layout


@pytest.mark.parametrize("name", [c for c in CASES if c.endswith("bonus-anchor")])
def test_bonus_anchor_drafts_are_the_same_with_and_without_the_plugin(
    name: str, stock: dict[str, Any], patched: dict[str, Any]
) -> None:
    theirs, mine = served(stock, name), served(patched, name)
    assert theirs["speculator"] == mine["speculator"]
    assert [s["drafts"] for s in theirs["steps"]] == [s["drafts"] for s in mine["steps"]]
    assert [s["kernel"] for s in theirs["steps"]] == [s["kernel"] for s in mine["steps"]]
    assert all(s["drafts"] == s["reference"] for s in theirs["steps"])
