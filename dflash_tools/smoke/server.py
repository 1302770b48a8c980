"""`--server URL`: measure a running vLLM or SGLang server over HTTP.

The engine behind the URL is detected first (`detect_engine`), then:

- vLLM: scrape `/metrics`, send the prompts to `/v1/completions` (or `/v1/chat/completions`
  with `chat`), scrape `/metrics` again, and report the deltas of vLLM's speculative-decoding
  counters (engine `vllm-server`). The counters are shared with any other client, so the numbers
  are only clean on a server nobody else is using.
- SGLang: each answer carries its own statistics (`smoke.sglang_server`, engine `sglang-server`).

Both give the same contract result (`dflash_tools.smoke_contract`) with both definitions of the
acceptance length side by side (`smoke.acceptance`). There is no baseline: a server serves with
speculation or without, and one without is named as such in one line.

Every request is bounded (`smoke.server_http`): `timeout_s` (--timeout) bounds connecting, every
read and each small request, `run_timeout_s` (--run-timeout) the whole measurement; every
hostile answer ends in a one-line SourceError, OperationError or UsageError.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

from dflash_tools import smoke_contract as contract
from dflash_tools.errors import DflashToolsError, OperationError, UsageError
from dflash_tools.smoke import acceptance
from dflash_tools.smoke.metrics import MetricsError, SpecDecodeCounters, counters_from_prometheus
from dflash_tools.smoke.options import Runtime
from dflash_tools.smoke.protocols import Protocol, greedy
from dflash_tools.smoke.server_http import LIST_ANSWER_BYTES, ServerClient, one_line

ENGINE = Runtime.VLLM_SERVER.value
ENGINES = ("auto", "vllm", "sglang")
# Token ids are 32-bit in both engines; a "token id" outside that range is not one.
MAX_TOKEN_ID = 2**31 - 1
T = TypeVar("T")


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
    timeout_s: float = 10.0  # --timeout: connecting, every read, each small request whole
    run_timeout_s: float = 3600.0  # --run-timeout: the whole measurement
    engine: str = "auto"  # "auto" (detected), "vllm" or "sglang"
    # The sampling protocol (smoke.protocols); None: greedy with `chat` and `enable_thinking` above.
    protocol: Protocol | None = None
    # Warm-up prompts (the protocol's `warmup` requests, not measured); None: the first prompts again.
    warmup_prompts: list[str] | list[list[int]] | None = None
    # Facts about where the prompts come from (smoke.datasets `DatasetPrompts.to_dict()`), reported as given.
    dataset: dict[str, Any] | None = None

    def resolved_protocol(self) -> Protocol:
        """The protocol as this run applies it: its sampling, with the run's prompts and tokens."""
        protocol = self.protocol or greedy(chat=self.chat, enable_thinking=self.enable_thinking)
        return dataclasses.replace(protocol, max_tokens=self.max_tokens, num_prompts=len(self.prompts))

    def warmup(self) -> list[Any]:
        """The prompts of the protocol's warm-up requests."""
        count = self.resolved_protocol().warmup
        pool = self.warmup_prompts if self.warmup_prompts is not None else self.prompts
        return list(pool[:count])


@dataclass(frozen=True)
class Detected:
    engine: str  # "vllm" | "sglang"
    evidence: str  # how it was told, for the report
    models: list[str] | None  # the ids /v1/models listed, when it answered


@dataclass
class Answer:
    """One completion: its token ids (empty when the server returns none), count and text."""

    token_ids: list[int]
    completion_tokens: int
    text: str
    spec: acceptance.RequestAcceptance | None = None  # SGLang's per-response statistics


def connect(options: ServerOptions) -> ServerClient:
    if options.engine not in ENGINES:
        raise UsageError(f"server engine {options.engine!r}: not one of {', '.join(ENGINES)}", "pass vllm or sglang")
    if options.max_tokens < 1 or options.concurrency < 1:
        raise UsageError("--max-tokens and --concurrency must be at least 1", "fix the options")
    if not options.prompts:
        raise UsageError("no prompts to send to the server", "pass --prompts FILE or a dataset")
    return ServerClient(
        options.url, api_key=options.api_key, timeout_s=options.timeout_s, run_timeout_s=options.run_timeout_s
    )


# --- which engine ------------------------------------------------------------------------------


