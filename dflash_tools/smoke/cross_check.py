"""Cross-check a vLLM run against the torch reference engine on the same pair, prompts and layout.

On a CPU host both engines run in one environment, so every vLLM run can be repeated by the
reference engine (`dflash_tools.reference_engine`) with the same request: same target and draft folders,
prompts, K, layout (`sample_from_anchor`, `draft_config_overrides`), max_tokens, dtype.

What must agree:
- greedy tokens, exactly: both verify greedily, so both must produce the target's own greedy
  output;
- acceptance per draft position within `RATE_TOLERANCE` (absolute, on each rate
  accepted_i / num_drafts). Why that number: with float32 on both sides (the CPU default of
  smoke-test) the engines differ only by the rounding order of their kernels. That changes a
  draft's proposal only where its top two logits are nearly tied, and each such step moves one
  position's count by one. A trained draft has such near-ties: on the bundled (trained)
  `vllm-cpu-demo` the greedy tokens are identical and the rates differ by up to 0.028 (701 draft
  steps on vLLM, 680 on the torch engine; docs/cpu-smoke.md). A layout mistake moves position 0
  by 0.3 or more (the flipped layout keeps about a third of the declared mean acceptance
  length), an off-by-one in the block further still, so 0.05 keeps both sides well apart.
"""

from __future__ import annotations

from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.smoke.options import Runtime

RATE_TOLERANCE = 0.05
REFERENCE_ENGINE = Runtime.TORCH.value
# The two engines' numbers side by side, keyed by the runtime's name.
_VLLM, _TORCH = Runtime.VLLM.value, Runtime.TORCH.value
# Request keys only the vLLM engine reads.
_VLLM_ONLY = ("speculative_config", "plugin_required", "prefix_caching_check")


def reference_request(request: contract.SmokeRequest) -> contract.SmokeRequest:
    """The same run for the reference engine: no vLLM arguments, no baseline (vLLM measured it)."""
    # One timed repetition: the cross-check compares tokens and acceptance, not speed.
    document: dict[str, Any] = {k: v for k, v in request.items() if k not in _VLLM_ONLY and k != "timing"}
    document.update(
        engine=REFERENCE_ENGINE,
        engine_args={},
        baseline=False,
        label=f"{request.get('label', request['draft'])} [torch reference]",
    )
    return contract.validate_request(document)


def compare(vllm: contract.SmokeResult, reference: contract.SmokeResult) -> dict[str, Any]:
    """The cross-check section of one run: both engines' numbers side by side, and whether they agree."""
    section: dict[str, Any] = {
        "engine": REFERENCE_ENGINE,
        "ok": reference["ok"],
        "error": reference["error"],
        "tolerance": {"acceptance_rate_per_position": RATE_TOLERANCE, "tokens": "identical"},
        "log_path": reference["log_path"],
    }
    if not (vllm["ok"] and reference["ok"]):
        section["agrees"] = None
        return section
    ours, theirs = vllm["acceptance_rate_per_position"], reference["acceptance_rate_per_position"]
    width = max(len(ours), len(theirs))
    padded = [list(r) + [0.0] * (width - len(r)) for r in (ours, theirs)]
    differences = [abs(a - b) for a, b in zip(*padded, strict=True)]
    tokens_identical = vllm["outputs"] == reference["outputs"]
    within = len(ours) == len(theirs) and all(d <= RATE_TOLERANCE for d in differences)
    section.update(
        tokens_identical=tokens_identical,
        acceptance_rate_per_position={_VLLM: list(ours), _TORCH: list(theirs)},
        max_rate_difference=max(differences, default=0.0),
        within_tolerance=within,
        mean_acceptance_length={_VLLM: vllm["mean_acceptance_length"], _TORCH: reference["mean_acceptance_length"]},
        num_drafts={_VLLM: vllm["num_drafts"], _TORCH: reference["num_drafts"]},
        query_positions_per_step={
            _VLLM: sorted(set(vllm["query_positions_per_step"] or [])) or None,
            _TORCH: sorted(set(reference["query_positions_per_step"] or [])) or None,
        },
        agrees=tokens_identical and within,
    )
    return section


def disagreement(section: dict[str, Any], layout: str) -> str | None:
    """A verdict reason when the engines disagree, else None."""
    if section.get("agrees") is not False:
        return None
    parts = []
    if not section["tokens_identical"]:
        parts.append("greedy tokens differ")
    if not section["within_tolerance"]:
        mean = section["mean_acceptance_length"]
        first = section["acceptance_rate_per_position"]
        parts.append(
            f"mean acceptance length {mean['vllm']:.2f} on vLLM vs {mean['torch']:.2f} on the torch reference in the "
            f"{layout} layout (position 0: {_first(first['vllm']):.2f} vs {_first(first['torch']):.2f}; per-position "
            f"difference up to {section['max_rate_difference']:.2f}, tolerance {RATE_TOLERANCE})"
        )
    return "vLLM disagrees with the torch reference: " + "; ".join(parts)


def _first(rates: list[float]) -> float:
    return rates[0] if rates else 0.0
