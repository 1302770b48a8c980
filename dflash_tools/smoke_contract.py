"""The request/result contract between `smoke-test` and the engine that runs in a child process.

`dflash-tools smoke-test` never runs a model in its own process. For each draft it writes one
JSON *request* to a file, starts `python -m dflash_tools.smoke.child --request REQ --result RES`
(stdout and stderr go to a log file), waits with a wall-clock timeout, and reads one JSON
*result* back. The child dispatches on `request["engine"]`:

- `"vllm"`: `dflash_tools.smoke.vllm_engine.run_request` (vLLM's offline `LLM` API).
- `"torch"`: `dflash_tools.reference_engine.run_request` (the plain-PyTorch reference implementation).

Both engines take the same request and return the same result. Keys may be added (optional, with
the defaults stated here); existing keys are never renamed or change meaning. Both documents carry
`schema_version` = 1.

Request (`SmokeRequest`)
------------------------
schema_version          1
engine                  "vllm" | "torch"
target                  target model: Hub repo id or local folder
draft                   draft checkpoint: Hub repo id or local folder (`example:NAME` resolved
                        to its folder by the parent)
algorithm               "dflash" | "dflash2" | "dspark" (the draft's algorithm)
num_speculative_tokens  K: draft tokens per step
block_size              B: the trained block size
sample_from_anchor      the layout to SERVE: true anchor-first (K query positions, slot j predicts
                        anchor + j + 1), false bonus-anchor (K + 1 query positions, slot 0 is the
                        last verified token). Usually the declared layout; `--compare-layouts` also
                        sends the flipped one.
num_query_tokens        Q: query positions per request per step (K if sample_from_anchor else
                        K + 1); engines must run exactly this many.
prompts                 prompt strings (raw text, or user messages when `chat` is true)
prompt_token_ids        pre-tokenized prompts, one list per prompt, used instead of `prompts`
                        when not null
max_tokens              new tokens per prompt
baseline                also run the target alone (no speculation) on the same prompts: the
                        token-identity check and the speed ratio
seed                    sampling seed (decoding is greedy; the seed only pins the rest)
dtype                   "bfloat16", "float16", "float32" or null (engine default)
device                  e.g. "cuda", "cuda:1", "cpu", or null (engine default)
engine_args             engine-specific keyword arguments (vLLM: `LLM(**engine_args)`, e.g.
                        tensor_parallel_size, max_model_len, enforce_eager)
env                     environment the parent already applied to the child; informational
revision                Hub revision of the draft, or null

Optional request keys (defaults in brackets):
chat                    [false] wrap each prompt as a user message with the target's chat
                        template before generating
enable_thinking         [false] passed to the chat template (thinking-mode prompts lower the
                        acceptance of non-thinking drafts)
speculative_config      [{}] vLLM only: the full `speculative_config` dict to pass to `LLM`
draft_config_overrides  [{}] dotted config keys -> values the engine must see in the draft's
                        config.json (vLLM: written to an overlay folder next to the log, with
                        links to the weights; the checkpoint itself is never modified). This is
                        how a layout is served that the file does not state where vLLM reads it.
plugin_required         [false] vLLM only: the dflash-tools plugin must be active (anchor-first
                        drafts on stock vLLM 0.33.0); the engine fails the run when it is not
label                   [draft] a short name for logs
target_revision         [null] Hub revision of the target
prefix_caching_check    [false] vLLM only: after the measured pass, generate again in the same
                        engine from each prompt extended by the first half of its output (so the
                        prompt reuses KV blocks cached while speculating), then run both passes
                        in a second engine with prefix caching switched the other way; the
                        outputs come back in `prefix_caching`
chat_template_kwargs    [{}] more switches for the chat template (the protocol's, e.g.
                        `{"reasoning_effort": "high"}`); `enable_thinking` above wins for its key
timing                  [one repetition] how often the timed generation repeats (docs/smoke-test.md,
                        "How sure a measurement is"): {"min_repeats": int >= 1, "max_repeats": int
                        >= min_repeats, "min_timed_s": float >= 0, "budget_s": float | null}: repeat
                        the same prompts until there are min_repeats windows and they add up to
                        min_timed_s seconds, at most max_repeats times, and start no repetition once
                        the timed windows add up to budget_s (null: no budget). The target alone
                        (`baseline`) repeats the same way. Counters and outputs are the first
                        repetition's; the timed figures the median repetition's

Result (`SmokeResult`)
----------------------
schema_version          1
ok                      true when the run completed and the numbers below are valid
error                   one-line message when ok is false, else null
engine                  "vllm" | "torch"; a server measurement: "vllm-server" | "sglang-server"
num_drafts              draft steps (vLLM `spec_decode_num_drafts`): verify steps with drafts,
                        counted per request
num_draft_tokens        proposed tokens (`spec_decode_num_draft_tokens`)
num_accepted_tokens     accepted draft tokens, the bonus token excluded
accepted_per_position   length K: how often draft position i was accepted
acceptance_rate_per_position  length K: accepted_per_position[i] / num_drafts
mean_acceptance_length  1 + num_accepted_tokens / num_drafts (vLLM's definition; 0 when no drafts)
output_tokens           generated tokens, all prompts
elapsed_s               wall time of generation (model loading excluded)
tokens_per_second       output_tokens / elapsed_s
outputs                 generated token ids, one list per prompt (greedy)
baseline                null, or {outputs, output_tokens, elapsed_s, tokens_per_second} of the
                        target alone when the request asked for it
token_identical         whether `outputs` equal `baseline.outputs` (null without baseline)
query_positions_per_step  observed Q values: the torch engine one per draft step, the vLLM engine
                        one per speculator instance (recorded by the plugin); null if unobserved
log_path                the child's log file, when known

Optional result keys:
engine_details          free-form facts about the run: vLLM version, runner ("v1"/"v2"),
                        speculator class, plugin status and markers, overlay folder, device
output_texts            decoded outputs, one string per prompt
draft_time_s            seconds of elapsed_s spent drafting (the draft's forwards and context
                        updates; vLLM: inside the drafter's `propose`), null when not measured;
                        the K sweep's prediction needs it
prefix_caching          with `prefix_caching_check`: {"measured": PASS, "other": PASS,
                        "continuation_prefix_tokens": [n per prompt]} where PASS is
                        {"enable_prefix_caching": bool, "outputs": [[ids]] (the prompts),
                        "continuation_outputs": [[ids]] (the prompts + the first n tokens of the
                        measured engine's outputs), "prefix_cache_hits": int | null,
                        "prefix_cache_queries": int | null (vLLM's counters over the
                        continuation pass), "continuation_num_drafts": int | null,
                        "continuation_accepted_per_position": [int] | null (its speculative-
                        decoding counters over that pass)}; or {"error": message} when the check
                        could not run
timing                  with more than one repetition: {"repeats": n, "elapsed_s": [n floats],
                        "output_tokens": [n ints], "draft_time_s": [n floats] | null, "median":
                        index}; elapsed_s, tokens_per_second and draft_time_s above are those of
                        repetition `median` (the median tokens per second; the lower middle one
                        for an even n). `baseline.timing` the same for the target alone (without
                        draft_time_s)

Optional result keys of a server measurement (`smoke-test --server`; engine "vllm-server" or
"sglang-server"; docs/smoke-test.md, "Servers: vLLM and SGLang"):
acceptance_lengths      both definitions side by side: {"vllm": DEF, "sglang": DEF} where DEF is
                        {"name": "vLLM mean acceptance length (1 + accepted / drafts)" or
                        "SGLang accept length (completion tokens / verify steps)", "formula",
                        "pooled": float | null (over all requests), "mean_per_request": float |
                        null (the unweighted mean of per-request values, where the server reports
                        per request), "source": where the numbers come from}.
                        `mean_acceptance_length` stays vLLM's definition, pooled: the one the
                        floor is judged in
per_position            {"available": bool, "source", "note"}: where `accepted_per_position` comes
                        from (vLLM's per-position counters, SGLang's histogram of accepted drafts
                        per step), or why it is not available (then `accepted_per_position` is [])
protocol                the sampling protocol of the run (smoke.workloads.protocols `MeasurementProtocol.to_dict()`:
                        name, summary, temperature, top_p, top_k, chat, chat_template_kwargs, ...)
dataset                 where the prompts came from (smoke.workloads.datasets `DatasetPrompts.to_dict()`),
                        when a dataset supplied them
`engine_details` of a server measurement also holds: server, server_engine ("vllm" | "sglang"),
detected_by, model, concurrency; for SGLang server_version, speculative_algorithm,
speculative_num_draft_tokens, draft_model, requests_without_verify_step, and where available
lifetime_avg_spec_accept_length and metrics_cross_check (each {value or numbers, "note"})
"""

