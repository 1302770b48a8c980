"""A stand-in for an SGLang 0.5.23 server (`python -m sglang.launch_server`), over real HTTP on 127.0.0.1.

SGLang needs a CUDA GPU and cannot run here, so `smoke-test --server` is tested against this
server instead. It is built from the released wheel `sglang==0.5.23` (read, not run): its routes,
its API-key rule and the JSON its answers carry follow the wheel's files, cited below by path and
line inside the wheel (`sglang/srt/...`). The SGLang source tier
(tests/real_sglang/test_sglang_standin.py) checks every body it sends against the wheel's own
pydantic and msgspec models, its `/generate` sampling-parameter list against the wheel's, and its
API-key decisions against the wheel's `decide_request_auth`. A short reference names a wheel file
by its last path parts (`http_server.py:936` is sglang/srt/entrypoints/http_server.py).

The engine is scripted, not a model: every verify step accepts a chosen number of drafts (a
pattern, cycled), so each number the server reports is known before the request is sent
(`simulate`). As in SGLang, the prefill yields one token, each verify step commits the accepted
drafts plus one, and a step that runs past `max_new_tokens` (or past `natural_length`, an EOS stop)
has its extra tokens trimmed from the output while the verify and draft counts keep them.

Routes (what 0.5.23 serves; any other path answers 404 {"detail": "Not Found"}):

    GET  /health /health_generate /ready     200 with an empty body (503 while `starting`)
    GET  /v1/models, /v1/models/{model}      ModelList / ModelCard, owned_by "sglang"
    GET  /model_info, /get_model_info        the model info
    GET  /server_info, /get_server_info      the launch arguments (api_key in clear, as SGLang
                                             does), internal_states[] and the version
    POST /generate                           native: meta_info with the spec_* numbers
    POST /v1/completions                     the numbers only in sglext.spec_tokens_details, and
                                             only with "return_spec_tokens_details": true
    POST /v1/chat/completions                choices[0].meta_info with "return_meta_info": true,
                                             sglext.spec_tokens_details as above
    GET  /metrics                            only with enable_metrics=True: the sglang:* families
                                             read here, as prometheus_client's multiprocess mode
                                             writes them

What it does not model: streaming (answered 400), n > 1, logprobs, LoRA, batched completion
prompts, the admin routes (/set_internal_state, ...), the histograms of /metrics, the Rust
frontend (SGLANG_RUST_SERVER=1), and more than one data-parallel rank.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

SGLANG_VERSION = "0.5.23"
EOS_TOKEN_ID = 151645  # Qwen3 <|im_end|>

# sglang/api/v1/api_types.py `_FIELDS_SamplingParams`: /generate refuses any other key in
# sampling_params with HTTP 400 {"error": "unknown field `x`, expected one of ..."}
# (entrypoints/api_contract.py:12-18, http_server.py:936-939).
SAMPLING_PARAMS_FIELDS = (
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "stream_interval",
    "logit_bias",
    "sampling_seed",
    "custom_params",
    "beam_width",
    "watermark",
    "choice",
)

# observability/metrics_collector.py: (name, documentation, multiprocess gauge?)
_SCHEDULER_GAUGES = (
    ("sglang:num_running_reqs", "The number of running requests."),
    ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
    ("sglang:gen_throughput", "The generation throughput (token/s)."),
    ("sglang:cache_hit_rate", "The prefix cache hit rate."),
    ("sglang:token_usage", "The token usage."),
    (
        "sglang:spec_accept_length",
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
    ),
    (
        "sglang:spec_accept_rate",
        "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
    ),
    (
        "sglang:spec_cap_length",
        "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot "
        "(0 when no cap is scheduled).",
    ),
    (
        "sglang:spec_block_accept_length",
        "Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; "
        "exact only in DSpark cap-accept mode).",
    ),
    ("sglang:spec_num_steps", "Currently active speculative_num_steps."),
    (
        "sglang:spec_num_draft_tokens",
        "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
    ),
)
_GET_ROUTES = frozenset(
    {
        "/health",
        "/health_generate",
        "/ready",
        "/metrics",
        "/v1/models",
        "/model_info",
        "/get_model_info",
        "/server_info",
        "/get_server_info",
    }
)
_TOKENIZER_COUNTERS = (
    ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", True),
    ("sglang:generation_tokens_total", "Number of generation tokens processed.", True),
    ("sglang:num_requests_total", "Number of requests processed.", True),
    ("sglang:spec_verify_calls_total", "Number of speculative decoding verification calls.", False),
)


@dataclass(frozen=True)
class Outcome:
    """One request as the scripted engine ran it."""

    output_ids: tuple[int, ...]  # trimmed at the cap / stop, as returned to the client
    completion_tokens: int  # C
    verify_ct: int  # V: verify (decode) steps
    correct_drafts: int  # A: accepted drafts over all steps (untrimmed)
    histogram: tuple[int, ...]  # steps by accepted-draft count, len = max count + 1
    steps: tuple[int, ...]  # accepted drafts per verify step, in order
    finish_reason: dict[str, Any]

    @property
    def spec_accept_length(self) -> float:
        """SGLang's number for the request: C / V (sglang/srt/managers/tokenizer_manager.py:3166-3168)."""
        return self.completion_tokens / self.verify_ct

    @property
    def vllm_mean_acceptance_length(self) -> float:
        """vLLM's definition over the same steps: 1 + A / V."""
        return 1 + self.correct_drafts / self.verify_ct


