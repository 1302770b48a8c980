"""Two definitions of "acceptance length", and how one server's numbers give both.

vLLM and SGLang both print an acceptance length for a speculating server, and they are not the
same number (docs/smoke-test.md, "Servers: vLLM and SGLang"):

    vLLM    1 + accepted draft tokens / draft steps          (vllm/v1/spec_decode/metrics.py)
    SGLang  completion tokens / verify steps                 (sglang srt/managers/tokenizer_manager.py,
                                                              `spec_accept_length`)

Per request, with V verify steps, A accepted drafts and C completion tokens, the prefill adds one
token that no step verified and the last step may commit t tokens past the cap or the stop that
are trimmed from the output but counted by both engines: C = 1 + V + A - t, so
SGLang - vLLM = (1 - t) / V. A short answer makes the two differ by a tenth or more; the floor of a
verdict is always stated in vLLM's definition (the result's `mean_acceptance_length`), a published
reference in its own.

Aggregation matters as much: vLLM's counters pool every request (1 + sum A / sum V); z-lab's
benchmark and vLLM's DFlash CI average per-request values unweighted. Both are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

VLLM = "vllm"
SGLANG = "sglang"
DEFINITIONS: dict[str, dict[str, str]] = {
    VLLM: {
        "name": "vLLM mean acceptance length (1 + accepted / drafts)",
        "formula": "1 + accepted draft tokens / draft steps",
    },
    SGLANG: {
        "name": "SGLang accept length (completion tokens / verify steps)",
        "formula": "completion tokens / verify steps (the prefill's token included)",
    },
}
# The definition the verdict's floor is stated in: the contract's `mean_acceptance_length`.
FLOOR_DEFINITION = VLLM


@dataclass(frozen=True)
class RequestAcceptance:
    """One request's speculative-decoding statistics, as SGLang reports them per response."""

    completion_tokens: int  # C
    verify_steps: int  # V (`spec_verify_ct`)
    accepted_drafts: int  # A (`spec_num_correct_drafts`), the bonus token excluded
    proposed_drafts: int  # `spec_num_proposed_drafts` = V x K
    histogram: tuple[int, ...] | None  # `spec_correct_drafts_histogram`: steps by accepted count

    @property
    def sglang_accept_length(self) -> float | None:
        return self.completion_tokens / self.verify_steps if self.verify_steps else None

    @property
    def vllm_acceptance_length(self) -> float | None:
        return 1 + self.accepted_drafts / self.verify_steps if self.verify_steps else None


def accepted_per_position(histogram: Sequence[int], k: int) -> list[int]:
    """vLLM's per-position accepted counts from SGLang's histogram of accepted drafts per step.

    DFLASH verifies a chain (sglang srt/arg_groups/speculative_hook.py forces top-k 1), so draft
    position j is accepted in every step that accepted more than j drafts.
    """
    return [sum(histogram[j + 1 :]) for j in range(k)]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def definition(key: str, pooled: float | None, mean_per_request: float | None, source: str) -> dict[str, Any]:
    return {**DEFINITIONS[key], "pooled": pooled, "mean_per_request": mean_per_request, "source": source}


def from_requests(requests: Sequence[RequestAcceptance], source: str) -> dict[str, Any]:
    """Both definitions from per-request statistics (SGLang), pooled and averaged per request."""
    steps = sum(r.verify_steps for r in requests)
    measured = [r for r in requests if r.verify_steps]
    return {
        VLLM: definition(
            VLLM,
            1 + sum(r.accepted_drafts for r in measured) / steps if steps else None,
            _mean([r.vllm_acceptance_length for r in measured if r.vllm_acceptance_length is not None]),
            source,
        ),
        SGLANG: definition(
            SGLANG,
            sum(r.completion_tokens for r in measured) / steps if steps else None,
            _mean([r.sglang_accept_length for r in measured if r.sglang_accept_length is not None]),
            source,
        ),
    }


def from_counters(num_drafts: int, num_accepted_tokens: int, output_tokens: int, source: str) -> dict[str, Any]:
    """Both definitions, pooled, from vLLM's counters and the completion tokens the answers reported.

    vLLM counts a draft step per request and verify step, as SGLang counts `spec_verify_ct`, so
    output tokens / draft steps is SGLang's definition pooled (exact when every request reached a
    verify step and nobody else used the server meanwhile).
    """
    return {
        VLLM: definition(VLLM, 1 + num_accepted_tokens / num_drafts if num_drafts else None, None, source),
        SGLANG: definition(SGLANG, output_tokens / num_drafts if num_drafts else None, None, source),
    }


def side_by_side(lengths: dict[str, Any]) -> str:
    """`SGLang accept length (completion tokens / verify steps) 5.82; vLLM mean acceptance length
    (1 + accepted / drafts) 6.00 (the floor's definition)`."""
    parts = []
    for key in (SGLANG, VLLM):
        entry = lengths.get(key) or {}
        value = entry.get("pooled")
        shown = "n/a" if value is None else f"{value:.2f}"
        per_request = entry.get("mean_per_request")
        if per_request is not None:
            shown += f" pooled, {per_request:.2f} averaged per request"
        floor = " (the floor's definition)" if key == FLOOR_DEFINITION else ""
        parts.append(f"{DEFINITIONS[key]['name']} {shown}{floor}")
    return "; ".join(parts)
