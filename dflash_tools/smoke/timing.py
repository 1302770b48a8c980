"""How sure a timed figure is: the median and spread of a run's repetitions.

An engine repeats each timed run (the request's `timing`, dflash_tools.smoke_contract) and
reports every window; one window of a second on a shared machine moves by tens of percent, so a
figure is its repetitions' median with their spread, the range from the slowest to the fastest:

    tokens/s   median [low, high] over n repetitions      (each: output tokens / window)
    speed-up   median(speculation) / median(target alone), from [low / high, high / low] of the two

The speed-up's range is the widest the two ranges allow: it holds whatever pairing of
repetitions is right. A figure of one repetition has no spread (`samples` 1): it can be shown but
never ranks anything. `separated` says whether one figure is ahead of another beyond both their
spreads (the K sweep names a best K only then, `smoke.sweep`).

Pure functions over contract results.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from dflash_tools import smoke_contract as contract
from dflash_tools.documents import JsonDocument

# A figure whose spread is wider than this share of its median is flagged as noisy in the report
# even where it ranks nothing (a single run's speed-up): rerun longer or with more repetitions.
WIDE_SPREAD = 0.10


@dataclass(frozen=True)
class Spread(JsonDocument):
    """The median of `samples` measurements and their range."""

    median: float
    low: float
    high: float
    samples: int

    json_properties: ClassVar[Mapping[str, str]] = {"relative_spread": "relative"}

    @property
    def relative(self) -> float | None:
        """(high - low) / median; None without a spread (one sample) or a zero median."""
        if self.samples < 2 or self.median <= 0:
            return None
        return (self.high - self.low) / self.median

    @property
    def wide(self) -> bool:
        relative = self.relative
        return relative is not None and relative > WIDE_SPREAD

    def ahead_of(self, other: Spread) -> bool:
        """Faster beyond both spreads: this figure's slowest repetition beats the other's fastest."""
        return self.samples > 1 and other.samples > 1 and self.low > other.high


def spread_of(values: Sequence[float]) -> Spread | None:
    if not values:
        return None
    # The lower middle for an even count: the repetition an engine reports (smoke_contract.median_index).
    return Spread(statistics.median_low(values), min(values), max(values), len(values))


def _rates(timing: dict[str, Any] | None, tokens: int, elapsed: float) -> list[float]:
    if timing and timing.get("repeats", 1) > 1:
        return [
            contract.tokens_per_second(n, seconds)
            for n, seconds in zip(timing["output_tokens"], timing["elapsed_s"], strict=True)
        ]
    return [contract.tokens_per_second(tokens, elapsed)] if elapsed > 0 else []


def tokens_per_second(result: contract.SmokeResult | None) -> Spread | None:
    """Tokens per second of a run with speculation, over its repetitions."""
    if result is None or not result["ok"]:
        return None
    return spread_of(_rates(result.get("timing"), result["output_tokens"], result["elapsed_s"]))


def baseline_tokens_per_second(baseline: contract.BaselineResult | None) -> Spread | None:
    """Tokens per second of the target alone, over its repetitions."""
    if baseline is None:
        return None
    return spread_of(_rates(baseline.get("timing"), baseline["output_tokens"], baseline["elapsed_s"]))


def speedup(speculation: Spread | None, alone: Spread | None) -> Spread | None:
    """Speculation against the target alone: the ratio of the medians, and the widest range."""
    if speculation is None or alone is None or alone.low <= 0 or alone.median <= 0:
        return None
    return Spread(
        speculation.median / alone.median,
        speculation.low / alone.high,
        speculation.high / alone.low,
        min(speculation.samples, alone.samples),
    )


def shown(value: Spread | None, spec: str, unit: str = "") -> str:
    """`192.0 (185.2-201.3, 5 runs)`, or the median alone for one run."""
    if value is None:
        return "-"
    if value.samples < 2:
        return f"{value.median:{spec}}{unit}"
    return f"{value.median:{spec}}{unit} ({value.low:{spec}}-{value.high:{spec}}{unit}, {value.samples} runs)"