from __future__ import annotations

import math
import sys
from typing import Any, NotRequired, TypedDict

SCHEMA_VERSION = 1
ENGINES = ("vllm", "torch")
# The most timed repetitions a request may ask for (`timing`).
MAX_REPEATS = 1000
# Progress lines: the child prints them to its stderr (the log); the launcher shows them live.
PROGRESS_PREFIX = "[dflash-tools] "


def progress(message: str) -> None:
    """A line the launcher shows as live progress (the log is this process's stderr)."""
    print(f"{PROGRESS_PREFIX}{message}", file=sys.stderr, flush=True)


class SmokeRequest(TypedDict):
    schema_version: int
    engine: str
    target: str
    draft: str
    algorithm: str
    num_speculative_tokens: int
    block_size: int
    sample_from_anchor: bool
    num_query_tokens: int
    prompts: list[str]
    prompt_token_ids: list[list[int]] | None
    max_tokens: int
    baseline: bool
    seed: int
    dtype: str | None
    device: str | None
    engine_args: dict[str, Any]
    env: dict[str, str]
    revision: str | None
    chat: NotRequired[bool]
    enable_thinking: NotRequired[bool]
    speculative_config: NotRequired[dict[str, Any]]
    draft_config_overrides: NotRequired[dict[str, Any]]
    plugin_required: NotRequired[bool]
    label: NotRequired[str]
    target_revision: NotRequired[str | None]
    prefix_caching_check: NotRequired[bool]
    chat_template_kwargs: NotRequired[dict[str, Any]]
    timing: NotRequired[dict[str, Any]]


