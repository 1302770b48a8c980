"""vLLM's speculative-decoding counters, from `LLM.get_metrics()` or a Prometheus `/metrics` page.

Four counters matter (vllm/v1/spec_decode/metrics.py and vllm/v1/metrics/reader.py):

    vllm:spec_decode_num_drafts                verify steps that had drafts, per request
    vllm:spec_decode_num_draft_tokens          proposed draft tokens
    vllm:spec_decode_num_accepted_tokens       accepted draft tokens (bonus token excluded)
    vllm:spec_decode_num_accepted_tokens_per_pos   one counter per draft position (label
                                               `position`), length K

`get_metrics()` names them without the `_total` suffix and turns the per-position counters into
one `Vector`; the text exposition has `_total` samples (and `_created` timestamps to ignore).
Each engine (data-parallel rank) has its own label set; totals are summed across them. Counters
are cumulative per process, so a measurement is the difference of two snapshots.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.smoke.counter_relations import ImpossibleCounters, KBound, counter_value, k_bound, position_index

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
_SCALARS = (DRAFTS, DRAFT_TOKENS, ACCEPTED)


class MetricsError(ValueError):
    """Malformed metrics; the message names the line or metric."""


@dataclass(frozen=True)
class SpecDecodeCounters:
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: tuple[int, ...]

    def minus(self, before: SpecDecodeCounters) -> SpecDecodeCounters:
        """The counts accumulated since `before` (a counter that went down means a restart)."""
        width = max(len(self.accepted_per_position), len(before.accepted_per_position))
        after_pos = list(self.accepted_per_position) + [0] * (width - len(self.accepted_per_position))
        before_pos = list(before.accepted_per_position) + [0] * (width - len(before.accepted_per_position))
        delta = SpecDecodeCounters(
            self.num_drafts - before.num_drafts,
            self.num_draft_tokens - before.num_draft_tokens,
            self.num_accepted_tokens - before.num_accepted_tokens,
            tuple(a - b for a, b in zip(after_pos, before_pos, strict=True)),
        )
        if (
            min(delta.num_drafts, delta.num_draft_tokens, delta.num_accepted_tokens, *delta.accepted_per_position, 0)
            < 0
        ):
            raise MetricsError("speculative-decoding counters went down between snapshots: the server restarted")
        return delta

    @property
    def mean_acceptance_length(self) -> float:
        return contract.mean_acceptance_length(self.num_drafts, self.num_accepted_tokens)

    @property
    def acceptance_rate_per_position(self) -> list[float]:
        return contract.rates(self.num_drafts, list(self.accepted_per_position))

    @property
    def draft_acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    def result_fields(self) -> dict[str, Any]:
        """The counter part of a contract result."""
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_position": list(self.accepted_per_position),
            "acceptance_rate_per_position": self.acceptance_rate_per_position,
            "mean_acceptance_length": self.mean_acceptance_length,
        }


ZERO = SpecDecodeCounters(0, 0, 0, ())


# --- get_metrics() -----------------------------------------------------------------------------


def metric_to_dict(metric: Any) -> dict[str, Any]:
    """A `vllm.v1.metrics.reader` Metric (Counter, Vector, Gauge, Histogram) as plain JSON."""
    document: dict[str, Any] = {
        "name": getattr(metric, "name", None),
        "type": type(metric).__name__.lower(),
        "labels": dict(getattr(metric, "labels", {}) or {}),
    }
    if hasattr(metric, "values"):
        document["values"] = list(metric.values)  # checked as counts by `_count`
    elif hasattr(metric, "value"):
        document["value"] = metric.value
    if hasattr(metric, "buckets"):
        document.update(count=metric.count, sum=metric.sum)
    return document


def _labels_match(labels: dict[str, Any], model_name: str | None) -> bool:
    return model_name is None or labels.get("model_name") in (None, model_name)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MetricsError(f"{where}: {value!r} is not a counter value")
    try:
        return counter_value(float(value), where)
    except (ValueError, OverflowError):
        raise MetricsError(f"{where}: {value!r} is not a counter value (a whole number from 0 to 2^53)") from None


def counters_from_metrics(metrics: Iterable[Any], *, model_name: str | None = None) -> SpecDecodeCounters | None:
    """Sum the four counters over engines from `get_metrics()` output (objects or their dicts).

    None when the snapshot has no speculative-decoding counters at all (speculation off, or
    statistics disabled).
    """
    totals = dict.fromkeys(_SCALARS, 0)
    seen = False
    per_position: list[int] = []
    for metric in metrics:
        item = metric if isinstance(metric, dict) else metric_to_dict(metric)
        name = item.get("name")
        if not isinstance(name, str) or not _labels_match(item.get("labels") or {}, model_name):
            continue
        name = name.removesuffix("_total")
        if name in totals:
            totals[name] += _count(item.get("value"), name)
            seen = True
        elif name == ACCEPTED_PER_POSITION:
            values = item.get("values")
            if not isinstance(values, list):
                raise MetricsError(f"{name}: expected a vector of per-position counts")
            if len(values) > k_bound(None).value:
                raise MetricsError(f"{name}: {len(values)} positions, more than {k_bound(None).describe()}")
            counts = [_count(v, f"{name}[{i}]") for i, v in enumerate(values)]
            per_position += [0] * (len(counts) - len(per_position))
            for index, count in enumerate(counts):
                per_position[index] += count
            seen = True
    if not seen:
        return None
    return SpecDecodeCounters(totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED], tuple(per_position))


PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"


def prefix_cache_counters(metrics: Iterable[Any]) -> tuple[int, int] | None:
    """(queried, hit) prompt tokens of vLLM's prefix cache, summed over engines; None when absent
    (the counters exist in vllm/v1/metrics/loggers.py whether or not caching is on)."""
    totals = {PREFIX_CACHE_QUERIES: 0, PREFIX_CACHE_HITS: 0}
    seen = False
    for metric in metrics:
        item = metric if isinstance(metric, dict) else metric_to_dict(metric)
        name = item.get("name")
        if isinstance(name, str) and name.removesuffix("_total") in totals:
            totals[name.removesuffix("_total")] += _count(item.get("value"), name)
            seen = True
    return (totals[PREFIX_CACHE_QUERIES], totals[PREFIX_CACHE_HITS]) if seen else None


# --- Prometheus text exposition ------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_value(text: str, line_number: int) -> float:
    special = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}
    lowered = text.lower()
    if lowered in special:
        return special[lowered]
    try:
        return float(text)
    except ValueError:
        raise MetricsError(f"line {line_number}: {text!r} is not a sample value") from None


def _parse_labels(line: str, start: int, line_number: int) -> tuple[dict[str, str], int]:
    labels: dict[str, str] = {}
    index = start + 1
    while True:
        while index < len(line) and line[index] in " \t":
            index += 1
        if index < len(line) and line[index] == "}":
            return labels, index + 1
        match = _LABEL_NAME.match(line, index)
        if match is None:
            raise MetricsError(f"line {line_number}: bad label name at column {index + 1}")
        key = match.group()
        index = match.end()
        if line[index : index + 2] != '="':
            raise MetricsError(f'line {line_number}: expected =" after label {key}')
        index += 2
        value: list[str] = []
        while True:
            if index >= len(line):
                raise MetricsError(f"line {line_number}: unterminated value of label {key}")
            char = line[index]
            if char == "\\" and index + 1 < len(line):
                value.append(_ESCAPES.get(line[index + 1], "\\" + line[index + 1]))
                index += 2
            elif char == '"':
                index += 1
                break
            else:
                value.append(char)
                index += 1
        labels[key] = "".join(value)
        while index < len(line) and line[index] in " \t":
            index += 1
        if index < len(line) and line[index] == ",":
            index += 1
        elif index >= len(line) or line[index] != "}":
            raise MetricsError(f"line {line_number}: expected , or }} after label {key}")


def parse_prometheus_text(text: str) -> list[Sample]:
    """Samples of a Prometheus (0.0.4) or OpenMetrics text exposition; comments are skipped."""
    samples: list[Sample] = []
    # Lines end at "\n" alone (the exposition format); str.splitlines would also split a label
    # value at U+2028 or U+0085.
    for line_number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _NAME.match(line)
        if match is None:
            raise MetricsError(f"line {line_number}: {raw[:80]!r} is not a metric sample")
        name = match.group()
        index = match.end()
        labels: dict[str, str] = {}
        if index < len(line) and line[index] == "{":
            labels, index = _parse_labels(line, index, line_number)
        rest = line[index:].split()
        if not rest or len(rest) > 2:
            raise MetricsError(f"line {line_number}: expected a value (and optional timestamp) after {name}")
        samples.append(Sample(name, labels, _parse_value(rest[0], line_number)))
    return samples


def canonical_name(name: str) -> str:
    """OpenMetrics output of newer prometheus clients escapes `vllm:` to `vllm_`."""
    return "vllm:" + name[len("vllm_") :] if name.startswith("vllm_") else name


def counters_from_prometheus(
    text: str, *, model_name: str | None = None, bound: KBound | None = None
) -> SpecDecodeCounters | None:
    """The four counters from a `/metrics` page, summed over engines (None if absent).

    A `position` label is read as a draft position below `bound` (the draft's K, else the largest
    K smoke-test serves; `counter_relations.position_index`) before anything is sized by it.
    """
    bound = bound or k_bound(None)
    totals = dict.fromkeys(_SCALARS, 0)
    per_position: dict[int, int] = {}
    seen = False
    for sample in parse_prometheus_text(text):
        if not sample.name.endswith("_total") or not _labels_match(sample.labels, model_name):
            # `_created` timestamps and gauges share the prefix; only counter totals count.
            continue
        name = canonical_name(sample.name).removesuffix("_total")
        if name in totals:
            totals[name] += _count(sample.value, sample.name)
            seen = True
        elif name == ACCEPTED_PER_POSITION:
            try:
                index = position_index(sample.labels.get("position", ""), bound)
            except ImpossibleCounters as exc:
                raise MetricsError(f"{sample.name}: {exc}") from None
            per_position[index] = per_position.get(index, 0) + _count(sample.value, sample.name)
            seen = True
    if not seen:
        return None
    width = max(per_position) + 1 if per_position else 0
    return SpecDecodeCounters(
        totals[DRAFTS],
        totals[DRAFT_TOKENS],
        totals[ACCEPTED],
        tuple(per_position.get(i, 0) for i in range(width)),
    )


def model_names(text: str) -> list[str]:
    """`model_name` label values seen on speculative-decoding samples (to pick one server model)."""
    names = {
        s.labels["model_name"]
        for s in parse_prometheus_text(text)
        if canonical_name(s.name).startswith("vllm:spec_decode_") and "model_name" in s.labels
    }
    return sorted(names)
