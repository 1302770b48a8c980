"""An SGLang server behind `--server URL` (SGLang 0.5.23; file references are into its released wheel).

Where SGLang puts its speculative-decoding numbers:

- **Each answer** (the numbers measured here): a finished request's native `meta_info` carries
  `spec_verify_ct` (V, verify steps), `spec_num_correct_drafts` (A, accepted drafts, the bonus
  token excluded), `spec_num_proposed_drafts` (V x drafts per step), `spec_accept_length`
  (completion tokens / V) and `spec_correct_drafts_histogram` (steps by accepted drafts), when
  the server speculates and the request reached a verify step
  (srt/managers/tokenizer_manager.py, `_add_spec_metrics`). Native `POST /generate` returns it
  at the top level; `POST /v1/chat/completions` only with `"return_meta_info": true`, inside
  `choices[0].meta_info` (srt/entrypoints/openai/serving_chat.py); both OpenAI routes add the
  same numbers as `sglext.spec_tokens_details` with `"return_spec_tokens_details": true`
  (srt/entrypoints/openai/protocol.py, SpecTokensDetails). `/v1/completions` has no `meta_info`
  at all, so raw prompts go to `/generate` and chat prompts to `/v1/chat/completions`.
- **`GET /server_info`**: the launch arguments (`speculative_algorithm`, null without
  speculation; `speculative_num_draft_tokens`, the block: drafts per step + 1) and, per data-
  parallel rank, `internal_states[i].avg_spec_accept_length`: a lifetime average in vLLM's
  definition, updated every 40 decode batches (srt/managers/scheduler_components/
  metrics_reporter.py), warm-up included. Shown, never judged. This answer also echoes the
  server's arguments, `api_key` among them: only the fields named here are ever read from it.
- **`GET /metrics`** (only with `--enable-metrics`): `sglang:generation_tokens_total` and
  `sglang:spec_verify_calls_total`, counted when each request finishes
  (srt/observability/metrics_collector.py); their deltas give SGLang's definition pooled over
  everything the server finished meanwhile, a cross-check.

Per position: SGLang counts none, but DFLASH verifies a chain, so vLLM's per-position counts
follow from the histogram (`acceptance.accepted_per_position`); without a histogram, or with a
tree (EAGLE top-k > 1), the result says per-position acceptance is not available.

API keys: SGLang reads `Authorization: Bearer KEY` on every route but `/health*`, `/ready*` and
`/metrics*` (srt/utils/auth.py, decide_request_auth); the client sends it on every request.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.errors import OperationError, UsageError
from dflash_tools.smoke import acceptance
from dflash_tools.smoke.counter_relations import (
    MAX_COUNT,
    ImpossibleCounters,
    KBound,
    check_counts,
    check_sglang_request,
    k_bound,
)
from dflash_tools.smoke.metrics import MetricsError, SpecDecodeCounters, parse_prometheus_text
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
from dflash_tools.smoke.server.http import ServerClient, one_line

ENGINE = Runtime.SGLANG_SERVER.value
GENERATION_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"


@dataclass
class ServerInfo:
    """The fields of `/server_info` read here, and nothing else of it."""

    version: str | None = None
    algorithm: str | None = None
    speculating: bool | None = None  # None: the answer does not say
    num_draft_tokens: int | None = None  # the block: drafts per step + 1
    eagle_topk: int | None = None
    draft_model: str | None = None
    lifetime_accept_length: float | None = None  # internal_states[0].avg_spec_accept_length

    @property
    def drafts_per_step(self) -> int | None:
        return self.num_draft_tokens - 1 if self.num_draft_tokens and self.num_draft_tokens > 1 else None

    def details(self) -> dict[str, Any]:
        return {
            "server_version": self.version,
            "speculative_algorithm": self.algorithm,
            "speculative_num_draft_tokens": self.num_draft_tokens,
            "draft_model": self.draft_model,
        }


def _small_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10**6 else None


def _short_text(value: Any) -> str | None:
    return one_line(value, 200) if isinstance(value, str) else None


def server_info(client: ServerClient) -> ServerInfo | None:
    """`/server_info`'s speculative fields; None when the server has no such route (a proxy)."""
    reply = client.request("/server_info", limit=4 * 1024 * 1024, accept_errors=True)
    if reply.status == 404:
        return None
    if reply.status >= 400:
        # Never show this body: a real one holds the server's arguments, its api_key included.
        raise client.status_error(f"{client.base}/server_info", reply.status, b"")
    document = client.parse_json(reply, values=200_000)
    if not isinstance(document, dict):
        raise OperationError(f"{client.base}/server_info: the answer is not a JSON object", "is this SGLang?")
    info = ServerInfo(
        version=_short_text(document.get("version")),
        algorithm=_short_text(document.get("speculative_algorithm")),
        num_draft_tokens=_small_int(document.get("speculative_num_draft_tokens")),
        eagle_topk=_small_int(document.get("speculative_eagle_topk")),
        draft_model=_short_text(document.get("speculative_draft_model_path")),
    )
    if "speculative_algorithm" in document:
        info.speculating = document["speculative_algorithm"] is not None
    states = document.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        value = states[0].get("avg_spec_accept_length")
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
            info.lifetime_accept_length = float(value)
    return info


