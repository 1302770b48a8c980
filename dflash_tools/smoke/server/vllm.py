"""A vLLM server behind `smoke-test --server URL`: the deltas of its speculative-decoding counters.

Scrape `/metrics`, send the prompts to `/v1/completions` (or `/v1/chat/completions` for chat
prompts), scrape `/metrics` again: the differences of vLLM's four counters
(`smoke.metrics`: drafts, draft tokens, accepted tokens, accepted per position) are the run. The
counters are shared with any other client, so the numbers are only clean on a server nobody else
is using. Engine `vllm-server`.
"""

from __future__ import annotations

import time
from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.errors import OperationError, UsageError
from dflash_tools.smoke import acceptance
from dflash_tools.smoke.counter_relations import ImpossibleCounters, KBound, check_counts, k_bound
from dflash_tools.smoke.metrics import MetricsError, SpecDecodeCounters, counters_from_prometheus
from dflash_tools.smoke.options import Runtime
from dflash_tools.smoke.server.base import (
    Answer,
    Detected,
    ServerOptions,
    assemble,
    count,
    pick_model,
    run_all,
    text_of,
    token_ids,
    without_speculation,
)
from dflash_tools.smoke.server.http import ServerClient

ENGINE = Runtime.VLLM_SERVER.value


def scrape(client: ServerClient, model: str | None, bound: KBound | None = None) -> SpecDecodeCounters:
    endpoint = f"{client.base}/metrics"
    text = client.text("/metrics")
    if text is None:
        raise OperationError(f"{endpoint}: no /metrics page (HTTP 404)", "is this a vLLM server?")
    try:
        counters = counters_from_prometheus(text, model_name=model, bound=bound)
    except MetricsError as exc:
        raise OperationError(f"{endpoint}: {exc}", "is this a vLLM server's /metrics page?") from None
    if counters is None:
        raise without_speculation(
            client, "its /metrics has no speculative-decoding counters, vllm:spec_decode_*; or it runs with "
            "--disable-log-stats"
        )  # fmt: skip
    return counters


def vllm_payload(options: ServerOptions, model: str, prompt: str | list[int], max_tokens: int) -> tuple[str, dict]:
    protocol = options.resolved_protocol()
    payload: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        **protocol.sampling_fields(),
        "seed": options.seed,
        # vLLM extension: the generated token ids, for the identity check between runs.
        "return_token_ids": True,
    }
    if protocol.chat:
        if not isinstance(prompt, str):
            raise UsageError(
                "--chat needs text prompts, not prompt_token_ids", "drop --chat or use a text prompts file"
            )
        payload["messages"] = [{"role": "user", "content": prompt}]
        payload["chat_template_kwargs"] = dict(protocol.chat_template_kwargs)
        return "/v1/chat/completions", payload
    payload["prompt"] = prompt
    return "/v1/completions", payload


def vllm_complete(client: ServerClient, options: ServerOptions, model: str, prompt: Any, max_tokens: int) -> Answer:
    path, payload = vllm_payload(options, model, prompt, max_tokens)
    document = client.post_json(path, payload, max_tokens=max_tokens)
    endpoint = f"{client.base}{path}"
    choices = document.get("choices") if isinstance(document, dict) else None
    usage = document.get("usage") if isinstance(document, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) or not isinstance(usage, dict):
        raise OperationError(
            f"{endpoint}: the response has no choices[0] / usage.completion_tokens",
            "is this an OpenAI-compatible server?",
        )
    choice = choices[0]
    tokens = count(usage.get("completion_tokens"), f"{endpoint}: usage.completion_tokens", at_most=max_tokens)
    ids = token_ids(choice.get("token_ids"), f"{endpoint}: choices[0].token_ids")
    message = choice.get("message")
    text = (
        text_of(message.get("content") if isinstance(message, dict) else None)
        if path.endswith("chat/completions")
        else text_of(choice.get("text"))
    )
    return Answer(ids, tokens, text)


def check_delta(client: ServerClient, options: ServerOptions, counters: SpecDecodeCounters, bound: KBound) -> None:
    """The run's counter deltas against each other and K (`smoke.counter_relations`): numbers that
    cannot all be true end the run in one line naming the relation, before any verdict."""
    endpoint = f"{client.base}/metrics"
    try:
        check_counts(
            steps=counters.num_drafts,
            proposed=counters.num_draft_tokens,
            accepted=counters.num_accepted_tokens,
            per_position=counters.accepted_per_position,
            bound=bound,
        )
    except ImpossibleCounters as exc:
        raise OperationError(
            f"{endpoint}: {exc}", "is this vLLM healthy? (a proxy or exporter may mix series)"
        ) from None
    if counters.num_drafts == 0:
        raise OperationError(
            f"{endpoint}: the server reports speculative decoding (vllm:spec_decode_* counters) but made 0 draft "
            f"steps for {len(options.prompts)} requests of up to {options.max_tokens} tokens",
            "is another model answering? a request of 1 token has no draft step: pass a larger --max-tokens",
        )


def run_vllm(client: ServerClient, options: ServerOptions, detected: Detected) -> contract.SmokeResult:
    model = pick_model(client, detected, options.model)
    bound = k_bound(options.draft_k)
    run_all(
        client,
        options.warmup(),
        lambda p: vllm_complete(client, options, model, p, min(64, options.max_tokens)),
        options.concurrency,
    )
    before = scrape(client, model, bound)
    started = time.perf_counter()
    answers = run_all(
        client,
        list(options.prompts),
        lambda p: vllm_complete(client, options, model, p, options.max_tokens),
        options.concurrency,
    )
    elapsed = time.perf_counter() - started
    after = scrape(client, model, bound)
    try:
        counters = after.minus(before)
    except MetricsError as exc:
        raise OperationError(f"{client.base}/metrics: {exc}", "rerun the smoke test") from None
    check_delta(client, options, counters, bound)
    output_tokens = sum(answer.completion_tokens for answer in answers)
    source = "vLLM's /metrics counters (vllm:spec_decode_*), before and after the requests"
    return assemble(
        options,
        engine=ENGINE,
        counters=counters,
        answers=answers,
        elapsed=elapsed,
        lengths=acceptance.from_counters(counters.num_drafts, counters.num_accepted_tokens, output_tokens, source),
        per_position={
            "available": bool(counters.accepted_per_position),
            "source": "vllm:spec_decode_num_accepted_tokens_per_pos",
            "note": "" if counters.accepted_per_position else "the server reports no per-position counters",
        },
        details={
            "server": client.base,
            "server_engine": "vllm",
            "detected_by": detected.evidence,
            "model": model,
            "concurrency": options.concurrency,
        },
    )