def simulate(
    max_new_tokens: int,
    pattern: Sequence[int],
    num_draft_tokens: int,
    *,
    speculative: bool = True,
    natural_length: int | None = None,
    first_token: int = 1000,
) -> Outcome:
    """The scripted engine on one request (the module docstring says how it runs)."""
    k = num_draft_tokens - 1
    pattern = [min(max(int(a), 0), k) for a in pattern] or [0]
    cap = max_new_tokens
    length = 1  # the prefill's token
    steps: list[int] = []
    stopped_at: int | None = None
    if natural_length is not None and natural_length <= 1:
        stopped_at = 1
    while stopped_at is None and length < cap:
        a = pattern[len(steps) % len(pattern)] if speculative else 0
        steps.append(a)
        length += a + 1
        if natural_length is not None and length >= natural_length and natural_length < cap:
            stopped_at = natural_length
    visible = min(length, stopped_at if stopped_at is not None else cap)
    ids = [(first_token + 7 * i) % 150000 for i in range(visible)]
    if stopped_at is not None:
        ids[-1] = EOS_TOKEN_ID
        finish: dict[str, Any] = {"type": "stop", "matched": EOS_TOKEN_ID}
    else:
        finish = {"type": "length", "length": cap}
    histogram: list[int] = []
    for a in steps if speculative else []:
        histogram += [0] * (a + 1 - len(histogram))
        histogram[a] += 1
    return Outcome(
        output_ids=tuple(ids),
        completion_tokens=visible,
        verify_ct=len(steps) if speculative else 0,
        correct_drafts=sum(steps) if speculative else 0,
        histogram=tuple(histogram),
        steps=tuple(steps),
        finish_reason=finish,
    )


def accepted_per_position(histogram: Sequence[int], k: int) -> list[int]:
    """Per-position accepted counts as vLLM keeps them, from the histogram of accepted drafts
    per step: on a chain, position j is accepted by every step that accepted more than j."""
    return [sum(histogram[j + 1 :]) for j in range(k)]


def _format_value(value: float) -> str:
    """prometheus_client's floatToGoString for the finite values used here."""
    return repr(float(value))


