"""Speculative-decoding counters from real Prometheus expositions and get_metrics() documents."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from dflash_tools.smoke.metrics import (
    MetricsError,
    SpecDecodeCounters,
    counters_from_metrics,
    counters_from_prometheus,
    metric_to_dict,
    model_names,
    parse_prometheus_text,
)


class VllmSpecDecodeMetrics:
    """The four counters as vLLM 0.33.0 registers them (spec_decode/metrics.py SpecDecodingProm)."""

    def __init__(self, registry: CollectorRegistry, k: int, engines: int = 1, model: str = "Qwen/Qwen3.8-27B") -> None:
        labels = ["model_name", "engine"]
        self.drafts = Counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels, registry=registry
        )
        self.draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels, registry=registry
        )
        self.accepted = Counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels, registry=registry
        )
        self.per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [*labels, "position"],
            registry=registry,
        )
        self.k = k
        self.model = model
        self.engines = engines

    def observe(self, engine: int, drafts: int, accepted_per_position: list[int]) -> None:
        labels = (self.model, str(engine))
        self.drafts.labels(*labels).inc(drafts)
        self.draft_tokens.labels(*labels).inc(drafts * self.k)
        self.accepted.labels(*labels).inc(sum(accepted_per_position))
        for position, count in enumerate(accepted_per_position):
            self.per_pos.labels(*labels, str(position)).inc(count)


def test_real_exposition_with_two_engines() -> None:
    registry = CollectorRegistry()
    metrics = VllmSpecDecodeMetrics(registry, k=3)
    metrics.observe(0, 10, [9, 7, 4])
    metrics.observe(1, 10, [8, 6, 2])
    text = generate_latest(registry).decode()
    assert "vllm:spec_decode_num_drafts_created" in text  # what must be ignored
    counters = counters_from_prometheus(text)
    assert counters == SpecDecodeCounters(20, 60, 36, (17, 13, 6))
    assert counters.mean_acceptance_length == pytest.approx(1 + 36 / 20)
    assert counters.acceptance_rate_per_position == pytest.approx([0.85, 0.65, 0.30])
    assert counters.draft_acceptance_rate == pytest.approx(36 / 60)
    assert model_names(text) == ["Qwen/Qwen3.8-27B"]


def test_openmetrics_exposition() -> None:
    registry = CollectorRegistry()
    metrics = VllmSpecDecodeMetrics(registry, k=2)
    metrics.observe(0, 4, [3, 1])
    text = generate_openmetrics(registry).decode()
    assert text.rstrip().endswith("# EOF")
    assert counters_from_prometheus(text) == SpecDecodeCounters(4, 8, 4, (3, 1))


def test_deltas_around_requests() -> None:
    registry = CollectorRegistry()
    metrics = VllmSpecDecodeMetrics(registry, k=2)
    metrics.observe(0, 5, [5, 5])
    before = counters_from_prometheus(generate_latest(registry).decode())
    metrics.observe(0, 4, [3, 1])
    after = counters_from_prometheus(generate_latest(registry).decode())
    assert before is not None and after is not None
    delta = after.minus(before)
    assert delta == SpecDecodeCounters(4, 8, 4, (3, 1))
    assert delta.result_fields()["mean_acceptance_length"] == 2.0
    with pytest.raises(MetricsError, match="restarted"):
        before.minus(after)


def test_filters_by_model_name() -> None:
    registry = CollectorRegistry()
    a = VllmSpecDecodeMetrics(registry, k=1, model="a")
    a.observe(0, 2, [1])
    a.model = "b"
    a.observe(0, 3, [3])
    text = generate_latest(registry).decode()
    assert counters_from_prometheus(text, model_name="b") == SpecDecodeCounters(3, 3, 3, (3,))
    assert model_names(text) == ["a", "b"]


def test_no_speculative_counters() -> None:
    text = "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"
    assert counters_from_prometheus(text) is None


def test_exposition_syntax() -> None:
    text = (
        '# comment\nmetric_a{path="a\\"b\\\\c\\nd",x="1"} 1.5e3 1700000000000\n'
        "metric_b NaN\nmetric_c +Inf\nmetric_d{} -Inf\n"
    )
    samples = parse_prometheus_text(text)
    assert samples[0].labels == {"path": 'a"b\\c\nd', "x": "1"}
    assert samples[0].value == 1500.0
    assert math.isnan(samples[1].value) and samples[2].value == math.inf and samples[3].value == -math.inf
    for bad in ("{x} 1", 'm{x="1" 1', "m", "m{x=1} 2", "m one", "m 1 2 3"):
        with pytest.raises(MetricsError, match="line 1"):
            parse_prometheus_text(bad)
    with pytest.raises(MetricsError, match="not a counter value"):
        counters_from_prometheus("vllm:spec_decode_num_drafts_total -1\n")
    with pytest.raises(MetricsError, match="position label"):
        counters_from_prometheus('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="x"} 1\n')


class Metric:  # shaped like vllm.v1.metrics.reader's dataclasses
    def __init__(self, name: str, labels: dict[str, str], **values: object) -> None:
        self.name = name
        self.labels = labels
        for key, value in values.items():
            setattr(self, key, value)


class Vector(Metric):
    pass


def test_get_metrics_snapshot() -> None:
    labels = {"model_name": "m", "engine": "0"}
    snapshot = [
        Metric("vllm:num_requests_running", labels, value=0.0),
        Metric("vllm:spec_decode_num_drafts", labels, value=40),
        Metric("vllm:spec_decode_num_draft_tokens", labels, value=280),
        Metric("vllm:spec_decode_num_accepted_tokens", labels, value=174),
        Vector("vllm:spec_decode_num_accepted_tokens_per_pos", labels, values=[38, 33, 29, 25, 21, 16, 12]),
    ]
    counters = counters_from_metrics(snapshot)
    assert counters == SpecDecodeCounters(40, 280, 174, (38, 33, 29, 25, 21, 16, 12))
    assert counters.mean_acceptance_length == pytest.approx(5.35)
    documents = [metric_to_dict(m) for m in snapshot]
    assert documents[4] == {
        "name": "vllm:spec_decode_num_accepted_tokens_per_pos",
        "type": "vector",
        "labels": labels,
        "values": [38, 33, 29, 25, 21, 16, 12],
    }
    assert counters_from_metrics(documents) == counters
    assert counters_from_metrics(documents[:1]) is None
    with pytest.raises(MetricsError):
        counters_from_metrics([{"name": "vllm:spec_decode_num_accepted_tokens_per_pos", "values": 3}])