class BaselineResult(TypedDict):
    outputs: list[list[int]]
    output_tokens: int
    elapsed_s: float
    tokens_per_second: float
    timing: NotRequired[dict[str, Any]]


class SmokeResult(TypedDict):
    schema_version: int
    ok: bool
    error: str | None
    engine: str
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: list[int]
    acceptance_rate_per_position: list[float]
    mean_acceptance_length: float
    output_tokens: int
    elapsed_s: float
    tokens_per_second: float
    outputs: list[list[int]]
    baseline: BaselineResult | None
    token_identical: bool | None
    query_positions_per_step: list[int] | None
    log_path: str | None
    engine_details: NotRequired[dict[str, Any]]
    output_texts: NotRequired[list[str]]
    draft_time_s: NotRequired[float | None]
    prefix_caching: NotRequired[dict[str, Any]]
    acceptance_lengths: NotRequired[dict[str, Any]]
    per_position: NotRequired[dict[str, Any]]
    protocol: NotRequired[dict[str, Any]]
    dataset: NotRequired[dict[str, Any]]
    timing: NotRequired[dict[str, Any]]


class ContractError(ValueError):
    """A request or result document that breaks the contract; the message names the key."""


_REQUEST_TYPES: dict[str, tuple[type, ...]] = {
    "schema_version": (int,),
    "engine": (str,),
    "target": (str,),
    "draft": (str,),
    "algorithm": (str,),
    "num_speculative_tokens": (int,),
    "block_size": (int,),
    "sample_from_anchor": (bool,),
    "num_query_tokens": (int,),
    "prompts": (list,),
    "prompt_token_ids": (list, type(None)),
    "max_tokens": (int,),
    "baseline": (bool,),
    "seed": (int,),
    "dtype": (str, type(None)),
    "device": (str, type(None)),
    "engine_args": (dict,),
    "env": (dict,),
    "revision": (str, type(None)),
}
_REQUEST_OPTIONAL: dict[str, tuple[type, ...]] = {
    "chat": (bool,),
    "enable_thinking": (bool,),
    "speculative_config": (dict,),
    "draft_config_overrides": (dict,),
    "plugin_required": (bool,),
    "label": (str,),
    "target_revision": (str, type(None)),
    "prefix_caching_check": (bool,),
    "chat_template_kwargs": (dict,),
    "timing": (dict,),
}
_RESULT_TYPES: dict[str, tuple[type, ...]] = {
    "schema_version": (int,),
    "ok": (bool,),
    "error": (str, type(None)),
    "engine": (str,),
    "num_drafts": (int,),
    "num_draft_tokens": (int,),
    "num_accepted_tokens": (int,),
    "accepted_per_position": (list,),
    "acceptance_rate_per_position": (list,),
    "mean_acceptance_length": (int, float),
    "output_tokens": (int,),
    "elapsed_s": (int, float),
    "tokens_per_second": (int, float),
    "outputs": (list,),
    "baseline": (dict, type(None)),
    "token_identical": (bool, type(None)),
    "query_positions_per_step": (list, type(None)),
    "log_path": (str, type(None)),
}
_RESULT_OPTIONAL: dict[str, tuple[type, ...]] = {
    "engine_details": (dict,),
    "output_texts": (list,),
    "draft_time_s": (int, float, type(None)),
    "prefix_caching": (dict,),
    "acceptance_lengths": (dict,),
    "per_position": (dict,),
    "protocol": (dict,),
    "dataset": (dict,),
    "timing": (dict,),
}


