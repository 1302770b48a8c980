"""Greedy decoding with and without speculation, counted the way vLLM counts.

One draft step (per request): the draft proposes K tokens from the anchor (the last verified
token, at position P); the target runs [anchor, d_1 .. d_K] at P .. P + K in one forward, whose
greedy picks g_0 .. g_K are the tokens it wants at P + 1 .. P + K + 1; the accepted prefix is the
longest run with d_i == g_{i-1}, and g at the first mismatch (or g_K when all match) is the bonus
token. The output is therefore exactly the target's own greedy output.

Counters (vLLM `spec_decode_*`): `num_drafts` += 1 per step that drafted, `num_draft_tokens` += K,
`num_accepted_tokens` += accepted (bonus excluded), `accepted_per_position[i]` += 1 when draft
position i was accepted. Counting is per step, before the output is cut at `max_tokens` or EOS.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from dflash_tools.errors import UsageError
from dflash_tools.reference_engine import ops
from dflash_tools.reference_engine.draft import DraftModel
from dflash_tools.reference_engine.target import TargetModel


@dataclass
class Generation:
    outputs: list[list[int]] = field(default_factory=list)
    elapsed_s: float = 0.0
    target_s: float = 0.0
    draft_s: float = 0.0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    query_positions_per_step: list[int] = field(default_factory=list)
    # Per step: the anchor's position and the draft's context length then (equal when every
    # committed token, and nothing else, reached the draft).
    anchor_positions: list[int] = field(default_factory=list)
    context_lengths: list[int] = field(default_factory=list)

    @property
    def output_tokens(self) -> int:
        return sum(len(o) for o in self.outputs)


class _Clock:
    def __init__(self, device: torch.device) -> None:
        self.device = device

    def now(self) -> float:
        ops.synchronize(self.device)
        return time.perf_counter()


def _finish(output: list[int], new: Sequence[int], max_tokens: int, eos: frozenset[int]) -> bool:
    """Append tokens up to max_tokens or an EOS; True when generation is over."""
    for token in new:
        output.append(token)
        if token in eos or len(output) >= max_tokens:
            return True
    return False


def _check_prompt(prompt: Sequence[int]) -> None:
    if not prompt:
        raise UsageError("a prompt has no tokens", "pass non-empty prompts")


@torch.inference_mode()
def greedy_generate(
    target: TargetModel, prompts: Sequence[Sequence[int]], max_tokens: int, *, ignore_eos: bool = False
) -> Generation:
    """The target alone, one token per forward."""
    eos = frozenset() if ignore_eos else target.eos_token_ids
    clock = _Clock(getattr(target, "device", torch.device("cpu")))
    result = Generation()
    start = clock.now()
    for prompt in prompts:
        _check_prompt(prompt)
        target.reset()
        logits, _ = target.forward(prompt)
        output: list[int] = []
        done = _finish(output, [int(logits[-1].argmax())], max_tokens, eos)
        while not done:
            logits, _ = target.forward(output[-1:])
            done = _finish(output, [int(logits[-1].argmax())], max_tokens, eos)
        result.outputs.append(output)
    result.elapsed_s = clock.now() - start
    result.target_s = result.elapsed_s
    return result


@torch.inference_mode()
def speculative_generate(
    target: TargetModel,
    draft: DraftModel,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    *,
    num_speculative_tokens: int,
    sample_from_anchor: bool,
    ignore_eos: bool = False,
) -> Generation:
    """Draft K, verify greedily, keep the accepted prefix plus the bonus token."""
    k = num_speculative_tokens
    if k < 1:
        raise UsageError(f"num_speculative_tokens is {k}, must be >= 1", "")
    eos = frozenset() if ignore_eos else target.eos_token_ids
    capture = [t + 1 for t in draft.desc.target_layer_ids]
    clock = _Clock(draft.device)
    result = Generation(accepted_per_position=[0] * k)
    start = clock.now()
    for prompt in prompts:
        _check_prompt(prompt)
        target.reset()
        state = draft.new_state()
        t0 = clock.now()
        logits, captured = target.forward(prompt, capture)
        t1 = clock.now()
        assert captured is not None
        draft.append_context(state, captured, torch.arange(len(prompt), device=draft.device))
        t2 = clock.now()
        result.target_s += t1 - t0
        result.draft_s += t2 - t1
        output: list[int] = []
        done = _finish(output, [int(logits[-1].argmax())], max_tokens, eos)
        while not done:
            anchor = output[-1]
            position = len(prompt) + len(output) - 1
            result.anchor_positions.append(position)
            result.context_lengths.append(state.length)
            t0 = clock.now()
            drafts = draft.propose(state, anchor, position, k, sample_from_anchor)
            t1 = clock.now()
            logits, captured = target.forward([anchor, *drafts], capture)
            greedy = logits.argmax(dim=-1).tolist()
            t2 = clock.now()
            accepted = 0
            while accepted < k and drafts[accepted] == greedy[accepted]:
                accepted += 1
            result.num_drafts += 1
            result.num_draft_tokens += k
            result.num_accepted_tokens += accepted
            for index in range(accepted):
                result.accepted_per_position[index] += 1
            result.query_positions_per_step.append(state.query_positions[-1])
            # The anchor and the accepted drafts are committed: their hidden states become context.
            target.crop(position + accepted + 1)
            done = _finish(output, [*drafts[:accepted], int(greedy[accepted])], max_tokens, eos)
            t3 = clock.now()
            if not done:
                assert captured is not None
                committed = torch.arange(position, position + accepted + 1, device=draft.device)
                draft.append_context(state, captured[: accepted + 1], committed)
            t4 = clock.now()
            result.draft_s += (t1 - t0) + (t4 - t3)
            result.target_s += t2 - t1
        result.outputs.append(output)
    result.elapsed_s = clock.now() - start
    return result
