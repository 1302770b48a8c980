"""What every set of speculative-decoding counters must satisfy, in one place.

A measurement is V draft steps (vLLM `num_drafts`; SGLang `spec_verify_ct`), P proposed draft
tokens, A accepted draft tokens (the bonus token excluded), where the engine reports them the
per-position counts a_0 .. a_{n-1} (a_i: the steps whose draft position i was accepted), and for
SGLang each request's completion tokens C. A server, a proxy or a broken engine child can send
numbers that cannot all be true; no verdict is judged from them. The relations, each with the
engine code that makes it hold:

    accepted <= proposed              A <= P
    proposed <= steps x K             P <= V x K: a step proposes at most K drafts (vLLM
                                      `SpecDecodingStats.observe_draft` asserts accepted <= K;
                                      SGLang sets P = V x (speculative_num_draft_tokens - 1),
                                      srt/managers/tokenizer_manager.py `_add_spec_metrics`, so
                                      there P is a whole multiple of V)
    positions <= K                    n <= K: vLLM keeps one per-position counter per drafted
                                      position; K is the draft's (-d) when given, else at most
                                      MAX_K, the largest K smoke-test serves
    per-position counts <= steps      a_i <= V: a position is accepted at most once per step
    per-position counts sum to A      sum a_i = A: vLLM adds 1 to a_0 .. a_{accepted-1} per step
                                      (vllm/v1/spec_decode/metrics.py `observe_draft`)
    per-position counts do not rise   a_{i+1} <= a_i: the same loop (a chain: position i + 1 is
                                      accepted only with position i); so the rates a_i / V lie
                                      in [0, 1] and fall with the position
    proposals once speculating        V > 0 => P > 0 where proposals are reported (SGLang omits
                                      its spec_* numbers when it proposed none)
    SGLang, per request:              A + V <= C - 1 + K. SGLang's definition: the prefill gives
    accepted + steps vs completion    the first token, each verify step commits its accepted
                                      drafts + 1 (srt/managers/scheduler_components/
                                      batch_result_processor.py), and the answer is cut at
                                      max_new_tokens or the stop, which may drop up to K tokens
                                      of the last step (schedule_batch.py `update_finish_state`,
                                      "a spec accept run can cross max_new_tokens"): C = 1 + V +
                                      A - t with 0 <= t <= K. (A + V <= C + 1 holds only when
                                      t <= 2: a real answer capped at 2 tokens after a step that
                                      accepted 7 of 8 drafts has A + V = 8 and C = 2.)

An impossible set is `ImpossibleCounters`: one line naming the relation that fails and the
numbers, e.g. `accepted drafts 7 > proposed drafts 4 (accepted <= proposed)`.

Imports: `smoke.limits` (MAX_K) only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dflash_tools.smoke.limits import MAX_K

ACCEPTED_LE_PROPOSED = "accepted <= proposed"
PROPOSED_LE_STEPS_K = "proposed <= steps x K"
PROPOSED_PER_STEP = "proposed = steps x drafts per step"
POSITIONS_LE_K = "positions <= K"
POSITION_LE_STEPS = "per-position counts <= steps"
POSITIONS_SUM = "per-position counts sum to accepted"
POSITIONS_FALL = "per-position counts do not rise"
PROPOSALS_WHILE_SPECULATING = "speculation with 0 proposals"
STEPS_LT_COMPLETION = "verify steps < completion tokens"
ACCEPTED_STEPS_LE_COMPLETION = "accepted + steps <= completion tokens - 1 + K"
RATES_IN_RANGE = "rates in [0, 1]"
DERIVED_AGREE = "rates and mean acceptance length = the counts"

# Counters are float64 in Prometheus; vLLM's stay integers far below 2^53.
MAX_COUNT = 2**53


class ImpossibleCounters(ValueError):
    """Counters that cannot all be true; the message is one line naming the relation."""

    def __init__(self, relation: str, detail: str) -> None:
        super().__init__(f"impossible counters: {detail} ({relation})")
        self.relation = relation
        self.detail = detail


@dataclass(frozen=True)
class KBound:
    """The most draft positions a step may have, and where that number comes from."""

    value: int
    source: str

    def describe(self) -> str:
        return f"K = {self.value}, {self.source}"


def k_bound(draft_k: int | None) -> KBound:
    """The draft's K (from -d) when given, else the largest K smoke-test serves."""
    if draft_k is not None and 1 <= draft_k <= MAX_K:
        return KBound(draft_k, "the draft's (-d)")
    return KBound(MAX_K, "the largest K smoke-test serves")


# --- Prometheus labels ------------------------------------------------------------------------------

_POSITION_LABEL = re.compile(r"[0-9]+")
# Digits enough for any K; a longer label is not below K, whatever its value (never int()-ed).
_POSITION_DIGITS = len(str(MAX_K))


def position_index(label: str, bound: KBound) -> int:
    """A `position` label of vLLM's per-position counter: a small non-negative decimal (ASCII
    digits, so no `int()` of arbitrary text: `²` and 5,000 digits are refused) below K."""
    if not _POSITION_LABEL.fullmatch(label):
        raise ImpossibleCounters(POSITIONS_LE_K, f"position label {label[:20]!r} is not a draft position index")
    index = int(label) if len(label) <= _POSITION_DIGITS else None
    if index is None or index >= bound.value:
        shown = label if len(label) <= 20 else f"{label[:12]}... ({len(label):,} digits)"
        raise ImpossibleCounters(
            POSITIONS_LE_K, f"position label {shown} is not below {bound.describe()} (positions 0 to {bound.value - 1})"
        )
    return index


