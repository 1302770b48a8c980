"""What every server measurement shares: its options, the answers, the result it builds.

`ServerOptions` is what `smoke-test --server` is asked to do; `assemble` turns the answers and the
speculative-decoding numbers of either engine (`smoke.server.vllm`, `smoke.server.sglang`) into one
contract result (`dflash_tools.smoke_contract`). `count` and `token_ids` read the numbers of an
answer strictly: a count that is not a JSON integer in its range, or token ids that are not 32-bit
integers, is an OperationError naming the key, never a result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

from dflash_tools import smoke_contract as contract
from dflash_tools.errors import DflashToolsError, OperationError, UsageError
from dflash_tools.smoke import acceptance
from dflash_tools.smoke.metrics import SpecDecodeCounters
from dflash_tools.smoke.server.http import ServerClient, one_line
from dflash_tools.smoke.workloads.protocols import MeasurementProtocol, greedy

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
    # The sampling protocol (smoke.workloads.protocols); None: greedy with `chat` and `enable_thinking` above.
    protocol: MeasurementProtocol | None = None
    # Warm-up prompts (the protocol's `warmup` requests, not measured); None: the first prompts again.
    warmup_prompts: list[str] | list[list[int]] | None = None
    # Facts about where the prompts come from (smoke.workloads.datasets `DatasetPrompts.to_dict()`), reported as given.
    dataset: dict[str, Any] | None = None
    # The K of the draft named with -d: the most draft positions the server may report
    # (`smoke.counter_relations.k_bound`; None: the largest K smoke-test serves).
    draft_k: int | None = None

    def resolved_protocol(self) -> MeasurementProtocol:
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