def _type_name(types: tuple[type, ...]) -> str:
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def _check_types(
    document: Any, what: str, required: dict[str, tuple[type, ...]], optional: dict[str, tuple[type, ...]]
) -> None:
    if not isinstance(document, dict):
        raise ContractError(f"{what} is not a JSON object")
    for key, types in required.items():
        if key not in document:
            raise ContractError(f"{what}: missing key {key!r}")
        _check_value(document, key, types, what)
    for key, types in optional.items():
        if key in document:
            _check_value(document, key, types, what)


def _check_value(document: dict[str, Any], key: str, types: tuple[type, ...], what: str) -> None:
    value = document[key]
    # bool is an int in Python; JSON true is not a count.
    if isinstance(value, bool) and bool not in types:
        raise ContractError(f"{what}: {key} is {value!r}, expected {_type_name(types)}")
    if not isinstance(value, types):
        raise ContractError(f"{what}: {key} is {type(value).__name__}, expected {_type_name(types)}")


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def validate_request(document: Any) -> SmokeRequest:
    """Check a request document; raise ContractError naming the first bad key."""
    _check_types(document, "request", _REQUEST_TYPES, _REQUEST_OPTIONAL)
    if document["schema_version"] != SCHEMA_VERSION:
        raise ContractError(f"request: schema_version {document['schema_version']} is not {SCHEMA_VERSION}")
    if document["engine"] not in ENGINES:
        raise ContractError(f"request: engine {document['engine']!r} is not one of {', '.join(ENGINES)}")
    for key in ("num_speculative_tokens", "block_size", "num_query_tokens", "max_tokens"):
        if document[key] < 1:
            raise ContractError(f"request: {key} is {document[key]}, must be >= 1")
    k, sfa = document["num_speculative_tokens"], document["sample_from_anchor"]
    if document["num_query_tokens"] != (k if sfa else k + 1):
        raise ContractError(
            f"request: num_query_tokens {document['num_query_tokens']} does not match K {k} with "
            f"sample_from_anchor={str(sfa).lower()}"
        )
    if not all(isinstance(p, str) for p in document["prompts"]):
        raise ContractError("request: prompts must be a list of strings")
    ids = document["prompt_token_ids"]
    if ids is not None and not (isinstance(ids, list) and all(_int_list(row) for row in ids)):
        raise ContractError("request: prompt_token_ids must be null or a list of lists of ints")
    if not document["prompts"] and not ids:
        raise ContractError("request: no prompts")
    if "timing" in document:
        repetition_policy(document)
    return document