def counter_value(value: float, where: str) -> int:
    """A counter's sample as a count: finite, whole, from 0 to 2^53 (ValueError otherwise)."""
    if not math.isfinite(value) or value < 0 or value > MAX_COUNT or value != int(value):
        raise ValueError(f"{where}: {value!r} is not a counter value (a whole number from 0 to 2^53)")
    return int(value)


# --- the relations --------------------------------------------------------------------------------


def check_counts(
    *,
    steps: int,
    proposed: int | None,
    accepted: int,
    per_position: Sequence[int] | None,
    bound: KBound,
) -> None:
    """The relations of one set of counts (a run's totals or one request's); `proposed` None where
    the engine does not report it, `per_position` None or empty where it reports none."""
    positions = len(per_position) if per_position else 0
    if positions > bound.value:
        raise ImpossibleCounters(POSITIONS_LE_K, f"{positions} draft positions reported, more than {bound.describe()}")
    k = positions or bound.value
    if proposed is not None:
        if steps > 0 and proposed == 0:
            raise ImpossibleCounters(
                PROPOSALS_WHILE_SPECULATING, f"{steps} draft steps reported with 0 proposed drafts"
            )
        if accepted > proposed:
            raise ImpossibleCounters(ACCEPTED_LE_PROPOSED, f"accepted drafts {accepted} > proposed drafts {proposed}")
        if proposed > steps * k:
            raise ImpossibleCounters(PROPOSED_LE_STEPS_K, f"proposed drafts {proposed} > {steps} steps x {k} (K = {k})")
    if accepted > steps * k:
        raise ImpossibleCounters(PROPOSED_LE_STEPS_K, f"accepted drafts {accepted} > {steps} steps x K = {k}")
    if per_position:
        for index, count in enumerate(per_position):
            if count > steps:
                raise ImpossibleCounters(
                    POSITION_LE_STEPS, f"position {index} accepted {count} times in {steps} draft steps"
                )
            if index and count > per_position[index - 1]:
                raise ImpossibleCounters(
                    POSITIONS_FALL,
                    f"position {index} accepted {count} times, position {index - 1} only {per_position[index - 1]}",
                )
        if sum(per_position) != accepted:
            raise ImpossibleCounters(
                POSITIONS_SUM, f"per-position counts add up to {sum(per_position)}, accepted drafts are {accepted}"
            )


def check_sglang_request(
    *, completion_tokens: int, steps: int, accepted: int, proposed: int | None, bound: KBound
) -> int:
    """One SGLang answer's numbers (see the module docstring); returns its drafts per step K."""
    if steps >= completion_tokens:
        raise ImpossibleCounters(
            STEPS_LT_COMPLETION,
            f"{steps} verify steps for {completion_tokens} completion tokens (the prefill gives the first token, "
            "each step at least one more)",
        )
    k = bound.value
    if proposed is not None and steps:
        if proposed == 0:
            raise ImpossibleCounters(
                PROPOSALS_WHILE_SPECULATING, f"{steps} verify steps reported with 0 proposed drafts"
            )
        if proposed % steps:
            raise ImpossibleCounters(
                PROPOSED_PER_STEP, f"proposed drafts {proposed} are not a whole number per verify step ({steps} steps)"
            )
        k = proposed // steps
        if k > bound.value:
            raise ImpossibleCounters(POSITIONS_LE_K, f"{k} drafts per verify step, more than {bound.describe()}")
    check_counts(steps=steps, proposed=proposed, accepted=accepted, per_position=None, bound=KBound(k, bound.source))
    if accepted + steps > completion_tokens - 1 + k:
        raise ImpossibleCounters(
            ACCEPTED_STEPS_LE_COMPLETION,
            f"accepted drafts {accepted} + verify steps {steps} > completion tokens {completion_tokens} - 1 + K {k} "
            "(SGLang's counts: each step commits its accepted drafts + 1 token, at most K are cut at the end)",
        )
    return k


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def result_problem(result: Any, k: int) -> str | None:
    """Why a contract result's counters cannot all be true (one line), or None. `k`: the K the run
    was planned with; a result that reports more positions is judged by its own count (the
    verdict says the K differs)."""
    try:
        steps, proposed, accepted = result["num_drafts"], result["num_draft_tokens"], result["num_accepted_tokens"]
        per_position = list(result["accepted_per_position"])
        rates = list(result["acceptance_rate_per_position"])
        mean = result["mean_acceptance_length"]
    except (KeyError, TypeError):
        return None  # the contract's validation names missing fields
    bound = KBound(min(max(k, len(per_position), 1), MAX_K), "the run's")
    available = (result.get("per_position") or {}).get("available", True)
    try:
        check_counts(
            steps=steps,
            proposed=proposed,
            accepted=accepted,
            per_position=per_position if available else None,
            bound=bound,
        )
        if any(not 0.0 <= rate <= 1.0 for rate in rates):
            raise ImpossibleCounters(RATES_IN_RANGE, f"acceptance rates {rates[:8]} outside [0, 1]")
        if steps and (
            not _close(mean, 1 + accepted / steps)
            or len(rates) != len(per_position)
            or any(not _close(rate, count / steps) for rate, count in zip(rates, per_position, strict=False))
        ):
            raise ImpossibleCounters(
                DERIVED_AGREE,
                f"mean acceptance length {mean!r} or rates are not 1 + {accepted} / {steps} and the counts / {steps}",
            )
    except ImpossibleCounters as exc:
        return str(exc)
    return None
