"""`--server URL`: measure a running vLLM or SGLang server over HTTP.

The engine behind the URL is detected first (`detect_engine`), then:

- vLLM: scrape `/metrics`, send the prompts to `/v1/completions` (or `/v1/chat/completions`
  with `chat`), scrape `/metrics` again, and report the deltas of vLLM's speculative-decoding
  counters (engine `vllm-server`). The counters are shared with any other client, so the numbers
  are only clean on a server nobody else is using (`smoke.server.vllm`).
- SGLang: each answer carries its own statistics (`smoke.server.sglang`, engine `sglang-server`).

Both give the same contract result (`dflash_tools.smoke_contract`) with both definitions of the
acceptance length side by side (`smoke.acceptance`). There is no baseline: a server serves with
speculation or without, and one without is named as such in one line.

Every request is bounded (`smoke.server.http`): `timeout_s` (--timeout) bounds connecting, every
read and each small request, `run_timeout_s` (--run-timeout) the whole measurement; every
hostile answer ends in a one-line SourceError, OperationError or UsageError. Neither an error nor
the result carries the API key or a cookie value the server set: both are redacted here, where
every message and document of a server run passes (`ServerClient.redact`).
"""

from __future__ import annotations

from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.errors import DflashToolsError, OperationError
from dflash_tools.smoke.server.base import (
    Detected,
    ServerOptions,
    connect,
    listed_models,
    pick_model,
)
from dflash_tools.smoke.server.http import LIST_ANSWER_BYTES, ServerClient, one_line
from dflash_tools.smoke.server.sglang import run_sglang
from dflash_tools.smoke.server.vllm import run_vllm

__all__ = ["Detected", "ServerOptions", "detect_engine", "run_server", "served_model"]


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


def served_model(url: str, api_key: str | None, timeout: float) -> str:
    """The single model a server serves (`GET /v1/models`)."""
    client = ServerClient(url, api_key=api_key, timeout_s=timeout, run_timeout_s=timeout)
    return pick_model(client, Detected("auto", "", None), None)


# --- entry -------------------------------------------------------------------------------------


def run_server(options: ServerOptions) -> contract.SmokeResult:
    """Measure the server; raises SourceError (unreachable, no answer, not HTTP, the key refused),
    OperationError (error answers, unusable answers, no speculation, --run-timeout) or UsageError."""
    client = connect(options)
    try:
        if options.engine == "auto":
            detected = detect_engine(client)
        else:
            detected = Detected(options.engine, "named by the caller", None)
        result = (
            run_sglang(client, options, detected)
            if detected.engine == "sglang"
            else run_vllm(client, options, detected)
        )
    except DflashToolsError as exc:
        exc.message, exc.hint = client.redact(exc.message), client.redact(exc.hint)
        exc.args = (exc.message,)
        raise
    return _redacted(result, client)


def _redacted(value: Any, client: ServerClient) -> Any:
    """A result with every string in it redacted (answers' texts, server info, the details)."""
    if isinstance(value, str):
        return client.redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item, client) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item, client) for item in value]
    return value
