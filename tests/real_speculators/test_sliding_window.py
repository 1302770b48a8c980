"""Sliding windows: speculators trains one key rule, vLLM serves another (docs/sliding-window.md).

The engine runs the served rule. Against speculators' training forward it must therefore:
- see exactly the keys DFT055 says serving drops, and no others (compared mask by mask);
- agree in float32 while the context is short enough that both rules pick the same keys, and
  differ once it is not;
- agree again everywhere once speculators itself is given the served rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from speculators.models.dflash import attention as their_attention
from speculators.models.dflash import core as their_core
from torch.nn.attention.flex_attention import create_mask

from dflash_tools.draft.sliding_window import context_keys_lost
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reference_engine.draft import LayerAttention, served_key_mask
from tests.real_speculators.conftest import (
    assert_logits_close,
    both_blocks,
    engine_model,
    random_draft_spec,
    speculators_model,
    write_random_draft,
)

pytestmark = pytest.mark.real_speculators

ATOL, RTOL = 1e-5, 1e-5
# (dialect, algorithm, sample_from_anchor, window): the two cases the brief measured (DFlash2
# bonus-anchor, bidirectional sliding layers; DFlash anchor-first, causal sliding layers) with a
# window wider than the block, and one narrower than the block.
CASES = [
    ("speculators-dflash2", "dflash2", False, 12),
    ("speculators-dflash", "dflash", True, 12),
    ("speculators-dflash2", "dflash2", False, 5),
    ("speculators-dflash", "dflash", True, 5),
]


@pytest.fixture(scope="module")
def sliding_drafts(tmp_path_factory: pytest.TempPathFactory, target_folder: Path) -> dict[tuple[Any, ...], Path]:
    root = tmp_path_factory.mktemp("sliding")
    out = {}
    for dialect, algorithm, sfa, window in CASES:
        spec = random_draft_spec(
            algorithm,
            sfa,
            layer_types=("sliding_attention",) * 2,
            sliding_window=window,
            verifier=str(target_folder),
        )
        out[dialect, algorithm, sfa, window] = write_random_draft(root / f"{dialect}-{sfa}-{window}", dialect, spec)
    return out


def dft055(folder: Path) -> dict[str, Any]:
    (finding,) = [f for f in inspect_checkpoint(str(folder)).findings if f.code == "DFT055"]
    return finding.values


def their_trained_mask(block: int, context: int, window: int, non_causal: bool) -> torch.Tensor:
    """speculators' own mask for one anchor at P = context, as [block rows, context + block keys]."""
    total = context + block + 1
    mask_mod, q_len, kv_len = their_attention.create_anchor_block_mask_mod(
        document_ids=torch.zeros(total, dtype=torch.long),
        total_seq_len=total,
        anchor_positions=torch.tensor([context]),
        block_size=block,
        sliding_window=window,
        sliding_window_non_causal=non_causal,
    )
    dense = create_mask(mask_mod, None, None, q_len, kv_len, device="cpu")[0, 0]
    # Keys 0 .. P - 1 of the sequence, then the block's own keys (stored after the sequence).
    return torch.cat((dense[:, :context], dense[:, total:]), dim=1)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-sfa{c[2]}-w{c[3]}")
def test_keys_differ_exactly_as_dft055_says(sliding_drafts: dict[tuple[Any, ...], Path], case: tuple[Any, ...]) -> None:
    folder = sliding_drafts[case]
    values = dft055(folder)
    window, rows = values["sliding_window"], values["num_query_tokens"]
    non_causal = case[1] == "dflash2"  # speculators' class defaults, as the fixture writes them
    mode = LayerAttention(causal=not non_causal, window=window)
    for context in range(0, 2 * window + 2):
        trained = their_trained_mask(rows, context, window, non_causal)
        served = served_key_mask(torch.arange(context, context + rows), torch.arange(context + rows), mode)
        assert not (served & ~trained).any()  # serving never shows a key training hid
        lost = trained & ~served
        lost_context = lost[:, :context].sum(dim=1).tolist()
        assert lost_context == [context_keys_lost(row, context, window) for row in range(rows)]
        assert lost[:, context:].sum(dim=1).tolist() == values["block_keys_hidden_per_row"]
        if context >= window:
            assert lost_context == values["context_keys_lost_per_row"]
        for row, start in enumerate(values["from_context_length_per_row"]):
            assert (lost_context[row] > 0) is (context >= start)


def served_rule_for_speculators(original: Any) -> Any:
    """speculators' mask builder with the served rule on sliding layers (full layers unchanged)."""

    def build(
        document_ids: torch.Tensor,
        total_seq_len: int,
        anchor_positions: torch.Tensor,
        block_size: int,
        sliding_window: int | None = None,
        sliding_window_non_causal: bool = False,
    ) -> Any:
        if sliding_window is None:
            return original(document_ids, total_seq_len, anchor_positions, block_size)
        anchors = anchor_positions.to(torch.long)
        causal = not sliding_window_non_causal
        window = sliding_window

        def mask_mod(_b: Any, _h: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
            anchor = anchors[q_idx // block_size]
            query_position = anchor + q_idx % block_size
            in_sequence = kv_idx < total_seq_len
            block_offset = (kv_idx - total_seq_len).clamp(min=0)
            key_position = torch.where(in_sequence, kv_idx, anchor + block_offset % block_size)
            candidate = torch.where(in_sequence, kv_idx < anchor, block_offset // block_size == q_idx // block_size)
            offset = query_position - key_position
            visible = candidate & (offset.abs() < window)
            return visible & (offset >= 0) if causal else visible

        q_len = anchors.numel() * block_size
        return mask_mod, q_len, total_seq_len + q_len

    return build


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-sfa{c[2]}-w{c[3]}")
def test_forward_against_speculators_follows_the_rules(
    sliding_drafts: dict[tuple[Any, ...], Path],
    target_folder: Path,
    case: tuple[Any, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = sliding_drafts[case]
    values = dft055(folder)
    window, rows = values["sliding_window"], values["num_query_tokens"]
    theirs_model = speculators_model(folder)
    engine, target = engine_model(folder, target_folder)
    same_keys = [c for c in range(1, 3 * window) if all(context_keys_lost(r, c, window) == 0 for r in range(rows))]
    if any(values["block_keys_hidden_per_row"]):
        same_keys = []  # a block longer than the window never sees the same keys
    other_keys = [c for c in (window, 2 * window + 3) if c not in same_keys]
    for context in same_keys:
        theirs, ours, _, _ = both_blocks(theirs_model, engine, target, context)
        torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=ATOL)
    for context in other_keys:
        theirs, ours, _, _ = both_blocks(theirs_model, engine, target, context)
        gap = (theirs_model.lm_head(theirs) - engine.logits(ours)).abs().max().item()
        assert gap > 1e-3, context
    # Given the served rule, speculators computes the engine's block everywhere.
    monkeypatch.setattr(
        their_core, "create_anchor_block_mask_mod", served_rule_for_speculators(their_core.create_anchor_block_mask_mod)
    )
    for context in (*same_keys[:1], *other_keys):
        theirs, ours, _, _ = both_blocks(theirs_model, engine, target, context)
        torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=ATOL)
        assert_logits_close(engine.logits(ours), theirs_model.lm_head(theirs))