def metrics_counters(client: ServerClient, model: str) -> tuple[float, float] | None:
    """(generation tokens, verify steps) of `/metrics`, summed over series; None without the page."""
    text = client.text("/metrics")
    if text is None:
        return None
    totals = {GENERATION_TOKENS: 0.0, VERIFY_CALLS: 0.0}
    try:
        samples = parse_prometheus_text(text)
    except MetricsError as exc:
        raise OperationError(f"{client.base}/metrics: {exc}", "is this an SGLang server's /metrics page?") from None
    for sample in samples:
        if sample.name in totals and sample.labels.get("model_name") in (None, model):
            if not (math.isfinite(sample.value) and sample.value >= 0):
                raise OperationError(f"{client.base}/metrics: {sample.name} is {sample.value!r}", "is SGLang healthy?")
            totals[sample.name] += sample.value
    return totals[GENERATION_TOKENS], totals[VERIFY_CALLS]


# --- requests and answers ------------------------------------------------------------------------


def sglang_payload(options: ServerOptions, model: str, prompt: Any, max_tokens: int) -> tuple[str, dict[str, Any]]:
    protocol = options.resolved_protocol()
    if protocol.chat:
        if not isinstance(prompt, str):
            raise UsageError(
                "--chat needs text prompts, not prompt_token_ids", "drop --chat or use a text prompts file"
            )
        payload: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            **protocol.sampling_fields(),
            "seed": options.seed,
            "chat_template_kwargs": dict(protocol.chat_template_kwargs),
            # protocol.py ChatCompletionRequest: the native meta_info in choices[i], the same
            # numbers as sglext.spec_tokens_details, and the generated ids as response_token_ids.
            "return_meta_info": True,
            "return_spec_tokens_details": True,
            "return_token_ids": True,
        }
        return "/v1/chat/completions", payload
    # /generate refuses unknown sampling_params keys (api/v1/api_types.py, SamplingParams): the
    # seed is `sampling_seed`, the cap `max_new_tokens`.
    sampling: dict[str, Any] = {"max_new_tokens": max_tokens, **protocol.sampling_fields()}
    if not protocol.greedy:
        sampling["sampling_seed"] = options.seed
    key = "text" if isinstance(prompt, str) else "input_ids"
    return "/generate", {key: prompt, "sampling_params": sampling}


def spec_of(numbers: dict[str, Any], where: str, completion_tokens: int, bound: KBound) -> acceptance.RequestAcceptance:
    """One answer's statistics, checked against each other and K (`smoke.counter_relations`): a
    histogram that does not add up to the step count, or counts that cannot all be true, are no
    measurement."""
    steps = count(numbers.get("spec_verify_ct"), f"{where}.spec_verify_ct", at_most=completion_tokens)
    accepted = count(numbers.get("spec_num_correct_drafts", 0), f"{where}.spec_num_correct_drafts", at_most=MAX_COUNT)
    raw_proposed = numbers.get("spec_num_proposed_drafts")
    proposed = (
        None if raw_proposed is None else count(raw_proposed, f"{where}.spec_num_proposed_drafts", at_most=MAX_COUNT)
    )
    try:
        k = check_sglang_request(
            completion_tokens=completion_tokens, steps=steps, accepted=accepted, proposed=proposed, bound=bound
        )
    except ImpossibleCounters as exc:
        raise OperationError(f"{where}: {exc}", "is SGLang healthy? (a proxy may rewrite meta_info)") from None
    raw = numbers.get("spec_correct_drafts_histogram")
    histogram: tuple[int, ...] | None = None
    if isinstance(raw, list) and raw:
        if len(raw) > k + 1:
            raise OperationError(
                f"{where}.spec_correct_drafts_histogram has {len(raw)} entries, more than K + 1 = {k + 1}",
                "is SGLang healthy?",
            )
        histogram = tuple(
            count(v, f"{where}.spec_correct_drafts_histogram[{i}]", at_most=steps) for i, v in enumerate(raw)
        )
        if sum(histogram) != steps or sum(i * n for i, n in enumerate(histogram)) != accepted:
            raise OperationError(
                f"{where}.spec_correct_drafts_histogram does not add up to spec_verify_ct {steps} and "
                f"spec_num_correct_drafts {accepted}",
                "is SGLang healthy?",
            )
    elif raw is not None and not isinstance(raw, list):
        raise OperationError(f"{where}.spec_correct_drafts_histogram is not a list", "is SGLang healthy?")
    reported = numbers.get("spec_accept_length")
    # tokenizer_manager.py: spec_accept_length = completion_tokens / spec_verify_ct.
    if (
        steps
        and isinstance(reported, int | float)
        and not isinstance(reported, bool)
        and not _agrees(reported, completion_tokens / steps)
    ):
        raise OperationError(
            f"{where}.spec_accept_length {reported!r} is not completion tokens {completion_tokens} / "
            f"spec_verify_ct {steps}",
            "is SGLang healthy?",
        )
    return acceptance.RequestAcceptance(completion_tokens, steps, accepted, proposed or 0, histogram)


