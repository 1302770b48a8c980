"""Sliding-window keys: served (vLLM 0.33.0) vs trained (speculators 0.9.0), and the DFT055 finding.

The known answers below are written out by hand from docs/sliding-window.md for a window of 5, a
context of 12 tokens (positions 0..11) and a block of 4 rows (positions 12..15).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import dflash_tools_testing as testing
from dflash_tools.draft.sliding_window import (
    block_keys_hidden,
    context_keys_lost,
    first_differing_context_length,
    served_key_visible,
    trained_key_visible,
)
from dflash_tools.inspect import describe, inspect_checkpoint
from tests.conftest import CheckpointFactory

W, P, Q = 5, 12, 4
KEYS = range(P + Q)


def served(row: int, causal: bool) -> list[int]:
    return [k for k in KEYS if served_key_visible(P + row, k, W, causal)]


def trained(row: int, causal: bool) -> list[int]:
    return [k for k in KEYS if trained_key_visible(P + row, k, P, W, causal)]


def test_served_keys_known_answers() -> None:
    # Bidirectional: |q - k| < 5 around each row.
    assert served(0, False) == [8, 9, 10, 11, 12, 13, 14, 15]
    assert served(1, False) == [9, 10, 11, 12, 13, 14, 15]
    assert served(3, False) == [11, 12, 13, 14, 15]
    # Causal: 0 <= q - k < 5.
    assert served(0, True) == [8, 9, 10, 11, 12]
    assert served(3, True) == [11, 12, 13, 14, 15]


def test_trained_keys_known_answers() -> None:
    # Every row: context 7..11 (five keys from the anchor back), block never windowed.
    for row in range(Q):
        assert trained(row, False) == [7, 8, 9, 10, 11, 12, 13, 14, 15]
        assert trained(row, True) == [7, 8, 9, 10, 11, *range(12, P + row + 1)]


def test_counts_match_the_rules_by_enumeration() -> None:
    for window in (1, 2, 5, 8):
        for rows in (1, 4, 8, 11):
            for context in range(0, 20):
                for row in range(rows):
                    for causal in (False, True):
                        q = context + row
                        keys = range(context + rows)
                        seen_trained = {k for k in keys if trained_key_visible(q, k, context, window, causal)}
                        seen_served = {k for k in keys if served_key_visible(q, k, window, causal)}
                        # Serving never shows a key training hid.
                        assert seen_served <= seen_trained
                        lost = seen_trained - seen_served
                        assert len({k for k in lost if k < context}) == context_keys_lost(row, context, window)
                        assert len({k for k in lost if k >= context}) == block_keys_hidden(row, rows, window, causal)
                        differs = context_keys_lost(row, context, window) > 0
                        assert differs is (context >= first_differing_context_length(row, window))


def test_known_counts() -> None:
    assert [context_keys_lost(r, P, W) for r in range(Q)] == [1, 2, 3, 4]
    assert [first_differing_context_length(r, W) for r in range(Q)] == [5, 4, 3, 2]
    assert [context_keys_lost(r, 3, W) for r in range(Q)] == [0, 0, 1, 2]
    # Rows past the window lose the whole trained context (W keys), and block keys too.
    assert context_keys_lost(6, 20, W) == 5
    assert [block_keys_hidden(r, 8, W, False) for r in range(8)] == [3, 2, 1, 0, 0, 1, 2, 3]
    assert [block_keys_hidden(r, 8, W, True) for r in range(8)] == [0, 0, 0, 0, 0, 1, 2, 3]


def _finding_values(dialect: str, spec: testing.DraftSpec, **top: object) -> list[dict[str, object]]:
    from dflash_tools.draft.geometry import resolve_geometry
    from dflash_tools.draft.sliding_window import check_sliding_window

    config = testing.make_config(dialect, spec)
    config.update(top)
    desc, _ = describe(config)
    assert desc is not None
    geometry, _ = resolve_geometry(desc, None)
    assert geometry is not None
    return [f.values for f in check_sliding_window(desc, geometry.num_query_tokens) if f.code == "DFT055"]


@pytest.mark.parametrize(
    ("dialect", "algorithm"), [("speculators-dflash", "dflash"), ("speculators-dflash2", "dflash2")]
)
@pytest.mark.parametrize("sfa", [False, True])
def test_dft055_on_speculators_sliding_drafts(dialect: str, algorithm: str, sfa: bool) -> None:
    spec = replace(testing.TINY, algorithm=algorithm, sliding_window=5, block_size=4, sample_from_anchor=sfa)
    (values,) = _finding_values(dialect, spec)
    assert values["sliding_window"] == 5
    assert values["layers"] == [0, 1]
    assert values["num_query_tokens"] == 4  # K + 1 bonus-anchor, K anchor-first: the block either way
    assert values["context_keys_lost_per_row"] == [1, 2, 3, 4]
    assert values["from_context_length_per_row"] == [5, 4, 3, 2]
    assert values["block_keys_hidden_per_row"] == [0, 0, 0, 0]


def test_dft055_block_longer_than_window() -> None:
    spec = replace(testing.TINY_DFLASH2, sliding_window=3, block_size=5)
    (values,) = _finding_values("speculators-dflash2", spec)
    assert values["context_keys_lost_per_row"] == [1, 2, 3, 3, 3]
    assert values["block_keys_hidden_per_row"] == [2, 1, 0, 1, 2]  # bidirectional: both sides


def test_dft055_only_where_the_training_rule_is_known_and_layers_slide() -> None:
    sliding = replace(testing.TINY, sliding_window=5, block_size=4)
    full = replace(sliding, layer_types=("full_attention", "full_attention"))
    mixed = replace(sliding, layer_types=("sliding_attention", "full_attention"))
    assert _finding_values("zlab-dflash", sliding) == []
    assert _finding_values("speculators-dflash", full) == []
    (values,) = _finding_values("speculators-dflash", mixed)
    assert values["layers"] == [0]


def test_inspect_reports_dft055_with_the_counts(make_checkpoint: CheckpointFactory) -> None:
    spec = replace(testing.TINY_DFLASH2, sliding_window=5, block_size=4)
    folder = make_checkpoint("speculators-dflash2", spec)
    report = inspect_checkpoint(str(folder))
    (finding,) = [f for f in report.findings if f.code == "DFT055"]
    assert finding.severity.value == "info"
    assert "window 5" in finding.message and "1..4 for rows 0..3" in finding.message
    assert report.ok  # a note: the draft serves, with slightly other keys at the window edge


def test_dft055_on_a_huge_block_stays_cheap() -> None:
    # A hostile block_size must not build per-row lists that long (the fuzz campaign's hang guard).
    spec = replace(testing.TINY, sliding_window=5, block_size=10**9)
    (values,) = _finding_values("speculators-dflash", spec)
    assert values["num_query_tokens"] == 10**9
    assert values["rows_listed"] == 1024
    assert values["context_keys_lost_per_row"][:6] == [1, 2, 3, 4, 5, 5]
