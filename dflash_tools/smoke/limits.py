"""Every number `smoke-test` takes, checked for type, finiteness and range before it is used.

A number reaches smoke-test from the command line (typer has parsed it, but `--run-timeout nan`
and `--floor inf` parse, and an int has no upper bound), from a preset, or from the Python API
(`resolve_options` takes any object with the options' names). Each is checked here once, before
any arithmetic, and a bad one is a UsageError naming the option and its range:

    --run-timeout nan: not a finite number (seconds for each engine run, from 1 to 604,800)

The ranges are what the engines can take: a seed is 32 bits because vLLM seeds numpy with it
(`np.random.seed` refuses anything else), K stays within what a draft block can be, and the
rest are generous bounds that keep a typo from asking for a week of generation.

Engine-argument values (`--engine-arg KEY=VALUE`) are JSON, read by the bounded reader
(`reading.json_hazards.loads_bounded`), with NaN and infinities refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dflash_tools.errors import UsageError
from dflash_tools.reading.json_hazards import JsonRefused, loads_bounded

# The largest K smoke-test serves: no DFlash-family block is near it (trained blocks are 8-16).
MAX_K = 256
MAX_ENGINE_ARG_BYTES = 64 * 1024
MAX_ENGINE_ARG_VALUES = 10_000


@dataclass(frozen=True)
class Bound:
    """What one option holds: its name as typed, what it is, its range, whole numbers or not."""

    option: str
    meaning: str
    low: float
    high: float
    integer: bool

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        if self.integer:
            return f"{self.meaning}: {kind} from {int(self.low):,} to {int(self.high):,}"
        return f"{self.meaning}: {kind} from {self.low:,g} to {self.high:,g}"

    def check(self, value: Any, where: str | None = None) -> None:
        """UsageError unless `value` is a finite number of the right kind in range (None passes)."""
        if value is None:
            return
        shown = f"{where or self.option} {value!r}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UsageError(f"{shown}: not a number", self.describe())
        if self.integer and not isinstance(value, int):
            raise UsageError(f"{shown}: not a whole number", self.describe())
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"{shown}: not a finite number", self.describe())
        if not self.low <= value <= self.high:
            raise UsageError(f"{shown}: out of range", self.describe())


BOUNDS: dict[str, Bound] = {
    bound.option: bound
    for bound in (
        Bound("--num-prompts", "prompts to run", 1, 100_000, True),
        Bound("--max-tokens", "new tokens per prompt", 1, 1_000_000, True),
        Bound("--run-timeout", "seconds for each engine run", 1, 604_800, False),
        Bound("--timeout", "seconds for each Hub or server request", 0.1, 86_400, False),
        Bound("--floor", "mean acceptance length every draft must reach", 0, MAX_K + 1, False),
        Bound("--concurrency", "concurrent requests to the server", 1, 1024, True),
        Bound("--seed", "the engine's seed (vLLM seeds numpy with it: 32 bits)", 0, 2**32 - 1, True),
        Bound("--tensor-parallel-size", "vLLM tensor parallelism", 1, 1024, True),
        Bound("--max-model-len", "vLLM max_model_len", 1, 2**31 - 1, True),
        Bound("--repeat", "timed repetitions of each run", 1, 1000, True),
        Bound("--min-time", "seconds of timed windows each run repeats to", 0, 86_400, False),
        Bound("-k", "draft tokens per step (K)", 1, MAX_K, True),
        # No option of their own: a protocol file's (smoke.workloads.protocols) and the API's
        # `load_dataset_prompts(warmup=...)`, as many as there may be prompts.
        Bound("warmup", "warm-up requests before the measured ones", 0, 100_000, True),
        Bound("top_k", "the sampling's top-k (0: off)", 0, 2**31 - 1, True),
    )
}
# The option -> the attribute of `SmokeArguments` that holds it.
ARGUMENTS = {
    "--num-prompts": "num_prompts",
    "--max-tokens": "max_tokens",
    "--run-timeout": "run_timeout",
    "--timeout": "timeout",
    "--floor": "floor",
    "--concurrency": "concurrency",
    "--seed": "seed",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--max-model-len": "max_model_len",
    "--repeat": "repeat",
    "--min-time": "min_time",
}


def check_arguments(args: Any) -> None:
    """Each number of the command line (`smoke.arguments.SmokeArguments`), before it is used."""
    for option, attribute in ARGUMENTS.items():
        BOUNDS[option].check(getattr(args, attribute, None))


def check_k_values(values: list[int] | None) -> None:
    for value in values or []:
        BOUNDS["-k"].check(value, f"-k {value}")


def check_options(options: Any, preset: Any) -> None:
    """The resolved numbers of a `smoke.options.SmokeOptions` that may come from elsewhere than the
    command line (a `Preset`, the protocol), each named by where it came from."""
    for option, attribute in (("--max-tokens", "max_tokens"), ("-k", "num_speculative_tokens")):
        source = options.sources.get(attribute)
        where = f"{option}" if source is None or source == "argument" else f"{source} {attribute}"
        if source == "preset" and preset is not None:
            where = f"preset {preset.name}: {attribute}"
        BOUNDS[option].check(getattr(options, attribute), where)
    BOUNDS["--run-timeout"].check(options.run_timeout)
    BOUNDS["--min-time"].check(options.min_time_s)


def engine_arg_value(key: str, raw: str) -> Any:
    """`--engine-arg KEY=VALUE`: VALUE as JSON where it parses (bounded, finite numbers only),
    else the text itself."""
    if len(raw.encode("utf-8", errors="replace")) > MAX_ENGINE_ARG_BYTES:
        raise UsageError(
            f"--engine-arg {key}: the value is longer than {MAX_ENGINE_ARG_BYTES // 1024} KiB", "pass a shorter value"
        )
    try:
        value = loads_bounded(raw, max_values=MAX_ENGINE_ARG_VALUES)
    except JsonRefused as exc:
        if str(exc).startswith("not JSON"):
            return raw  # a plain word: `--engine-arg kv_cache_dtype=fp8`
        raise UsageError(f"--engine-arg {key}: the value is {exc}", "pass a smaller JSON value") from None
    bad = _non_finite(value)
    if bad is not None:
        raise UsageError(f"--engine-arg {key}: {bad} is not a finite number", "pass finite numbers only")
    return value


def _non_finite(value: Any) -> str | None:
    """The first NaN or infinity in a parsed JSON value (JSON has no such numbers; Python's reader
    takes `NaN` and `Infinity` anyway), as shown to the user."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return repr(item)
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None
