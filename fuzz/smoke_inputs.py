"""Fuzz inputs for smoke-test's readers (the campaign's `counters`, `metrics`, `jsonl`, `protocol` targets).

Each generator takes the campaign's seeded `random.Random` and returns (run, payload): `run()` feeds
one input to the reader and returns an outcome word, or raises `Broken` when a promise is broken:

- `counters`: counts of one run or one SGLang answer, either honest (simulated from verify steps:
  each accepts 0..K drafts and commits them + 1 token, the answer cut at its cap, so up to K are
  dropped) or tampered with. `smoke.counter_relations` must accept every honest set, and whatever
  it accepts must give a mean acceptance length in [1, 1 + K] and per-position rates in [0, 1]
  that do not rise; anything else must be one `ImpossibleCounters` line.
- `metrics`: a vLLM `/metrics` page with hostile labels, values and lines: counters or
  `MetricsError` (one line), never another exception, never more positions than K.
- `jsonl`: dataset rows holding line separators, lone surrogates, BOMs and CRs: the cache line the
  tool writes reads back as the same turns; mutated bytes read as rows or one UsageError.
- `protocol`: protocol documents with fields replaced by hostile values: a protocol whose counts lie
  in the options' ranges, or one UsageError line.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from dflash_tools.errors import UsageError
from dflash_tools.smoke import counter_relations as relations
from dflash_tools.smoke.limits import BOUNDS, MAX_K
from dflash_tools.smoke.metrics import MetricsError, counters_from_prometheus
from dflash_tools.smoke.workloads.datasets import cache_line, dataset_spec, json_lines
from dflash_tools.smoke.workloads.protocols import parse_protocol

Run = Callable[[], str]


class Broken(Exception):
    """A promise of a smoke-test reader broken by one input."""


def _one_line(text: str, what: str) -> None:
    if "\n" in text or not text:
        raise Broken(f"{what}: not one line: {text!r:.300}")


# --- counters -------------------------------------------------------------------------------------


def honest_run(rng: random.Random, k: int) -> dict[str, Any]:
    """A request as SGLang counts it (and vLLM, per step): steps, drafts, per-position counts, and
    the completion tokens left after the cap cut the last step."""
    steps = rng.randint(1, 40)
    accepted_by_step = [rng.choice([0, k, rng.randint(0, k)]) for _ in range(steps)]
    produced = 1 + steps + sum(accepted_by_step)
    cut = rng.randint(0, min(accepted_by_step[-1], k)) if rng.random() < 0.5 else 0
    per_position = [sum(1 for a in accepted_by_step if a > i) for i in range(k)]
    return {
        "steps": steps,
        "proposed": steps * k,
        "accepted": sum(accepted_by_step),
        "per_position": per_position,
        "completion_tokens": produced - cut,
    }


def counters(rng: random.Random) -> tuple[Run, dict[str, bytes]]:
    k = rng.choice([1, 2, 4, 7, 8, 15, 16, rng.randint(1, MAX_K)])
    run = honest_run(rng, k)
    honest = rng.random() < 0.4
    if not honest:
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(["steps", "proposed", "accepted", "completion_tokens", "per_position"])
            if key == "per_position":
                if run["per_position"]:
                    index = rng.randrange(len(run["per_position"]))
                    run["per_position"][index] = max(0, run["per_position"][index] + rng.choice([-3, -1, 1, 5, 10**6]))
                if rng.random() < 0.2:
                    run["per_position"] = run["per_position"] + [0] * rng.randint(1, 300)
            else:
                run[key] = max(0, run[key] + rng.choice([-5, -1, 1, 3, k, 1000, 2**40]))
    draft_k = rng.choice([None, k, max(1, k - 1), MAX_K])
    payload = {"counts.json": json.dumps({**run, "k": k, "draft_k": draft_k, "honest": honest}).encode()}
    return lambda: _run_counters(run, k, draft_k, honest), payload


def _run_counters(run: dict[str, Any], k: int, draft_k: int | None, honest: bool) -> str:
    bound = relations.k_bound(draft_k if draft_k is not None and draft_k >= k else None)
    outcomes = []
    for form in ("totals", "sglang"):
        try:
            if form == "totals":
                relations.check_counts(
                    steps=run["steps"],
                    proposed=run["proposed"],
                    accepted=run["accepted"],
                    per_position=run["per_position"],
                    bound=bound,
                )
            else:
                relations.check_sglang_request(
                    completion_tokens=run["completion_tokens"],
                    steps=run["steps"],
                    accepted=run["accepted"],
                    proposed=run["proposed"],
                    bound=bound,
                )
        except relations.ImpossibleCounters as exc:
            _one_line(str(exc), "counters")
            if honest:
                raise Broken(f"honest counts refused: {exc} {run}") from None
            outcomes.append(f"{form} refused ({exc.relation})")
            continue
        steps = run["steps"]
        if steps and form == "totals":
            mean = 1 + run["accepted"] / steps
            rates = [count / steps for count in run["per_position"]]
            positions = len(run["per_position"]) or bound.value
            if not 1 <= mean <= 1 + positions:
                raise Broken(f"accepted counts give a mean acceptance length of {mean}: {run}")
            if any(not 0 <= r <= 1 for r in rates) or any(b > a for a, b in zip(rates, rates[1:], strict=False)):
                raise Broken(f"accepted counts give rates {rates[:10]}: {run}")
        outcomes.append(f"{form} held")
    return ", ".join(outcomes)


# --- /metrics pages ---------------------------------------------------------------------------------

_LABELS = ["0", "1", "3", "255", "256", "999", "10000000", "1" * 5000, "²", "٣", "-1", "+1", "0x1", " 1", "1.0", ""]
_VALUES = ["0", "1", "12", "3.5", "1e3", "NaN", "+Inf", "-Inf", "-4", "9" * 400, "1e400", "2e16", "abc", ""]


def metrics(rng: random.Random) -> tuple[Run, dict[str, bytes]]:
    lines = []
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        if rng.random() < 0.9:
            lines.append(f'vllm:spec_decode_{name}_total{{model_name="m"}} {rng.choice(_VALUES[:4])}')
    for _ in range(rng.randint(0, 6)):
        lines.append(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",position="{rng.choice(_LABELS)}"}} '
            f"{rng.choice(_VALUES)}"
        )
    for _ in range(rng.randint(0, 3)):
        junk = rng.choice(['vllm:x{a="\\u2028"} 1', "vllm_spec_decode_num_drafts_total 5", "#", "{}", "x{", "\x00"])
        lines.insert(rng.randint(0, len(lines)), junk)
    separator = rng.choice(["\n", "\r\n", "\n\u2028", "\n\x85"])
    text = separator.join(lines)
    draft_k = rng.choice([None, 4, 7])
    return lambda: _run_metrics(text, draft_k), {"metrics.txt": text.encode("utf-8", "surrogatepass")}


def _run_metrics(text: str, draft_k: int | None) -> str:
    bound = relations.k_bound(draft_k)
    try:
        found = counters_from_prometheus(text, model_name="m", bound=bound)
    except MetricsError as exc:
        _one_line(str(exc), "metrics")
        return "refused"
    if found is None:
        return "no counters"
    if len(found.accepted_per_position) > bound.value:
        raise Broken(f"{len(found.accepted_per_position)} positions past {bound.describe()}")
    return "read"


# --- JSON Lines and the cache ---------------------------------------------------------------------------

_TEXTS = [
    "a\u2028b",
    "\u2029",
    "x\u0085y",
    "\ud800",
    "\udfff z",
    "\ufeffbom",
    "cr\r",
    "\r\n",
    "tab\t",
    "é中",
    "\x1b[2J",
]


def jsonl(rng: random.Random) -> tuple[Run, dict[str, bytes]]:
    turns = [
        "".join(rng.choice(_TEXTS) for _ in range(rng.randint(1, 4))) + rng.choice(["q", "?"])
        for _ in range(rng.randint(1, 3))
    ]
    data = cache_line(turns).encode("utf-8")
    mutated = bytearray(data)
    for _ in range(rng.randint(0, 3)):
        if mutated:
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
    if rng.random() < 0.3:
        mutated = bytearray(b"\xef\xbb\xbf") + mutated
    return lambda: _run_jsonl(turns, data, bytes(mutated)), {"row.jsonl": bytes(mutated)}


def _run_jsonl(turns: list[str], data: bytes, mutated: bytes) -> str:
    if any(ch in data for ch in ("\u2028".encode(), "\u2029".encode(), "\u0085".encode())):
        raise Broken(f"the cache line holds a raw line separator: {data!r:.200}")
    rows = json_lines(data, "cache")
    # What JSON itself carries: a lone high surrogate followed by a lone low one is the same text as
    # the pair, so it reads back as the pair (as through json.dumps and json.loads).
    if rows != [{"turns": json.loads(json.dumps(turns))}]:
        raise Broken(f"the cache line did not read back: {turns!r} -> {rows!r:.200}")
    try:
        mutated_rows = json_lines(mutated, "file")
        for index, row in enumerate(mutated_rows):
            dataset_spec("mt-bench").turns(row, f"row {index + 1}")
    except UsageError as exc:
        _one_line(exc.message, "jsonl")
        return "round trip; mutated refused"
    return "round trip; mutated read"


# --- protocol files -------------------------------------------------------------------------------------

_HOSTILE = [
    None,
    True,
    False,
    0,
    -1,
    1.0,
    1.5,
    2**63,
    10**12,
    float("nan"),
    float("inf"),
    "7",
    [],
    {},
    "\ud800",
    "x" * 300,
]


def protocol(rng: random.Random) -> tuple[Run, dict[str, bytes]]:
    document: dict[str, Any] = {
        "schema_version": 1,
        "name": "fuzz",
        "temperature": 1.0,
        "top_p": 0.95,
        "top_k": 20,
        "chat": True,
        "chat_template_kwargs": {"enable_thinking": True},
        "max_tokens": 2048,
        "num_prompts": 128,
        "order": "shuffled-42",
        "warmup": 1,
    }
    for _ in range(rng.randint(1, 3)):
        document[rng.choice(list(document))] = rng.choice(_HOSTILE)
    payload = {"protocol.json": json.dumps(document, allow_nan=True).encode("utf-8", "surrogatepass")}
    return lambda: _run_protocol(document), payload


def _run_protocol(document: dict[str, Any]) -> str:
    try:
        parsed = parse_protocol(document, "protocol fuzz.json")
    except UsageError as exc:
        _one_line(exc.message, "protocol")
        return "refused"
    for key, option in (("num_prompts", "--num-prompts"), ("max_tokens", "--max-tokens"), ("warmup", "warmup")):
        value = getattr(parsed, key)
        if value is not None and not BOUNDS[option].low <= value <= BOUNDS[option].high:
            raise Broken(f"{key} {value!r} accepted outside {BOUNDS[option].describe()}")
    return "read"


GENERATORS: dict[str, Callable[[random.Random], tuple[Run, dict[str, bytes]]]] = {
    "counters": counters,
    "metrics": metrics,
    "jsonl": jsonl,
    "protocol": protocol,
}
