"""The vLLM engine's generation passes (in the child process): prompts, greedy passes, timed
repetitions, and the prefix-caching check's continuation passes (`smoke.vllm_engine` runs them).

Timed repetitions (the request's `timing`, docs/smoke-test.md "How sure a measurement is"): the
same prompts again, prefix caching emptied before each so that every repetition computes what the
first did; counters and outputs are the first repetition's.

vLLM is imported only inside the functions that call it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.smoke.metrics import ZERO, counters_from_metrics, prefix_cache_counters
from dflash_tools.smoke_contract import progress


def prompts_for(llm: Any, request: contract.SmokeRequest) -> list[Any]:
    if request["prompt_token_ids"] is not None:
        return [{"prompt_token_ids": ids} for ids in request["prompt_token_ids"]]
    if not request.get("chat"):
        return list(request["prompts"])
    tokenizer = llm.get_tokenizer()
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}],
            tokenize=False,
            add_generation_prompt=True,
            **{
                **dict(request.get("chat_template_kwargs") or {}),
                "enable_thinking": bool(request.get("enable_thinking", False)),
            },
        )
        for prompt in request["prompts"]
    ]


def shutdown(llm: Any) -> None:
    engine = getattr(llm, "llm_engine", None)
    core = getattr(engine, "engine_core", None)
    shutdown = getattr(core, "shutdown", None)
    if callable(shutdown):
        shutdown()
    del llm
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def engine_kwargs(request: contract.SmokeRequest) -> dict[str, Any]:
    kwargs = dict(request["engine_args"])
    kwargs.setdefault("seed", request["seed"])
    if request["dtype"]:
        kwargs.setdefault("dtype", request["dtype"])
    if request.get("target_revision"):
        kwargs.setdefault("revision", request["target_revision"])
    # get_metrics() needs statistics; LLM() disables them by default.
    kwargs["disable_log_stats"] = False
    return kwargs


@dataclass
class Generated:
    outputs: list[list[int]]
    texts: list[str]
    elapsed: float
    prompt_token_ids: list[list[int]]


def generate(
    llm: Any, prompts: list[Any], request: contract.SmokeRequest, max_tokens: int | list[int] | None = None
) -> Generated:
    """Greedy generation; `max_tokens` per prompt when a list (default: the request's)."""
    from vllm import SamplingParams

    limits = max_tokens if isinstance(max_tokens, list) else [max_tokens or request["max_tokens"]] * len(prompts)
    params = [SamplingParams(temperature=0.0, max_tokens=limit, seed=request["seed"]) for limit in limits]
    started = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - started
    return Generated(
        outputs=[list(output.outputs[0].token_ids) for output in outputs],
        texts=[output.outputs[0].text for output in outputs],
        elapsed=elapsed,
        prompt_token_ids=[list(output.prompt_token_ids or []) for output in outputs],
    )


@dataclass
class Timed:
    """The first pass (its outputs count) and the timing of every repetition."""

    first: Generated
    timing: dict[str, Any]

    @property
    def median(self) -> int:
        return int(self.timing["median"])

    @property
    def elapsed(self) -> float:
        return float(self.timing["elapsed_s"][self.median])

    @property
    def draft_time(self) -> float | None:
        drafting = self.timing.get("draft_time_s")
        return None if drafting is None else float(drafting[self.median])


def timed_passes(
    llm: Any,
    prompts: list[Any],
    request: contract.SmokeRequest,
    first: Generated,
    *,
    first_draft_s: float | None = None,
    draft_seconds: Callable[[], float | None] | None = None,
) -> Timed:
    """More passes over the prompts until the request's `timing` is satisfied; `first`: the pass
    already made (its drafting time `first_draft_s`), `draft_seconds`: the drafter's cumulative
    drafting time, read around each further pass."""
    passes = [first]
    drafting: list[float] | None = [first_draft_s] if first_draft_s is not None and draft_seconds else None
    while contract.more_repetitions(request, [g.elapsed for g in passes]):
        reset = getattr(llm, "reset_prefix_cache", None)
        if callable(reset):
            reset()  # every repetition computes what the first did
        before = draft_seconds() if draft_seconds is not None else None
        passes.append(generate(llm, prompts, request))
        after = draft_seconds() if draft_seconds is not None else None
        if drafting is not None:
            if before is None or after is None:
                drafting = None
            else:
                drafting.append(max(0.0, after - before))
    timing = contract.timing_block(
        [g.elapsed for g in passes], [sum(len(ids) for ids in g.outputs) for g in passes], drafting
    )
    return Timed(passes[0], timing)


# --- prefix caching ------------------------------------------------------------------------------


def prefix_caching_enabled(llm: Any, kwargs: dict[str, Any]) -> bool:
    try:
        return bool(llm.llm_engine.vllm_config.cache_config.enable_prefix_caching)
    except AttributeError:
        return bool(kwargs.get("enable_prefix_caching", True))


def continuation_prompts(first: Generated) -> tuple[list[dict[str, list[int]]], list[int], list[int]]:
    """Each prompt extended by the first half of its output: the prompts of the second pass, the
    tokens taken from each output, and how many tokens each must generate to end where it did."""
    prefix = [len(output) // 2 for output in first.outputs]
    prompts = [
        {"prompt_token_ids": ids + output[:n]}
        for ids, output, n in zip(first.prompt_token_ids, first.outputs, prefix, strict=True)
    ]
    remaining = [max(1, len(output) - n) for output, n in zip(first.outputs, prefix, strict=True)]
    return prompts, prefix, remaining


def continuation_pass(
    llm: Any, request: contract.SmokeRequest, prompts: list[dict[str, list[int]]], remaining: list[int]
) -> dict[str, Any]:
    """The continuations, with vLLM's prefix-cache counters and the speculative-decoding counters
    over this pass: a draft whose cached context is wrong proposes worse tokens without changing
    the output, so the acceptance is compared too."""
    metrics = llm.get_metrics()
    before, spec_before = prefix_cache_counters(metrics), counters_from_metrics(metrics) or ZERO
    second = generate(llm, list(prompts), request, remaining)
    metrics = llm.get_metrics()
    after, spec_after = prefix_cache_counters(metrics), counters_from_metrics(metrics)
    hits = queries = None
    if before is not None and after is not None:
        queries, hits = after[0] - before[0], after[1] - before[1]
    spec = spec_after.minus(spec_before) if spec_after is not None else None
    return {
        "continuation_outputs": second.outputs,
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "continuation_num_drafts": spec.num_drafts if spec else None,
        "continuation_accepted_per_position": list(spec.accepted_per_position) if spec else None,
    }


def other_engine_passes(
    request: contract.SmokeRequest,
    kwargs: dict[str, Any],
    speculative: dict[str, Any],
    prompts: list[Any],
    enable: bool,
    continuation: list[dict[str, list[int]]],
    remaining: list[int],
) -> dict[str, Any]:
    """Both passes again in an engine with prefix caching `enable`."""
    from vllm import LLM

    progress(f"prefix caching {'on' if enable else 'off'}: loading the engine again")
    llm = LLM(model=request["target"], speculative_config=speculative, **{**kwargs, "enable_prefix_caching": enable})
    try:
        first = generate(llm, prompts, request)
        passes = continuation_pass(llm, request, continuation, remaining)
        return {"enable_prefix_caching": prefix_caching_enabled(llm, kwargs), "outputs": first.outputs, **passes}
    finally:
        shutdown(llm)
