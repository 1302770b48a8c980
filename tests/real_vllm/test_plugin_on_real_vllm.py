"""The plugin against the real vLLM objects (0.33.0 or 0.34.0), for every bundled draft in both layouts.

Each row builds a real `VllmConfig` with `EngineArgs(...).create_engine_config()` from the tiny
bundled target and a bundled draft (or our `convert` of it to the other layout), then asks the
real objects: lookahead and draft-pass budget (on 0.34.0 also the `speculator_config` object that
owns them), `init_speculator(...)` on CPU, a real `DFlash2Qwen3DecoderLayer`, the V1 runner's
config validation and `DFlashProposer` (0.33.0; on 0.34.0 asking for V1 must fail), and the
speculative config's compile-cache hash. Stock vLLM (no plugin) is probed the same way, in its
own process. Limit: drafting itself runs in the V2-on-CPU tier (docs/tier-vllm-v2.md), not here.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.real_vllm.conftest import EXAMPLES, HAS_V1, VLLM_VERSION, Draft, layout

pytestmark = pytest.mark.real_vllm

BATCHED_TOKENS = 64  # probe.py: max_num_batched_tokens
ROWS = [f"{name}@{layout(sfa)}" for name in EXAMPLES for sfa in (False, True)]


def row(result: dict[str, Any], name: str) -> dict[str, Any]:
    case: dict[str, Any] = result["cases"][name]
    assert "v2_config_error" not in case, case["v2_config_error"]
    return case


def test_the_plugin_patched_this_vllm(patched: dict[str, Any], stock: dict[str, Any]) -> None:
    assert patched["plugin"]["status"] == "patched", patched["plugin"]
    assert patched["plugin"]["vllm_version"] == patched["vllm_version"] == VLLM_VERSION
    assert patched["has_v1_runner"] is HAS_V1 is patched["plugin"]["v1_runner"]
    assert stock["plugin"] is None  # VLLM_PLUGINS= kept vLLM's loader from registering it


@pytest.mark.parametrize("name", ROWS)
def test_lookahead_and_draft_budget(name: str, drafts: dict[str, Draft], patched: dict[str, Any]) -> None:
    draft, case = drafts[name], row(patched, name)
    # K query slots anchor-first, K + 1 bonus-anchor: what the draft needs, not what stock assumes.
    assert case["num_lookahead_tokens"] == draft.num_query_tokens == draft.k + (0 if draft.sample_from_anchor else 1)
    assert case["max_num_active_seqs"] == BATCHED_TOKENS // draft.num_query_tokens


@pytest.mark.parametrize("name", ROWS)
def test_speculator_query_count(name: str, drafts: dict[str, Draft], patched: dict[str, Any]) -> None:
    draft, case = drafts[name], row(patched, name)
    assert case["speculator"] == {
        "class": "DFlash2Speculator" if draft.dflash2 else "DFlashSpeculator",
        "num_query_per_req": draft.num_query_tokens,
        "sample_from_anchor": draft.sample_from_anchor,
    }


@pytest.mark.parametrize("name", [r for r in ROWS if "dflash2" in r])
def test_dflash2_conv_block(name: str, drafts: dict[str, Draft], patched: dict[str, Any]) -> None:
    draft, case = drafts[name], row(patched, name)
    assert case["conv_block_sizes"] == [draft.num_query_tokens] * 2


@pytest.mark.parametrize("name", ROWS)
def test_speculator_config_owns_the_sizing(
    name: str, drafts: dict[str, Draft], patched: dict[str, Any], stock: dict[str, Any]
) -> None:
    """0.34.0: the per-method config object vLLM asks for lookahead, budget and hash factors."""
    if HAS_V1:
        assert "speculator_config" not in row(patched, name)  # 0.33.0 has no such layer
        return
    draft, mine, theirs = drafts[name], row(patched, name)["speculator_config"], row(stock, name)["speculator_config"]
    queries = draft.num_query_tokens
    assert (
        mine["class"] == theirs["class"] == ("DFlash2SpeculatorConfig" if draft.dflash2 else "DFlashSpeculatorConfig")
    )
    assert (mine["num_lookahead_tokens"], mine["max_num_draft_seqs_64"]) == (queries, BATCHED_TOKENS // queries)
    assert (theirs["num_lookahead_tokens"], theirs["max_num_draft_seqs_64"]) == (
        draft.k + 1,
        BATCHED_TOKENS // (draft.k + 1),
    )
    expected = [f"dflash-tools:anchor-first:queries={queries}:k={draft.k}"] if draft.sample_from_anchor else []
    assert mine["hash_factors"] == expected
    assert theirs["hash_factors"] == []


@pytest.mark.parametrize("name", ROWS)
def test_v1_runner(name: str, drafts: dict[str, Draft], patched: dict[str, Any]) -> None:
    draft, case = drafts[name], row(patched, name)
    if not HAS_V1:
        # 0.34.0 removed V1: asking for it fails at start-up, whatever the draft; nothing to guard.
        assert "VLLM_USE_V2_MODEL_RUNNER=0 is no longer supported" in case["v1_config"]
        assert "v1_proposer" not in case and "v1_proposer_direct" not in case
        return
    if draft.dflash2:
        assert "Model Runner V1 does not support: DFlash candidate-head drafts" in case["v1_config"]
    elif draft.sample_from_anchor:
        assert "Model Runner V1 does not support: anchor-sampling DFlash drafts" in case["v1_config"]
        assert "reached the V1 DFlashProposer" in case["v1_proposer_direct"]
    else:
        assert case["v1_proposer_direct"] == "accepted"
        assert case["v1_config"] == "accepted"
        assert case["v1_proposer"] == "accepted: DFlashProposer"


@pytest.mark.parametrize("name", ROWS)
def test_compute_hash(name: str, drafts: dict[str, Draft], patched: dict[str, Any], stock: dict[str, Any]) -> None:
    draft, mine, theirs = drafts[name], row(patched, name)["compute_hash"], row(stock, name)["compute_hash"]
    if draft.sample_from_anchor:
        assert mine != theirs  # the layout and K are compile-cache factors
    else:
        assert mine == theirs  # existing compile caches of bonus-anchor drafts stay valid


def test_anchor_first_hashes_differ_by_k(drafts: dict[str, Draft], patched: dict[str, Any]) -> None:
    anchor = [n for n in ROWS if drafts[n].sample_from_anchor]
    hashes = {row(patched, n)["compute_hash"] for n in anchor}
    assert len(hashes) == len(anchor)


# --- what stock vLLM does with the same drafts: why the plugin exists -------------------------


@pytest.mark.parametrize("name", ROWS)
def test_stock_vllm(name: str, drafts: dict[str, Draft], stock: dict[str, Any]) -> None:
    draft, case = drafts[name], row(stock, name)
    assert case["num_lookahead_tokens"] == draft.k + 1  # K + 1 whatever the layout
    if draft.sample_from_anchor:
        assert "sample_from_anchor=True is not supported for DFlash" in case["speculator_error"]
    else:
        assert case["speculator"]["num_query_per_req"] == draft.k + 1
    if draft.dflash2:
        assert case["conv_block_sizes"] == [draft.k + 1] * 2
    if not HAS_V1:
        # 0.34.0: no V1 to fall back to, so an anchor-first draft is refused loudly (above), never mis-drafted.
        assert "VLLM_USE_V2_MODEL_RUNNER=0 is no longer supported" in case["v1_config"]
    elif draft.dflash2:
        assert "DFlash candidate-head drafts" in case["v1_config"]
    else:
        # Stock V1 takes an anchor-first DFlash draft without a word and drafts it bonus-anchor.
        assert case["v1_config"] == "accepted"
        assert case["v1_proposer"] == "accepted: DFlashProposer"
        assert case["v1_proposer_direct"] == "accepted"
