"""Greedy speculative decoding through vLLM's V2 pieces on CPU, against the torch engine's figures.

vLLM's: the target model's forward (TRITON_ATTN, its KV cache, the auxiliary hidden states the
draft reads), `rejection_sample` at temperature 0 (its greedy verification kernels), the
speculator's `propose()`. The harness's (`harness.generate`): which requests run, their tokens,
positions and block tables, when a request is done, and counting the way the torch engine counts.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.real_vllm_v2.conftest import GENERATE_MAX_TOKENS, GENERATE_REQUESTS, PROMPTS, V2Draft
from tests.real_vllm_v2.test_v2_speculator import CASES, served

pytestmark = pytest.mark.real_vllm_v2


def torch_engine(draft: V2Draft) -> dict[str, Any]:
    from dflash_tools.reference_engine import run_request

    case = draft.case
    result = run_request(
        {
            "schema_version": 1,
            "engine": "torch",
            "target": case["target"],
            "draft": case["draft"],
            "algorithm": draft.algorithm,
            "num_speculative_tokens": draft.k,
            "block_size": draft.num_query_tokens,
            "sample_from_anchor": draft.sample_from_anchor,
            "num_query_tokens": draft.num_query_tokens,
            "prompts": [],
            "prompt_token_ids": [PROMPTS[request] for request in GENERATE_REQUESTS],
            "max_tokens": GENERATE_MAX_TOKENS,
            "baseline": True,
            "seed": 0,
            "dtype": "float32",
            "device": "cpu",
            "engine_args": {"warmup": False, "target_impl": "builtin"},
            "env": {},
            "revision": None,
        }
    )
    assert result["ok"], result["error"]
    return result


@pytest.mark.parametrize("name", CASES)
def test_generation_matches_the_torch_engine(
    name: str, drafts: dict[str, V2Draft], patched: dict[str, Any], stock: dict[str, Any]
) -> None:
    draft = drafts[name]
    # Anchor-first drafts need the plugin; bonus-anchor ones run on stock vLLM (conftest.runs).
    generation = served(patched if draft.sample_from_anchor else stock, name)["generation"]
    reference = torch_engine(draft)
    # Token-identical to the target alone (the torch engine's greedy baseline) ...
    assert generation["outputs"] == reference["baseline"]["outputs"]
    assert reference["token_identical"] is True
    # ... with the same acceptance, position by position, as the torch engine's speculation.
    assert generation["num_drafts"] == reference["num_drafts"]
    assert generation["accepted_per_position"] == reference["accepted_per_position"]
    assert 0 < sum(generation["accepted_per_position"]) < generation["num_drafts"] * draft.k
