"""Which keys a sliding-window draft layer sees: as speculators trains it, as vLLM serves it.

A draft step runs Q block rows at positions P .. P + Q - 1 over the keys of the context (positions
0 .. P - 1, the committed tokens) and of the block itself. docs/sliding-window.md derives both rules
from the sources; in short, for a layer with window W:

- served (vLLM 0.33.0, flash-attn / flex backends): the query at position q sees the key at p iff
  q - p < W, and also p - q < W when the layer is bidirectional (p <= q when causal). The window is
  measured from each row, so row r sees the context keys P + r - W + 1 .. P - 1: r + 1 fewer than
  row 0 sees, and block keys further than W - 1 rows away are hidden too.
- trained (speculators 0.9.0): every row of the block sees the context keys P - W .. P - 1 (the
  window is measured from the anchor, W keys), and block keys are never windowed (all of them when
  bidirectional, those at or before the row when causal).

The reference engine runs the served rule (`reference_engine/draft.py`). This module is the one place both
rules are written down, torch-free, so that `inspect` can say where they part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflash_tools.draft.description import Algorithm, DraftDescription
from dflash_tools.findings import Finding, make_finding


def served_key_visible(query_position: int, key_position: int, window: int | None, causal: bool) -> bool:
    """vLLM 0.33.0: does the query at `query_position` see the key at `key_position`?"""
    offset = query_position - key_position
    if causal and offset < 0:
        return False
    return window is None or abs(offset) < window


def trained_key_visible(
    query_position: int, key_position: int, anchor_position: int, window: int | None, causal: bool
) -> bool:
    """speculators 0.9.0 training: the same question, for a block whose anchor sits at `anchor_position`."""
    if key_position < anchor_position:
        return window is None or key_position >= anchor_position - window
    return not causal or key_position <= query_position


def context_keys_lost(row: int, context_length: int, window: int) -> int:
    """How many context keys block row `row` sees in training but not when served.

    Trained: keys max(0, P - W) .. P - 1; served: keys max(0, P + row - W + 1) .. P - 1 (P = the
    context length). The served set is a suffix of the trained one, so the count is the gap.
    """
    trained_first = max(0, context_length - window)
    served_first = min(context_length, max(0, context_length + row - window + 1))
    return served_first - trained_first


def first_differing_context_length(row: int, window: int) -> int:
    """The shortest context at which row `row`'s served context keys differ from its trained ones."""
    return max(1, window - row)


def block_keys_hidden(row: int, num_rows: int, window: int, causal: bool) -> int:
    """Block keys the row sees in training but not when served (only when the block outgrows W)."""
    before = max(0, row - window + 1)  # rows 0 .. row - W are more than W - 1 behind
    after = 0 if causal else max(0, num_rows - row - window)  # rows row + W .. Q - 1
    return before + after


# Per-row lists stop here: real blocks have at most a few dozen rows, and a hostile block_size of
# 10**9 must not build a list that long (the counts follow closed forms, see the functions above).
LISTED_ROWS = 1024


@dataclass(frozen=True)
class WindowDivergence:
    """How served keys differ from trained keys for sliding layers sharing one window.

    The per-row lists cover rows 0 .. min(num_rows, LISTED_ROWS) - 1.
    """

    window: int
    layers: tuple[int, ...]
    num_rows: int
    causal: bool

    @property
    def _rows(self) -> range:
        return range(min(self.num_rows, LISTED_ROWS))

    @property
    def context_keys_lost_per_row(self) -> list[int]:
        """Once the context holds at least W tokens: min(r + 1, W) for row r."""
        return [context_keys_lost(row, self.window, self.window) for row in self._rows]

    @property
    def from_context_length_per_row(self) -> list[int]:
        return [first_differing_context_length(row, self.window) for row in self._rows]

    @property
    def block_keys_hidden_per_row(self) -> list[int]:
        return [block_keys_hidden(row, self.num_rows, self.window, self.causal) for row in self._rows]

    def to_values(self) -> dict[str, Any]:
        return {
            "sliding_window": self.window,
            "layers": list(self.layers),
            "num_query_tokens": self.num_rows,
            "rows_listed": len(self._rows),
            "context_keys_lost_per_row": self.context_keys_lost_per_row,
            "from_context_length_per_row": self.from_context_length_per_row,
            "block_keys_hidden_per_row": self.block_keys_hidden_per_row,
        }


def sliding_layers(desc: DraftDescription) -> list[tuple[int, int, bool]]:
    """(layer, window, trained causal) for each sliding layer of a speculators-trained draft."""
    decoder = desc.decoder
    types = decoder.layer_types or []
    window = decoder.sliding_window
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        return []
    non_causal = desc.sliding_window_non_causal
    if non_causal is None:
        non_causal = desc.algorithm is Algorithm.DFLASH2
    return [
        (index, window, not non_causal)
        for index, kind in enumerate(types[: decoder.num_hidden_layers])
        if kind == "sliding_attention"
    ]


def window_divergences(desc: DraftDescription, num_query_tokens: int) -> list[WindowDivergence]:
    """Training-vs-serving differences; only speculators-trained DFlash / DFlash2 drafts have a known
    training rule. A config `convert --to` translated from another format says where the draft was
    trained (`translated_from`): not by speculators, so no claim is made about it."""
    if not desc.spec.window_trained_from_anchor or desc.algorithm is Algorithm.DSPARK or num_query_tokens < 1:
        return []
    if desc.translated_from is not None:
        return []
    groups: dict[tuple[int, bool], list[int]] = {}
    for layer, window, causal in sliding_layers(desc):
        groups.setdefault((window, causal), []).append(layer)
    return [
        WindowDivergence(window=window, layers=tuple(layers), num_rows=num_query_tokens, causal=causal)
        for (window, causal), layers in groups.items()
    ]


def check_sliding_window(desc: DraftDescription, num_query_tokens: int) -> list[Finding]:
    """DFT055: sliding layers see different context keys when vLLM serves them than when speculators trained them."""
    findings = []
    decoder = desc.spec.keys.decoder[0]
    for divergence in window_divergences(desc, num_query_tokens):
        window, rows, causal = divergence.window, divergence.num_rows, divergence.causal
        last = rows - 1
        lost = f"{context_keys_lost(0, window, window)}..{context_keys_lost(last, window, window)}"
        hidden = max(block_keys_hidden(0, rows, window, causal), block_keys_hidden(last, rows, window, causal))
        block_note = (
            f"; the block ({rows} rows) is longer than the window, so rows also lose up to {hidden} block keys"
            if hidden
            else ""
        )
        findings.append(
            make_finding(
                "DFT055",
                f"sliding layers {list(divergence.layers)} (window {window}): vLLM measures each draft row's window "
                f"from the row, speculators' trainer from the anchor, so if this draft was trained there, row r "
                f"sees fewer context tokens when served: min(r + 1, {window}), {lost} for rows 0..{last}, once "
                f"the context holds {window} - r tokens (row {last} from {first_differing_context_length(last, window)}, "
                f"every row from {first_differing_context_length(0, window)}){block_note}",
                "expect lower acceptance on long contexts than in training; docs/sliding-window.md gives the rule",
                keys=(f"{decoder}layer_types", f"{decoder}sliding_window"),
                values=divergence.to_values(),
            )
        )
    return findings
