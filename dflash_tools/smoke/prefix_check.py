"""The prefix-caching check's verdict: greedy output with vLLM's prefix caching on and off.

The vLLM child generates the prompts, then continuations that reuse KV blocks cached while
speculating, in the measured engine and in a second one with prefix caching switched the other
way (`smoke.vllm_passes`); here the outputs are compared (docs/smoke-test.md, "Prefix caching").
"""

from __future__ import annotations

from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.smoke import cross_check


def token_identity(outputs: list[list[int]], baseline: list[list[int]]) -> dict[str, Any]:
    """Prompt-by-prompt comparison of greedy outputs (with and without speculation, or prefix caching)."""
    identical = 0
    first: dict[str, int] | None = None
    for index, (ours, theirs) in enumerate(zip(outputs, baseline, strict=False)):
        if ours == theirs:
            identical += 1
            continue
        if first is None:
            position = next(
                (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs))
            )
            first = {"prompt": index, "position": position}
    comparable = len(outputs) == len(baseline) and bool(outputs)
    return {
        "token_identical": comparable and identical == len(outputs),
        "identical_prompts": identical,
        "prompts": len(outputs),
        "first_mismatch": first,
    }


def prefix_caching_identity(
    result: contract.SmokeResult | None, baseline: contract.BaselineResult | None
) -> dict[str, Any] | None:
    """Greedy identity with prefix caching on and off, from a run's `prefix_caching` outputs.

    Checks, each prompt by prompt with the first differing (prompt, token) position: the prompts
    with prefix caching on vs off; the continuations (prompt + the first half of the first pass's
    output, which reuse blocks cached while speculating) on vs off; each continuation against the
    rest of the first pass (greedy decoding must pick the same tokens again); and the engine that
    was not measured against the target alone (the measured one is `token_identity`).
    """
    if result is None or not result["ok"]:
        return None
    block = result.get("prefix_caching")
    if block is None:
        return None
    if "error" in block:
        return {"ok": False, "error": str(block["error"]), "checks": [], "identical": None}
    measured, other = block["measured"], block["other"]
    on, off = (measured, other) if measured.get("enable_prefix_caching") else (other, measured)
    prefix = list(block.get("continuation_prefix_tokens") or [])
    rest = [list(output[n:]) for output, n in zip(measured["outputs"], prefix, strict=False)]
    pairs: list[tuple[str, list[list[int]], list[list[int]]]] = [
        ("prompts: prefix caching on vs off", on["outputs"], off["outputs"]),
        ("continuations: prefix caching on vs off", on["continuation_outputs"], off["continuation_outputs"]),
        ("continuations with prefix caching on vs the first pass", on["continuation_outputs"], rest),
        ("continuations with prefix caching off vs the first pass", off["continuation_outputs"], rest),
    ]
    if baseline is not None:
        setting = "on" if other.get("enable_prefix_caching") else "off"
        pairs.append(
            (f"prompts with prefix caching {setting} vs the target alone", other["outputs"], baseline["outputs"])
        )
    checks = []
    for name, ours, theirs in pairs:
        identity = token_identity(ours, theirs)
        checks.append(
            {"name": name, "identical": identity["token_identical"], "first_mismatch": identity["first_mismatch"]}
        )
    return {
        "ok": True,
        "error": None,
        "identical": all(check["identical"] for check in checks),
        "checks": checks,
        "continuation_prefix_tokens": prefix,
        "prefix_cache_hits": on.get("prefix_cache_hits"),
        "prefix_cache_queries": on.get("prefix_cache_queries"),
        "continuation_acceptance": _continuation_acceptance(on, off),
    }


def _continuation_acceptance(on: dict[str, Any], off: dict[str, Any]) -> dict[str, Any] | None:
    """Acceptance per position of the continuation pass, prefix caching on vs off. The output
    cannot show a draft that reads a wrong cached context (verification keeps it lossless); its
    acceptance can. Same tolerance as the cross-check between engines."""
    rates = {}
    for name, run in (("on", on), ("off", off)):
        drafts, accepted = run.get("continuation_num_drafts"), run.get("continuation_accepted_per_position")
        if not drafts or accepted is None:
            return None
        rates[name] = contract.rates(drafts, list(accepted))
    width = max(len(rates["on"]), len(rates["off"]))
    padded = {name: values + [0.0] * (width - len(values)) for name, values in rates.items()}
    difference = max((abs(a - b) for a, b in zip(padded["on"], padded["off"], strict=True)), default=0.0)
    return {
        "acceptance_rate_per_position": padded,
        "max_rate_difference": difference,
        "tolerance": cross_check.RATE_TOLERANCE,
        "agrees": difference <= cross_check.RATE_TOLERANCE,
    }


def prefix_caching_reasons(check: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """Verdict reasons (every divergence) and warnings (a check that could not show anything)."""
    if check is None:
        return [], []
    if not check["ok"]:
        return [], [f"the prefix-caching check did not run: {check['error']}"]
    reasons = []
    for item in check["checks"]:
        if not item["identical"]:
            where = item["first_mismatch"]
            at = f": first at prompt {where['prompt']}, token {where['position']}" if where else ""
            reasons.append(f"prefix caching changes greedy output ({item['name']} differ{at})")
    warnings = []
    if check.get("prefix_cache_hits") == 0:
        warnings.append("the continuation pass hit no cached block: prefix caching was not exercised")
    acceptance = check.get("continuation_acceptance")
    if acceptance is not None and not acceptance["agrees"]:
        on, off = (acceptance["acceptance_rate_per_position"][k] for k in ("on", "off"))
        position = max(range(len(on)), key=lambda i: abs(on[i] - off[i]))
        warnings.append(
            f"prefix caching changes the draft's acceptance on the continuations (position {position}: "
            f"{on[position]:.2f} on vs {off[position]:.2f} off): the draft may read a wrong cached context"
        )
    return reasons, warnings