def listed_models(document: Any) -> list[tuple[str, str | None]] | None:
    """(id, owned_by) of each model a `/v1/models` answer lists; None when it is not such an answer."""
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        return None
    found: list[tuple[str, str | None]] = []
    for item in document["data"]:
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            owner = item.get("owned_by")
            found.append((item["id"], owner if isinstance(owner, str) else None))
    return found


def detect_engine(client: ServerClient) -> Detected:
    """vLLM or SGLang, from how the routes answer (docs/smoke-test.md, "Servers").

    1. `GET /v1/models`: `owned_by` is "sglang" (sglang srt/entrypoints/openai/protocol.py,
       ModelCard) or "vllm" (vllm entrypoints/serve/engine/protocol.py).
    2. A router or proxy may list other owners: `GET /model_info` answers SGLang's model info
       (`model_path`, `is_generation`; sglang srt/entrypoints/http_server.py), and `GET /version`
       answers vLLM's `{"version": ...}` (404 on SGLang).
    3. `/metrics` families: `sglang:*` or `vllm:*`.
    """
    status, document = client.probe_json("/v1/models", limit=LIST_ANSWER_BYTES)
    if status in (401, 403):
        raise client.status_error(f"{client.base}/v1/models", status, b"")
    listed = listed_models(document) if status == 200 else None
    models = [model for model, _ in listed] if listed is not None else None
    owners = {owner for _, owner in listed or [] if owner}
    for engine in ("sglang", "vllm"):
        if owners == {engine}:
            return Detected(engine, f"/v1/models: owned_by {engine!r}", models)
    status, info = client.probe_json("/model_info")
    if status == 200 and isinstance(info, dict) and "model_path" in info and "is_generation" in info:
        return Detected("sglang", "/model_info answers SGLang's model info", models)
    status, version = client.probe_json("/version")
    if status == 200 and isinstance(version, dict) and isinstance(version.get("version"), str):
        return Detected("vllm", f"/version answers {one_line(version['version'], 40)!r}", models)
    page = client.text("/metrics") or ""
    families = {prefix for prefix in ("sglang:", "vllm:", "vllm_") if f"\n{prefix}" in f"\n{page}"}
    if families == {"sglang:"}:
        return Detected("sglang", "/metrics has sglang:* metrics", models)
    if families and families <= {"vllm:", "vllm_"}:
        return Detected("vllm", "/metrics has vllm:* metrics", models)
    owned = ", ".join(sorted(owners)) or "none"
    raise OperationError(
        f"{client.base}: cannot tell which engine serves here (/v1/models owned_by: {owned}; neither "
        "SGLang's /model_info nor vLLM's /version answered; /metrics names neither)",
        "is this a vLLM or SGLang server? name the engine (server engine vllm or sglang)",
    )


def pick_model(client: ServerClient, detected: Detected, requested: str | None) -> str:
    """The model to ask for: the one named, or the only one the server lists."""
    if requested:
        return requested
    models = detected.models
    if models is None:
        document = client.get_json("/v1/models")
        listed = listed_models(document)
        if listed is None:
            raise OperationError(
                f"{client.base}/v1/models: the answer is not a model list", "is this an OpenAI-compatible server?"
            )
        models = [model for model, _ in listed]
    if len(models) != 1:
        shown = ", ".join(one_line(m, 80) for m in models[:5]) + (" ..." if len(models) > 5 else "")
        raise OperationError(
            f"{client.base}/v1/models: the server lists {len(models)} models ({shown or 'none'})",
            "name one with --server-model",
        )
    return models[0]


def served_model(url: str, api_key: str | None, timeout: float) -> str:
    """The single model a server serves (`GET /v1/models`)."""
    client = ServerClient(url, api_key=api_key, timeout_s=timeout, run_timeout_s=timeout)
    return pick_model(client, Detected("auto", "", None), None)


# --- answers -----------------------------------------------------------------------------------


def count(value: Any, where: str, *, at_most: int | None = None) -> int:
    """A non-negative JSON integer from an answer; OperationError naming the key otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (at_most is not None and value > at_most):
        bound = f" from 0 to {at_most:,}" if at_most is not None else ""
        raise OperationError(f"{where} is {one_line(repr(value), 60)}, not a count{bound}", "is this server healthy?")
    return value


def token_ids(value: Any, where: str) -> list[int]:
    """Generated token ids: absent (the server returns none) is [], anything but ids is an error."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= MAX_TOKEN_ID for t in value
    ):
        raise OperationError(f"{where} is not a list of token ids", "is this server healthy?")
    return value


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else ""