def validate_result(document: Any) -> SmokeResult:
    """Check a result document; raise ContractError naming the first bad key."""
    _check_types(document, "result", _RESULT_TYPES, _RESULT_OPTIONAL)
    if document["schema_version"] != SCHEMA_VERSION:
        raise ContractError(f"result: schema_version {document['schema_version']} is not {SCHEMA_VERSION}")
    for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "output_tokens"):
        if document[key] < 0:
            raise ContractError(f"result: {key} is {document[key]}, must be >= 0")
    if not _int_list(document["accepted_per_position"]):
        raise ContractError("result: accepted_per_position must be a list of ints")
    rates = document["acceptance_rate_per_position"]
    if not all(isinstance(r, int | float) and not isinstance(r, bool) and math.isfinite(r) for r in rates):
        raise ContractError("result: acceptance_rate_per_position must be a list of finite numbers")
    if not all(_int_list(row) for row in document["outputs"]):
        raise ContractError("result: outputs must be a list of lists of token ids")
    baseline = document["baseline"]
    if baseline is not None:
        _check_types(
            baseline,
            "result.baseline",
            {"outputs": (list,), "output_tokens": (int,), "elapsed_s": (int, float), "tokens_per_second": (int, float)},
            {},
        )
    positions = document["query_positions_per_step"]
    if positions is not None and not _int_list(positions):
        raise ContractError("result: query_positions_per_step must be null or a list of ints")
    draft_time = document.get("draft_time_s")
    if draft_time is not None and not (math.isfinite(draft_time) and draft_time >= 0):
        raise ContractError(f"result: draft_time_s is {draft_time!r}, must be a finite number >= 0")
    _check_timing(document.get("timing"), "result.timing", draft=True)
    if baseline is not None:
        _check_timing(baseline.get("timing"), "result.baseline.timing", draft=False)
    prefix = document.get("prefix_caching")
    if prefix is not None and "error" not in prefix:
        for role in ("measured", "other"):
            run = prefix.get(role)
            if not isinstance(run, dict) or not all(
                isinstance(run.get(key), list) and all(_int_list(row) for row in run[key])
                for key in ("outputs", "continuation_outputs")
            ):
                raise ContractError(f"result: prefix_caching.{role} must hold outputs and continuation_outputs")
    return document


def failed_result(
    engine: str, error: str, *, log_path: str | None = None, details: dict[str, Any] | None = None
) -> SmokeResult:
    """A result for a run that produced no numbers."""
    result: SmokeResult = {
        "schema_version": SCHEMA_VERSION,
        "ok": False,
        "error": error,
        "engine": engine,
        "num_drafts": 0,
        "num_draft_tokens": 0,
        "num_accepted_tokens": 0,
        "accepted_per_position": [],
        "acceptance_rate_per_position": [],
        "mean_acceptance_length": 0.0,
        "output_tokens": 0,
        "elapsed_s": 0.0,
        "tokens_per_second": 0.0,
        "outputs": [],
        "baseline": None,
        "token_identical": None,
        "query_positions_per_step": None,
        "log_path": log_path,
    }
    if details:
        result["engine_details"] = details
    return result


def rates(num_drafts: int, accepted_per_position: list[int]) -> list[float]:
    return [count / num_drafts if num_drafts else 0.0 for count in accepted_per_position]


def mean_acceptance_length(num_drafts: int, num_accepted_tokens: int) -> float:
    return 1.0 + num_accepted_tokens / num_drafts if num_drafts else 0.0