def _agrees(reported: float, computed: float) -> bool:
    return math.isfinite(reported) and abs(reported - computed) <= 1e-3 * max(1.0, abs(reported))


def read_answer(endpoint: str, document: Any, chat: bool, max_tokens: int, bound: KBound) -> Answer:
    if not isinstance(document, dict):
        raise OperationError(f"{endpoint}: the answer is not a JSON object", "is this an SGLang server?")
    if chat:
        choices, usage = document.get("choices"), document.get("usage")
        if (
            not isinstance(choices, list)
            or not choices
            or not isinstance(choices[0], dict)
            or not isinstance(usage, dict)
        ):
            raise OperationError(f"{endpoint}: the response has no choices[0] / usage", "is this an SGLang server?")
        choice = choices[0]
        tokens = count(usage.get("completion_tokens"), f"{endpoint}: usage.completion_tokens", at_most=max_tokens)
        ids = token_ids(choice.get("response_token_ids"), f"{endpoint}: choices[0].response_token_ids")
        message = choice.get("message")
        text = text_of(message.get("content") if isinstance(message, dict) else None)
        meta, meta_where = choice.get("meta_info"), f"{endpoint}: choices[0].meta_info"
    else:
        meta, meta_where = document.get("meta_info"), f"{endpoint}: meta_info"
        if not isinstance(meta, dict):
            raise OperationError(f"{endpoint}: the answer has no meta_info", "is this an SGLang server's /generate?")
        tokens = count(meta.get("completion_tokens"), f"{meta_where}.completion_tokens", at_most=max_tokens)
        ids = token_ids(document.get("output_ids"), f"{endpoint}: output_ids")
        text = text_of(document.get("text"))
    spec = None
    if isinstance(meta, dict) and "spec_verify_ct" in meta:
        spec = spec_of(meta, meta_where, tokens, bound)
    else:
        extension = document.get("sglext")
        details = extension.get("spec_tokens_details") if isinstance(extension, dict) else None
        if isinstance(details, dict) and "spec_verify_ct" in details:
            spec = spec_of(details, f"{endpoint}: sglext.spec_tokens_details", tokens, bound)
    return Answer(ids, tokens, text, spec)


def complete(
    client: ServerClient, options: ServerOptions, model: str, prompt: Any, max_tokens: int, bound: KBound
) -> Answer:
    path, payload = sglang_payload(options, model, prompt, max_tokens)
    document = client.post_json(path, payload, max_tokens=max_tokens)
    return read_answer(f"{client.base}{path}", document, path != "/generate", max_tokens, bound)


def server_bound(client: ServerClient, options: ServerOptions, info: ServerInfo | None) -> KBound:
    """The K answers are checked against: the server's own (from /server_info) when it says, within
    the draft's K (-d) or the largest K smoke-test serves."""
    bound = k_bound(options.draft_k)
    k = info.drafts_per_step if info else None
    if k is None:
        return bound
    if k > bound.value:
        raise OperationError(
            f"{client.base}/server_info: impossible counters: speculative_num_draft_tokens {k + 1} is {k} drafts per "
            f"step, more than {bound.describe()} (positions <= K)",
            "is this the server of that draft? pass -d with the draft it serves",
        )
    return KBound(k, "the server's (/server_info speculative_num_draft_tokens - 1)")


# --- the measurement -----------------------------------------------------------------------------


@dataclass
class Tally:
    requests: list[acceptance.RequestAcceptance] = field(default_factory=list)

    def add(self, answers: list[Answer]) -> None:
        self.requests += [a.spec for a in answers if a.spec is not None]

    @property
    def steps(self) -> int:
        return sum(r.verify_steps for r in self.requests)


