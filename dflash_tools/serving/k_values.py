"""`-k`, the K to serve, as every command takes it: one value (`7`) or, for smoke-test's K sweep, a
list (`3,5,7`) or a range (`3-7`). One parser, so that the option has one type everywhere; a
command that serves one K refuses a list with a usage error that names the sweep."""

from __future__ import annotations

import re

from dflash_tools.errors import UsageError

K_VALUES_HINT = "pass -k 7, a list -k 3,5,7 or a range -k 3-7"
MAX_SWEEP_VALUES = 32
# The largest K an engine takes (a 64-bit integer, as every count it keeps): 19 digits. Longer
# digit strings are refused before int() (which refuses more than 4,300 digits with ValueError).
MAX_K = 2**63 - 1
_DIGITS = "[0-9]{1,19}"  # ASCII digits only: str.isdigit() also takes "²", which int() refuses
_RANGE = re.compile(rf"^({_DIGITS})\s*-\s*({_DIGITS})$")
_SINGLE = re.compile(rf"^{_DIGITS}$")
_LONG = re.compile(r"^[0-9]+(\s*-\s*[0-9]+)?$")  # a K or range of ASCII digits, too long


def parse_k_values(text: str) -> list[int]:
    """`7`, `3,5,7` or `3-7` (ranges and single values may mix: `1,3-5`) -> sorted distinct Ks."""
    values: set[int] = set()
    for part in text.split(","):
        item = part.strip()
        if not item:
            raise UsageError(f"-k {text!r}: an empty item", K_VALUES_HINT)
        match = _RANGE.match(item)
        if match:
            low, high = int(match.group(1)), int(match.group(2))
            if low > high:
                raise UsageError(f"-k {text!r}: range {item} runs backwards", K_VALUES_HINT)
            if high - low >= MAX_SWEEP_VALUES:
                raise UsageError(f"-k {text!r}: range {item} has more than {MAX_SWEEP_VALUES} values", K_VALUES_HINT)
            values.update(range(low, high + 1))
        elif _SINGLE.match(item):
            values.add(int(item))
        elif _LONG.match(item):
            raise _beyond_max(text)
        else:
            raise UsageError(f"-k {_brief(text)}: {_brief(item)} is not a number or a range", K_VALUES_HINT)
    if 0 in values:
        raise UsageError(f"-k {text!r}: K must be at least 1", K_VALUES_HINT)
    if max(values, default=0) > MAX_K:
        raise _beyond_max(text)
    if len(values) > MAX_SWEEP_VALUES:
        raise UsageError(f"-k {text!r}: more than {MAX_SWEEP_VALUES} values", K_VALUES_HINT)
    return sorted(values)


def single_k(text: str | None, command: str) -> int | None:
    """The one K of `command` (inspect, plan), None when not given; a list or range is refused."""
    if text is None:
        return None
    values = parse_k_values(text)
    if len(values) > 1:
        raise UsageError(
            f"-k {text!r}: {command} takes one K; a list or a range is smoke-test's K sweep",
            f"pass one K (-k {values[-1]}), or run the sweep: dflash-tools smoke-test -k {text}",
        )
    return values[0]


def _beyond_max(text: str) -> UsageError:
    return UsageError(
        f"-k {_brief(text)}: a K beyond {MAX_K:,}, the largest an engine takes (a 64-bit integer)", K_VALUES_HINT
    )


def _brief(text: str) -> str:
    """A value as typed, quoted, and short enough for one line (-k of 5,000 digits)."""
    shown = repr(text)
    return shown if len(shown) <= 40 else f"{shown[:37]}...'"