def run_all(client: ServerClient, items: Sequence[T], work: Callable[[T], Any], concurrency: int) -> list[Any]:
    """`work` over `items`, `concurrency` at a time; the first failure ends the others at once."""
    if concurrency <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(work, item) for item in items]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f.done() and f.exception() is not None]
        if failed:
            client.abort()
            for future in futures:
                future.cancel()
            wait(futures)
            first = failed[0].exception()
            if isinstance(first, DflashToolsError):
                raise first
            raise OperationError(f"{client.base}: a request failed ({type(first).__name__})", "see the server log")
        return [future.result() for future in futures]


def assemble(
    options: ServerOptions,
    *,
    engine: str,
    counters: SpecDecodeCounters,
    answers: list[Answer],
    elapsed: float,
    lengths: dict[str, Any],
    per_position: dict[str, Any],
    details: dict[str, Any],
) -> contract.SmokeResult:
    """The contract result of a server measurement (both engines)."""
    outputs = [answer.token_ids for answer in answers]
    output_tokens = sum(answer.completion_tokens for answer in answers)
    result: contract.SmokeResult = {
        "schema_version": contract.SCHEMA_VERSION,
        "ok": True,
        "error": None,
        "engine": engine,
        **counters.result_fields(),  # type: ignore[typeddict-item]
        "output_tokens": output_tokens,
        "elapsed_s": elapsed,
        "tokens_per_second": contract.tokens_per_second(output_tokens, elapsed),
        "outputs": outputs if all(outputs) else [],
        "baseline": None,
        "token_identical": None,
        "query_positions_per_step": None,
        "log_path": None,
        "output_texts": [answer.text for answer in answers],
        "engine_details": details,
        "acceptance_lengths": lengths,
        "per_position": per_position,
        "protocol": options.resolved_protocol().to_dict(),
    }
    if options.dataset is not None:
        result["dataset"] = dict(options.dataset)
    return contract.validate_result(result)


def without_speculation(client: ServerClient, why: str) -> OperationError:
    return OperationError(
        f"the server at {client.base} serves without speculative decoding ({why})",
        "start it with a draft (vLLM: --speculative-config; SGLang: --speculative-algorithm DFLASH "
        "--speculative-draft-model-path DRAFT)",
    )


# --- vLLM --------------------------------------------------------------------------------------


def scrape(client: ServerClient, model: str | None) -> SpecDecodeCounters:
    endpoint = f"{client.base}/metrics"
    text = client.text("/metrics")
    if text is None:
        raise OperationError(f"{endpoint}: no /metrics page (HTTP 404)", "is this a vLLM server?")
    try:
        counters = counters_from_prometheus(text, model_name=model)
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


def run_vllm(client: ServerClient, options: ServerOptions, detected: Detected) -> contract.SmokeResult:
    model = pick_model(client, detected, options.model)
    run_all(
        client,
        options.warmup(),
        lambda p: vllm_complete(client, options, model, p, min(64, options.max_tokens)),
        options.concurrency,
    )
    before = scrape(client, model)
    started = time.perf_counter()
    answers = run_all(
        client,
        list(options.prompts),
        lambda p: vllm_complete(client, options, model, p, options.max_tokens),
        options.concurrency,
    )
    elapsed = time.perf_counter() - started
    after = scrape(client, model)
    try:
        counters = after.minus(before)
    except MetricsError as exc:
        raise OperationError(f"{client.base}/metrics: {exc}", "rerun the smoke test") from None
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


# --- entry -------------------------------------------------------------------------------------


def run_server(options: ServerOptions) -> contract.SmokeResult:
    """Measure the server; raises SourceError (unreachable, no answer, not HTTP, the key refused),
    OperationError (error answers, unusable answers, no speculation, --run-timeout) or UsageError."""
    client = connect(options)
    if options.engine == "auto":
        detected = detect_engine(client)
    else:
        detected = Detected(options.engine, "named by the caller", None)
    if detected.engine == "sglang":
        from dflash_tools.smoke.sglang_server import run_sglang

        return run_sglang(client, options, detected)
    return run_vllm(client, options, detected)
