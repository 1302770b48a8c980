"""`--server URL`: measure a running OpenAI-compatible vLLM server (stdlib HTTP only).

Scrape `/metrics`, send the prompts greedily to `/v1/completions` (or `/v1/chat/completions`
with `chat`), scrape `/metrics` again, and report the deltas of the speculative-decoding counters
as a contract result (engine `vllm-server`). The server's counters are shared with any other
client, so the numbers are only clean on a server nobody else is using. There is no baseline: the
server only serves with speculation.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.errors import OperationError, SourceError, UsageError
from dflash_tools.smoke.metrics import MetricsError, SpecDecodeCounters, counters_from_prometheus
from dflash_tools.smoke.options import Runtime

ENGINE = Runtime.VLLM_SERVER.value


@dataclass
class ServerOptions:
    url: str
    prompts: list[str] | list[list[int]]  # text, or token ids (completions only)
    max_tokens: int
    model: str | None = None
    api_key: str | None = None
    chat: bool = False
    enable_thinking: bool = False
    seed: int = 0
    concurrency: int = 1
    timeout_s: float = 600.0


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _request(
    url: str, *, payload: dict[str, Any] | None = None, api_key: str | None = None, timeout: float = 30.0
) -> bytes:
    headers = {"Accept": "application/json, text/plain"}
    data = None
    if payload is not None:
        data = json.dumps(payload).encode("utf-8")
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", errors="replace").strip()
        raise OperationError(
            f"{url}: HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else ""), "check the server log"
        ) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SourceError(
            f"{url}: cannot reach the server ({reason})", "is `vllm serve` running at that address?"
        ) from None


def _json(body: bytes, url: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise OperationError(f"{url}: the response is not JSON", "is this an OpenAI-compatible server?") from None


def served_model(url: str, api_key: str | None, timeout: float) -> str:
    """The single model a server serves (`GET /v1/models`)."""
    endpoint = f"{_base(url)}/v1/models"
    document = _json(_request(endpoint, api_key=api_key, timeout=timeout), endpoint)
    listed = document.get("data", []) if isinstance(document, dict) else []
    models: list[str] = [m["id"] for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]
    if len(models) != 1:
        raise OperationError(
            f"{endpoint}: the server lists {len(models)} models ({', '.join(models) or 'none'})",
            "name one with --server-model",
        )
    return models[0]


def scrape(url: str, api_key: str | None, timeout: float, model: str | None) -> SpecDecodeCounters:
    endpoint = f"{_base(url)}/metrics"
    text = _request(endpoint, api_key=api_key, timeout=timeout).decode("utf-8", errors="replace")
    try:
        counters = counters_from_prometheus(text, model_name=model)
    except MetricsError as exc:
        raise OperationError(f"{endpoint}: {exc}", "is this a vLLM server's /metrics page?") from None
    if counters is None:
        raise OperationError(
            f"{endpoint}: no speculative-decoding counters (vllm:spec_decode_*)",
            "start the server with --speculative-config and without --disable-log-stats",
        )
    return counters


def _complete(options: ServerOptions, model: str, prompt: str | list[int]) -> tuple[list[int], int, str]:
    base = _base(options.url)
    payload: dict[str, Any] = {
        "model": model,
        "max_tokens": options.max_tokens,
        "temperature": 0.0,
        "seed": options.seed,
        # vLLM extension: the generated token ids, for the identity check between runs.
        "return_token_ids": True,
    }
    if options.chat:
        if not isinstance(prompt, str):
            raise UsageError(
                "--chat needs text prompts, not prompt_token_ids", "drop --chat or use a text prompts file"
            )
        endpoint = f"{base}/v1/chat/completions"
        payload["messages"] = [{"role": "user", "content": prompt}]
        payload["chat_template_kwargs"] = {"enable_thinking": options.enable_thinking}
    else:
        endpoint = f"{base}/v1/completions"
        payload["prompt"] = prompt
    document = _json(_request(endpoint, payload=payload, api_key=options.api_key, timeout=options.timeout_s), endpoint)
    try:
        choice = document["choices"][0]
        completion_tokens = int(document["usage"]["completion_tokens"])
    except (KeyError, IndexError, TypeError, ValueError):
        raise OperationError(
            f"{endpoint}: the response has no choices[0] / usage.completion_tokens",
            "is this an OpenAI-compatible server?",
        ) from None
    ids = choice.get("token_ids")
    text = choice.get("text") if not options.chat else (choice.get("message") or {}).get("content")
    token_ids = [int(i) for i in ids] if isinstance(ids, list) else []
    return token_ids, completion_tokens, text if isinstance(text, str) else ""


def run_server(options: ServerOptions) -> contract.SmokeResult:
    """Measure the server; raises SourceError (unreachable) or OperationError (bad answers)."""
    model = options.model or served_model(options.url, options.api_key, options.timeout_s)
    before = scrape(options.url, options.api_key, options.timeout_s, model)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, options.concurrency)) as pool:
        answers = list(pool.map(lambda prompt: _complete(options, model, prompt), options.prompts))
    elapsed = time.perf_counter() - started
    after = scrape(options.url, options.api_key, options.timeout_s, model)
    try:
        counters = after.minus(before)
    except MetricsError as exc:
        raise OperationError(f"{_base(options.url)}/metrics: {exc}", "rerun the smoke test") from None
    outputs = [ids for ids, _, _ in answers]
    output_tokens = sum(count for _, count, _ in answers)
    result: contract.SmokeResult = {
        "schema_version": contract.SCHEMA_VERSION,
        "ok": True,
        "error": None,
        "engine": ENGINE,
        **counters.result_fields(),  # type: ignore[typeddict-item]
        "output_tokens": output_tokens,
        "elapsed_s": elapsed,
        "tokens_per_second": contract.tokens_per_second(output_tokens, elapsed),
        "outputs": outputs if all(outputs) else [],
        "baseline": None,
        "token_identical": None,
        "query_positions_per_step": None,
        "log_path": None,
        "output_texts": [text for _, _, text in answers],
        "engine_details": {"server": _base(options.url), "model": model, "concurrency": options.concurrency},
    }
    return contract.validate_result(result)