def per_position(tally: Tally, info: ServerInfo | None) -> tuple[tuple[int, ...], dict[str, Any]]:
    source = "spec_correct_drafts_histogram of each answer (drafts accepted per verify step)"
    measured = [r for r in tally.requests if r.verify_steps]
    k = info.drafts_per_step if info else None
    if k is None:
        per_step = {r.proposed_drafts // r.verify_steps for r in measured if r.proposed_drafts % r.verify_steps == 0}
        k = per_step.pop() if len(per_step) == 1 else None
    why = ""
    if info is not None and info.eagle_topk and info.eagle_topk > 1:
        why = f"the server verifies a tree (speculative_eagle_topk {info.eagle_topk}), not a chain"
    elif any(r.histogram is None for r in measured):
        why = "the server reports no spec_correct_drafts_histogram"
    elif k is None:
        why = "the drafts per step are unknown (no /server_info, and spec_num_proposed_drafts does not say)"
    if why or k is None or not measured:
        return (), {
            "available": False,
            "source": source,
            "note": f"per-position acceptance: not available ({why or 'no verify step'})",
        }
    total = [0] * (k + 1)
    for request in measured:
        for accepted, steps in enumerate(request.histogram or ()):
            total[min(accepted, k)] += steps
    return tuple(acceptance.accepted_per_position(total, k)), {"available": True, "source": source, "note": ""}


def run_sglang(client: ServerClient, options: ServerOptions, detected: Detected) -> contract.SmokeResult:
    """Measure an SGLang server (see the module docstring); the same errors as `server.run_server`."""
    info = server_info(client)
    if info is not None and info.speculating is False:
        raise without_speculation(client, "/server_info: speculative_algorithm is null")
    model = pick_model(client, detected, options.model)
    bound = server_bound(client, options, info)
    run_all(
        client,
        options.warmup(),
        lambda p: complete(client, options, model, p, min(64, options.max_tokens), bound),
        options.concurrency,
    )
    before = metrics_counters(client, model)
    started = time.perf_counter()
    answers: list[Answer] = run_all(
        client,
        list(options.prompts),
        lambda p: complete(client, options, model, p, options.max_tokens, bound),
        options.concurrency,
    )
    elapsed = time.perf_counter() - started
    after = metrics_counters(client, model)
    tally = Tally()
    tally.add(answers)
    if not tally.requests:
        if info is None:
            raise without_speculation(
                client, "no answer carried speculative-decoding statistics: no spec_* keys in meta_info"
            )
        raise OperationError(
            f"{client.base}: no answer carried speculative-decoding statistics although /server_info names "
            f"{info.algorithm}",
            "is a proxy dropping meta_info? or did every request stop after its first token (--max-tokens 1)?",
        )
    positions, position_facts = per_position(tally, info)
    counters = SpecDecodeCounters(
        num_drafts=tally.steps,
        num_draft_tokens=sum(r.proposed_drafts for r in tally.requests),
        num_accepted_tokens=sum(r.accepted_drafts for r in tally.requests),
        accepted_per_position=positions,
    )
    try:  # each answer held; their totals hold too (the same relations, `smoke.counter_relations`)
        check_counts(
            steps=counters.num_drafts,
            proposed=None,  # per request where reported: an answer without it counts as 0 here
            accepted=counters.num_accepted_tokens,
            per_position=positions,
            bound=k_bound(options.draft_k),
        )
    except ImpossibleCounters as exc:
        raise OperationError(f"{client.base}: {exc}", "is SGLang healthy?") from None
    details: dict[str, Any] = {
        "server": client.base,
        "server_engine": "sglang",
        "detected_by": detected.evidence,
        "model": model,
        "concurrency": options.concurrency,
        **(info.details() if info else {}),
        "requests_without_verify_step": len(answers) - sum(1 for a in answers if a.spec and a.spec.verify_steps),
    }
    if info is not None and info.lifetime_accept_length is not None:
        details["lifetime_avg_spec_accept_length"] = {
            "value": info.lifetime_accept_length,
            "note": "/server_info internal_states[0]: vLLM's definition over the server's lifetime (warm-up included), "
            "updated every 40 decode batches; shown, not judged",
        }
    if before is not None and after is not None:
        tokens, steps = after[0] - before[0], after[1] - before[1]
        details["metrics_cross_check"] = {
            "generation_tokens": tokens,
            "spec_verify_calls": steps,
            "sglang_accept_length": tokens / steps if steps > 0 else None,
            "note": "/metrics deltas: SGLang's definition pooled over every request the server finished meanwhile "
            "(other clients' too, and requests that never reached a verify step)",
        }
    source = "each answer's meta_info (spec_verify_ct, spec_num_correct_drafts, completion_tokens)"
    return assemble(
        options,
        engine=ENGINE,
        counters=counters,
        answers=answers,
        elapsed=elapsed,
        lengths=acceptance.from_requests(tally.requests, source),
        per_position=position_facts,
        details=details,
    )