def tokens_per_second(tokens: int, elapsed_s: float) -> float:
    return tokens / elapsed_s if elapsed_s > 0 else 0.0


# --- timed repetitions -------------------------------------------------------------------------


def _finite(value: Any, low: float = 0.0) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= low


def repetition_policy(request: SmokeRequest | dict[str, Any]) -> tuple[int, int, float, float | None]:
    """(min_repeats, max_repeats, min_timed_s, budget_s) of a request; one repetition without `timing`."""
    timing = request.get("timing")
    if timing is None:
        return 1, 1, 0.0, None
    if not isinstance(timing, dict):
        raise ContractError("request: timing is not an object")
    low, high = timing.get("min_repeats", 1), timing.get("max_repeats", 1)
    if not (_int_list([low, high]) and 1 <= low <= high <= MAX_REPEATS):
        raise ContractError(f"request: timing repeats {low!r}..{high!r}, expected 1 <= min <= max <= {MAX_REPEATS}")
    seconds, budget = timing.get("min_timed_s", 0.0), timing.get("budget_s")
    if not _finite(seconds) or (budget is not None and not _finite(budget)):
        raise ContractError("request: timing min_timed_s and budget_s must be finite numbers >= 0")
    return low, high, float(seconds), None if budget is None else float(budget)


def more_repetitions(request: SmokeRequest, windows: list[float], spent: float | None = None) -> bool:
    """Whether a timed run repeats once more, given the windows (seconds) timed so far; `spent`:
    the seconds the budget counts (default: those windows; with the target alone timed in
    between, both)."""
    low, high, seconds, budget = repetition_policy(request)
    done, total = len(windows), sum(windows)
    if done >= high or (budget is not None and done >= 1 and (total if spent is None else spent) >= budget):
        return False
    return done < low or total < seconds


def median_index(tokens: list[int], elapsed: list[float]) -> int:
    """The repetition with the median tokens per second (the lower middle one for an even count)."""
    order = sorted(range(len(elapsed)), key=lambda i: tokens_per_second(tokens[i], elapsed[i]))
    return order[(len(order) - 1) // 2]


def _check_timing(timing: Any, what: str, *, draft: bool) -> None:
    if timing is None:
        return
    if not isinstance(timing, dict):
        raise ContractError(f"{what} is not an object")
    repeats = timing.get("repeats")
    elapsed, tokens = timing.get("elapsed_s"), timing.get("output_tokens")
    if not (isinstance(repeats, int) and not isinstance(repeats, bool) and 1 <= repeats <= MAX_REPEATS):
        raise ContractError(f"{what}.repeats is {repeats!r}, expected 1..{MAX_REPEATS}")
    if not (isinstance(elapsed, list) and len(elapsed) == repeats and all(_finite(v) for v in elapsed)):
        raise ContractError(f"{what}.elapsed_s must hold {repeats} finite numbers >= 0")
    if not (isinstance(tokens, list) and _int_list(tokens) and len(tokens) == repeats and min(tokens) >= 0):
        raise ContractError(f"{what}.output_tokens must hold {repeats} counts")
    drafting = timing.get("draft_time_s") if draft else None
    if drafting is not None and not (
        isinstance(drafting, list) and len(drafting) == repeats and all(_finite(v) for v in drafting)
    ):
        raise ContractError(f"{what}.draft_time_s must be null or hold {repeats} finite numbers >= 0")
    index = timing.get("median", 0)
    if not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < repeats):
        raise ContractError(f"{what}.median is {index!r}, expected an index below {repeats}")


def timing_block(elapsed: list[float], tokens: list[int], draft_s: list[float] | None = None) -> dict[str, Any]:
    """A result's (or baseline's) `timing` from its repetitions."""
    block: dict[str, Any] = {
        "repeats": len(elapsed),
        "elapsed_s": list(elapsed),
        "output_tokens": list(tokens),
        "median": median_index(tokens, elapsed),
    }
    if draft_s is not None:
        block["draft_time_s"] = list(draft_s)
    return block