class FakeSglangServer:
    """An SGLang 0.5.23 server with DFLASH speculation (or none: `speculative=False`).

    `accept_pattern`: the drafts each verify step accepts, cycled; or a function of the request's
    index (0 for the first request after start-up) giving that request's pattern.
    """

    def __init__(
        self,
        *,
        model_path: str = "Qwen/Qwen3-8B",
        served_model_name: str | None = None,
        draft_model_path: str | None = "z-lab/Qwen3-8B-DFlash-b16",
        speculative: bool = True,
        num_draft_tokens: int = 16,  # speculative_num_draft_tokens = DFLASH block size; K = 15
        accept_pattern: Sequence[int] | Callable[[int], Sequence[int]] = (5,),
        natural_length: int | None = None,
        api_key: str | None = None,
        admin_api_key: str | None = None,
        enable_metrics: bool = False,
        decode_log_interval: int = 40,
        context_len: int = 40960,
        warmup: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.model_path = model_path
        self.served_model_name = served_model_name or model_path
        self.draft_model_path = draft_model_path if speculative else None
        self.speculative = speculative
        self.num_draft_tokens = num_draft_tokens if speculative else None
        self.accept_pattern = accept_pattern
        self.natural_length = natural_length
        self.api_key = api_key
        self.admin_api_key = admin_api_key
        self.enable_metrics = enable_metrics
        self.decode_log_interval = decode_log_interval
        self.context_len = context_len
        self.starting = False
        self.startup_time = 42.0
        self.requests: list[tuple[str, dict[str, Any]]] = []  # (path, body) as received
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        # scheduler (metrics_reporter.py) state
        self._forward_ct_decode = 0
        self._num_accept_tokens = 0  # per log interval
        self._num_correct_drafts = 0
        self._num_forward_ct = 0
        self._total_accept_tokens = 0  # lifetime, advanced only at interval boundaries
        self._total_forward_ct = 0
        self._gauges: dict[str, float] = {}
        # tokenizer-side counters, keyed (name, is_streaming)
        self._counters: dict[tuple[str, str | None], float] = {}
        self._request_index = 0
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        if warmup:
            # http_server.py:2360-2470: the launcher POSTs /generate with max_new_tokens 8
            # (a regular request, log_metrics=True) before reporting ready.
            self._run("warmup", prompt_tokens=3, max_new_tokens=8, stream=False, pattern_index=None)

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeSglangServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- the scripted engine ---------------------------------------------------------------

    @property
    def k(self) -> int:
        return (self.num_draft_tokens or 1) - 1

    def pattern_for(self, index: int) -> Sequence[int]:
        return self.accept_pattern(index) if callable(self.accept_pattern) else self.accept_pattern

    def _run(
        self, rid: str, *, prompt_tokens: int, max_new_tokens: int, stream: bool, pattern_index: int | None
    ) -> tuple[Outcome, dict[str, Any]]:
        with self._lock:
            if pattern_index is None:  # the launcher's warmup: does not consume a request index
                pattern: Sequence[int] = self.pattern_for(0)
            else:
                pattern = self.pattern_for(self._request_index)
                self._request_index += 1
            outcome = simulate(
                max_new_tokens,
                pattern,
                self.num_draft_tokens or 1,
                speculative=self.speculative,
                natural_length=self.natural_length,
                first_token=1000 + 13 * len(self.outcomes),
            )
            if pattern_index is not None:
                self.outcomes.append(outcome)
            self._account(outcome, prompt_tokens, stream)
        return outcome, self._meta_info(rid, outcome, prompt_tokens)

    def _account(self, outcome: Outcome, prompt_tokens: int, stream: bool) -> None:
        """The scheduler's per-decode-batch and the tokenizer's per-request bookkeeping (each
        request runs alone: one decode batch per verify step, batch size 1)."""
        self._gauges.setdefault("sglang:spec_accept_length", 0.0)  # the prefill's log_stats
        steps = outcome.steps if self.speculative else (0,) * (outcome.completion_tokens - 1)
        for a in steps:
            self._forward_ct_decode += 1
            if self.speculative:
                self._num_accept_tokens += a + 1  # batch_result_processor.py:984-990
                self._num_correct_drafts += a
                self._num_forward_ct += 1
            if self._forward_ct_decode % self.decode_log_interval == 0:
                self._report_decode_window()
        is_streaming = "true" if stream else "false"
        for name, value in (
            ("sglang:prompt_tokens_total", prompt_tokens),
            ("sglang:generation_tokens_total", outcome.completion_tokens),
            ("sglang:num_requests_total", 1),
        ):
            self._counters[(name, is_streaming)] = self._counters.get((name, is_streaming), 0) + value
        if outcome.verify_ct > 0:  # metrics_collector.py:2111-2112
            key = ("sglang:spec_verify_calls_total", None)
            self._counters[key] = self._counters.get(key, 0) + outcome.verify_ct

    def _report_decode_window(self) -> None:
        """metrics_reporter.py:966-1001 and 1089-1095, every decode_log_interval decode batches."""
        if self.speculative and self._num_forward_ct:
            accept_length = self._num_accept_tokens / self._num_forward_ct
            accept_rate = self._num_correct_drafts / (self._num_forward_ct * self.k) if self.k else 0.0
            self._total_accept_tokens += self._num_accept_tokens
            self._total_forward_ct += self._num_forward_ct
            self._num_accept_tokens = self._num_correct_drafts = self._num_forward_ct = 0
            num_steps, num_draft_tokens = 1, self.num_draft_tokens or 0
        else:
            accept_length = accept_rate = 0.0
            num_steps = num_draft_tokens = 0
        self._gauges.update(
            {
                "sglang:spec_accept_length": accept_length,
                "sglang:spec_accept_rate": accept_rate,
                "sglang:spec_cap_length": 0.0,
                "sglang:spec_block_accept_length": 0.0,
                "sglang:spec_num_steps": float(num_steps),
                "sglang:spec_num_draft_tokens": float(num_draft_tokens),
            }
        )

    def avg_spec_accept_length(self) -> float | None:
        """internal_state.py:242-253: lifetime accepted/forward over completed log windows."""
        with self._lock:
            if not self.speculative or self._total_forward_ct <= 0:
                return None
            return self._total_accept_tokens / self._total_forward_ct

    def _meta_info(self, rid: str, outcome: Outcome, prompt_tokens: int) -> dict[str, Any]:
        """tokenizer_manager.py:2507-2756 plus 2026-2029, for a finished request."""
        c = outcome.completion_tokens
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": outcome.finish_reason,
            "prompt_tokens": prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": c,
            "cached_tokens": 0,
            "weight_versions": [{"version": "default", "start": 0, "end": c}],
            "cached_tokens_details": None,
            "e2e_latency": 0.001 * (1 + outcome.verify_ct),
        }
        if self.speculative and outcome.verify_ct > 0:
            proposed = outcome.verify_ct * self.k
            meta["spec_accept_rate"] = outcome.correct_drafts / proposed
            meta["spec_accept_length"] = c / outcome.verify_ct
            meta["spec_num_correct_drafts"] = outcome.correct_drafts
            meta["spec_num_proposed_drafts"] = proposed
            meta["spec_verify_ct"] = outcome.verify_ct
            if outcome.histogram:
                meta["spec_correct_drafts_histogram"] = list(outcome.histogram)
        meta["response_sent_to_client_ts"] = time.time()
        return meta

    # ---- documents -------------------------------------------------------------------------

    def model_card(self) -> dict[str, Any]:
        return {
            "id": self.served_model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": self.served_model_name,
            "parent": None,
            "max_model_len": self.context_len,
        }

    def model_info(self) -> dict[str, Any]:
        return {  # http_server.py:812-850
            "model_path": self.model_path,
            "served_model_name": self.served_model_name,
            "tokenizer_path": self.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "qwen3",
            "architectures": ["Qwen3ForCausalLM"],
        }

    def _server_args(self) -> dict[str, Any]:
        """A subset of ServerArgs.resolved_dict() (server_args.py:316-333): the real one has
        every field, api_key included in clear (only watermark secrets are redacted)."""
        host, port = self._server.server_address[:2]
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path,
            "served_model_name": self.served_model_name,
            "host": host,
            "port": port,
            "api_key": self.api_key,
            "admin_api_key": self.admin_api_key,
            "context_length": None,
            "enable_metrics": self.enable_metrics,
            "decode_log_interval": self.decode_log_interval,
            "speculative_algorithm": "DFLASH" if self.speculative else None,
            "speculative_draft_model_path": self.draft_model_path,
            "speculative_num_steps": 1 if self.speculative else None,
            "speculative_eagle_topk": 1 if self.speculative else None,
            "speculative_num_draft_tokens": self.num_draft_tokens,
            "speculative_dflash_block_size": None,
            "disaggregation_mode": "null",
            "enable_dp_attention": False,
        }

    def server_info(self) -> dict[str, Any]:
        state: dict[str, Any] = {  # internal_state.py:44-130
            **self._server_args(),
            "world_size": 1,
            "startup_time": self.startup_time,
            "effective_max_running_requests_per_dp": 256,
            "last_gen_throughput": self._gauges.get("sglang:gen_throughput", 0.0),
            "memory_usage": {
                "weight": 15.27,
                "kvcache": 100.0,
                "startup_available": 130.0,
                "token_capacity": 700000,
                "token_capacity_swa": None,
                "graph": {},
            },
            "disaggregation_mode": "null",
            "decode_cuda_graph_bs": [1, 2, 4, 8],
            "decode_cuda_graph_memory_gb": 0.0,
        }
        accept_length = self.avg_spec_accept_length()
        if accept_length is not None:
            state["avg_spec_accept_length"] = accept_length
        return {  # http_server.py:863-894, utils/common.py:3584-3593
            **self._server_args(),
            "launch_command": f"python -m sglang.launch_server --model-path {self.model_path}",
            "status": "ready",
            "max_total_num_tokens": 700000,
            "max_req_input_len": self.context_len - 1,
            "hicache_object_layout": None,
            "kv_events": None,
            "startup_time": self.startup_time,
            "internal_states": [state],
            "version": SGLANG_VERSION,
            "frontend": "python",
        }

    def metrics_text(self) -> str:
        """The multiprocess-mode exposition (utils/common.py:2845-2854): no _created samples,
        no process/python collectors, labels sorted, only series that were ever touched."""
        lines: list[str] = []
        sched = {
            "engine_type": "unified",
            "model_name": self.served_model_name,
            "moe_ep_rank": "0",
            "pp_rank": "0",
            "tp_rank": "0",
        }
        tok = {"engine_type": "unified", "model_name": self.served_model_name}

        def labels(values: dict[str, str]) -> str:
            def escape(value: str) -> str:
                return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

            return "{" + ",".join(f'{k}="{escape(str(v))}"' for k, v in sorted(values.items())) + "}"

        with self._lock:
            gauges = dict(self._gauges)
            if gauges:
                for name in (
                    "sglang:num_running_reqs",
                    "sglang:num_queue_reqs",
                    "sglang:gen_throughput",
                    "sglang:cache_hit_rate",
                    "sglang:token_usage",
                ):
                    gauges.setdefault(name, 0.0)
                for name in (
                    "sglang:spec_accept_rate",
                    "sglang:spec_cap_length",
                    "sglang:spec_block_accept_length",
                    "sglang:spec_num_steps",
                    "sglang:spec_num_draft_tokens",
                ):
                    gauges.setdefault(name, 0.0)
            counters = dict(self._counters)
        for name, doc in _SCHEDULER_GAUGES:
            if name in gauges:
                lines += [
                    f"# HELP {name} {doc}",
                    f"# TYPE {name} gauge",
                    f"{name}{labels(sched)} {_format_value(gauges[name])}",
                ]
        for name, doc, streaming in _TOKENIZER_COUNTERS:
            series = [(s, v) for (n, s), v in counters.items() if n == name]
            if not series:
                continue
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter"]
            for is_streaming, value in sorted(series, key=lambda item: str(item[0])):
                values = dict(tok, is_streaming=is_streaming) if streaming else tok
                lines.append(f"{name}{labels(values)} {_format_value(value)}")
        return "\n".join(lines) + "\n" if lines else ""

    # ---- request handling ------------------------------------------------------------------

    def _authorized(self, method: str, path: str, authorization: str | None) -> tuple[bool, int]:
        """utils/auth.py:74-157 (decide_request_auth) for NORMAL-level routes."""
        if not (self.api_key or self.admin_api_key):
            return True, 200
        if method == "OPTIONS" or path.startswith(("/health", "/ready", "/metrics")):
            return True, 200
        if not self.api_key:
            return True, 200
        if not authorization:
            return False, 401
        parts = authorization.split(" ", 1)
        if len(parts) != 2 or parts[0].lower() != "bearer":
            return False, 401
        return secrets.compare_digest(parts[1], self.api_key), 401

    def _prompt_tokens(self, prompt: Any) -> int:
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return len(prompt)
        return max(1, len(str(prompt).split()))

    def _text(self, outcome: Outcome) -> str:
        return "".join(f" t{i}" for i in outcome.output_ids[:-1]) + (
            "" if outcome.finish_reason["type"] == "stop" else f" t{outcome.output_ids[-1]}"
        )

    def generate(self, body: dict[str, Any]) -> tuple[int, Any]:
        sampling = body.get("sampling_params") or {}
        if not isinstance(sampling, dict):
            return 400, {"error": "invalid type: sequence, expected struct SamplingParams"}
        for key in sampling:
            if key not in SAMPLING_PARAMS_FIELDS:
                listed = ", ".join(f"`{f}`" for f in SAMPLING_PARAMS_FIELDS)
                return 400, {"error": f"unknown field `{key}`, expected one of {listed}"}
        if body.get("stream"):
            return 400, {"error": "stand-in: streaming is not modelled"}
        max_new = sampling.get("max_new_tokens")
        max_new = 128 if max_new is None else int(max_new)
        prompts = body.get("text") if body.get("text") is not None else body.get("input_ids")
        if prompts is None:
            return 400, {"error": "Either text, input_ids or input_embeds should be provided."}
        single = isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int))
        batch = [prompts] if single else list(prompts)
        results = []
        for prompt in batch:
            rid = uuid.uuid4().hex
            outcome, meta = self._run(
                rid, prompt_tokens=self._prompt_tokens(prompt), max_new_tokens=max_new, stream=False, pattern_index=0
            )
            item: dict[str, Any] = {
                "text": self._text(outcome),
                "output_ids": list(outcome.output_ids),
                "meta_info": meta,
            }
            if body.get("return_prompt_token_ids") and isinstance(prompt, list):
                item["prompt_token_ids"] = list(prompt)
            results.append(item)
        return 200, results[0] if single else results

    @staticmethod
    def _error(message: str, status: int = 400, err_type: str = "BadRequestError") -> tuple[int, Any]:
        return status, {"object": "error", "message": message, "type": err_type, "param": None, "code": status}

    def _spec_details(self, meta: dict[str, Any]) -> dict[str, Any] | None:
        """utils.py:310-340 (spec_tokens_details_from_meta_info), serialised."""
        keys = (
            "spec_accept_rate",
            "spec_accept_length",
            "spec_cap_length",
            "spec_block_accept_length",
            "spec_num_correct_drafts",
            "spec_num_proposed_drafts",
            "spec_verify_ct",
            "spec_correct_drafts_histogram",
            "spec_cap_lens_histogram",
        )
        if not any(k in meta for k in keys):
            return None
        return {
            "spec_accept_rate": meta.get("spec_accept_rate") or 0.0,
            "spec_accept_length": meta.get("spec_accept_length") or 0.0,
            "spec_cap_length": meta.get("spec_cap_length") or 0.0,
            "spec_block_accept_length": meta.get("spec_block_accept_length") or 0.0,
            "spec_num_correct_drafts": meta.get("spec_num_correct_drafts") or 0,
            "spec_num_proposed_drafts": meta.get("spec_num_proposed_drafts") or 0,
            "spec_verify_ct": meta.get("spec_verify_ct") or 0,
            "spec_correct_drafts_histogram": meta.get("spec_correct_drafts_histogram") or [],
            "spec_cap_lens_histogram": meta.get("spec_cap_lens_histogram") or [],
        }

    def openai(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        chat = path == "/v1/chat/completions"
        if body.get("stream"):
            if chat and body.get("return_meta_info"):
                return self._error(
                    "return_meta_info is not supported with streaming. "
                    "Please set stream=false when using return_meta_info=true."
                )
            return self._error("stand-in: streaming is not modelled")
        if int(body.get("n") or 1) != 1:
            return self._error("stand-in: n > 1 is not modelled")
        max_tokens = body.get("max_completion_tokens") if chat else None
        max_tokens = max_tokens or body.get("max_tokens")
        if chat:
            messages = body.get("messages") or []
            if not messages:
                return self._error("Messages cannot be empty.")
            prompt_tokens = 10 + sum(self._prompt_tokens(m.get("content", "")) for m in messages if isinstance(m, dict))
            max_new = int(max_tokens) if max_tokens else self.context_len - prompt_tokens
        else:
            prompt = body.get("prompt")
            if not prompt or (isinstance(prompt, list) and all(not p for p in prompt)):
                return self._error("Prompt cannot be empty")
            if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
                if len(prompt) != 1:
                    return self._error("stand-in: batched prompts are not modelled")
                prompt = prompt[0]
            prompt_tokens = self._prompt_tokens(prompt)
            max_new = int(max_tokens) if max_tokens is not None else 16  # CompletionRequest default
            if max_new <= 0:
                return self._error("max_tokens must be positive")
        rid = uuid.uuid4().hex
        outcome, meta = self._run(
            rid, prompt_tokens=prompt_tokens, max_new_tokens=max_new, stream=False, pattern_index=0
        )
        finish = outcome.finish_reason
        choice: dict[str, Any] = {"index": 0}
        text = self._text(outcome)
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "reasoning_content": None}
        else:
            choice["text"] = text
        choice["logprobs"] = None
        choice["finish_reason"] = finish["type"]
        choice["matched_stop"] = finish.get("matched")
        if body.get("return_token_ids"):
            if chat:
                choice["response_token_ids"] = list(outcome.output_ids)
            else:
                choice["token_ids"] = list(outcome.output_ids)
        if chat and body.get("return_meta_info"):
            choice["meta_info"] = meta
        c = outcome.completion_tokens
        document: dict[str, Any] = {
            "id": rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": body.get("model", "default"),
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + c,
                "completion_tokens": c,
                "prompt_tokens_details": None,
                "reasoning_tokens": 0,
                "completion_tokens_details": None,
            },
            "metadata": {"weight_version": meta["weight_version"], "weight_versions": meta["weight_versions"]},
        }
        details = self._spec_details(meta) if body.get("return_spec_tokens_details") else None
        if details is not None:
            document["sglext"] = {"spec_tokens_details": details}
        return 200, document

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                if body or status != 200:
                    self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, status: int, document: Any) -> None:
                self._send(status, json.dumps(document).encode("utf-8"))

            def _gate(self, method: str) -> str | None:
                path = unquote(urlsplit(self.path).path)
                allowed, status = server._authorized(method, path, self.headers.get("Authorization"))
                if not allowed:
                    self._json(status, {"error": "Unauthorized" if status == 401 else "Forbidden"})
                    return None
                return path

            def do_GET(self) -> None:
                path = self._gate("GET")
                if path is None:
                    return
                if path in ("/health", "/health_generate", "/ready"):
                    self._send(503 if server.starting else 200, b"")
                elif path == "/metrics" and server.enable_metrics:
                    self._send(200, server.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")
                elif path == "/v1/models":
                    self._json(200, {"object": "list", "data": [server.model_card()]})
                elif path.startswith("/v1/models/"):
                    model = path[len("/v1/models/") :]
                    if model != server.served_model_name:
                        self._json(
                            404,
                            {
                                "error": {
                                    "message": f"The model '{model}' does not exist",
                                    "type": "invalid_request_error",
                                    "param": "model",
                                    "code": "model_not_found",
                                }
                            },
                        )
                    else:
                        self._json(200, server.model_card())
                elif path in ("/model_info", "/get_model_info"):
                    self._json(200, server.model_info())
                elif path in ("/server_info", "/get_server_info"):
                    self._json(200, server.server_info())
                elif path in ("/generate", "/v1/completions", "/v1/chat/completions"):
                    self._json(405, {"detail": "Method Not Allowed"})
                else:
                    self._json(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                path = self._gate("POST")
                if path is None:
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if path not in ("/generate", "/v1/completions", "/v1/chat/completions"):
                    get_only = path in _GET_ROUTES or path.startswith("/v1/models/")
                    self._json(405 if get_only else 404, {"detail": "Method Not Allowed" if get_only else "Not Found"})
                    return
                if path != "/generate":
                    media = (self.headers.get("content-type") or "").lower().split(";", 1)[0].strip()
                    if media != "application/json":
                        status, document = server._error(
                            "Unsupported Media Type: Only 'application/json' is allowed", err_type="Bad Request"
                        )
                        self._json(status, document)
                        return
                try:
                    body = json.loads(raw or b"null")
                except ValueError:
                    self._json(
                        400,
                        {
                            "object": "error",
                            "message": "JSON decode error",
                            "type": "Bad Request",
                            "param": None,
                            "code": 400,
                        },
                    )
                    return
                if not isinstance(body, dict):
                    self._json(
                        400,
                        {
                            "object": "error",
                            "message": "body must be a JSON object",
                            "type": "Bad Request",
                            "param": None,
                            "code": 400,
                        },
                    )
                    return
                with server._lock:
                    server.requests.append((path, body))
                status, document = server.generate(body) if path == "/generate" else server.openai(path, body)
                self._json(status, document)

        return Handler
