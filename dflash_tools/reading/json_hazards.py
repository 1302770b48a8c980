"""JSON that parses but that readers disagree on, or that our own writers cannot carry.

- Duplicate keys: Python's json (so transformers and vLLM) keeps the last value, other readers
  (serde_json in strict mode refuses, some keep the first) differ. DFT059 where the values
  differ, DFT060 where a key merely repeats its value.
- Lone surrogates (`"\\ud800"`): valid JSON text, but not Unicode; strict parsers refuse it and
  no UTF-8 writer can encode it (DFT061).
- Nesting far deeper than any config: engines never read it, but every recursive walker
  (deepcopy, encoders) breaks on it (DFT062).

`loads_bounded` reads JSON that comes from a server (an API answer) within limits of size,
value count and nesting, so that a hostile answer is a one-line refusal, never a MemoryError or
a RecursionError.

Every walk here is iterative, so a hostile document cannot exhaust the stack.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import compress
from typing import Any

from dflash_tools.findings import Finding, make_finding

# Real configs nest 4 or 5 levels (speculators_config.proposal_methods[0].x); 64 leaves room.
MAX_CONFIG_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonRefused(ValueError):
    """JSON that is not read: the message says why in a few words (it follows "the answer is ...")."""


def json_values_bound(text: str | bytes) -> int:
    """An upper bound on the number of values in a JSON text, counted without parsing it.

    Every value but the first follows a `[`, a `,` or a `:`; those characters inside strings
    only make the bound looser.
    """
    if isinstance(text, str):
        return 1 + text.count("[") + text.count(",") + text.count(":")
    return 1 + text.count(b"[") + text.count(b",") + text.count(b":")


def loads_bounded(data: bytes | str, *, max_values: int) -> Any:
    """Parse a JSON text from a server within limits; `JsonRefused` says why it was not read.

    The caller has capped the bytes already (reading.http). Here: strict UTF-8, at most
    `max_values` values (each parsed value costs 60-100 bytes of memory, so a few megabytes of
    `[[],[],...]` would take gigabytes), and at most MAX_CONFIG_DEPTH levels of nesting (Python's
    parser recurses: a deep enough document raises RecursionError, a shallower one breaks every
    recursive walker later; no API answer nests more than a few levels).
    """
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonRefused(f"not UTF-8 text (byte {exc.start})") from None
    else:
        text = data
    if json_values_bound(text) > max_values:
        raise JsonRefused(f"JSON with more than {max_values:,} values")
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonRefused(f"JSON nested more than {MAX_CONFIG_DEPTH} levels deep") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of more than 4300 digits
        message = " ".join(str(exc).split())
        raise JsonRefused(f"not JSON ({message[:120]})") from None
    depth, _ = depth_and_path(value)
    if depth > MAX_CONFIG_DEPTH:
        raise JsonRefused(f"JSON nested more than {MAX_CONFIG_DEPTH} levels deep")
    return value


@dataclass(frozen=True)
class DuplicateKey:
    path: str
    values: tuple[Any, ...]  # every value, in file order; the last is what Python reads

    @property
    def differ(self) -> bool:
        return any(not _same_json(v, self.values[-1]) for v in self.values)


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON text (1, 1.0 and true differ); by their serializations, which keeps this
    module free of the convert layer's comparison."""
    try:
        return json.dumps(a, allow_nan=True) == json.dumps(b, allow_nan=True)
    except (RecursionError, ValueError):
        return False


def loads_tracking_duplicates(text: str) -> tuple[Any, list[DuplicateKey]]:
    """`json.loads(text)` (same values: last key wins) plus every duplicated key path.

    Linear in the document: the hook only notes the (rare) objects that repeat a key, and paths
    are built for containers only, never for the scalars of a million-entry list.
    """
    repeats: dict[int, tuple[dict[str, Any], dict[str, list[Any]]]] = {}

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result = dict(pairs)
        if len(result) != len(pairs):
            seen: dict[str, list[Any]] = {}
            for key, value in pairs:
                seen.setdefault(key, []).append(value)
            # The dict itself is kept in the entry, so its id stays its own while we walk.
            repeats[id(result)] = (result, {key: values for key, values in seen.items() if len(values) > 1})
        return result

    value = json.loads(text, object_pairs_hook=hook)
    if not repeats:
        return value, []
    duplicates: list[DuplicateKey] = []
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            entry = repeats.get(id(node))
            if entry is not None and entry[0] is node:
                duplicates.extend(DuplicateKey(f"{path}{key}", tuple(values)) for key, values in entry[1].items())
            stack.extend((child, f"{path}{key}.") for key, child in node.items() if isinstance(child, dict | list))
        elif isinstance(node, list):
            stack.extend(
                (child, f"{path.rstrip('.')}[{index}].")
                for index, child in enumerate(node)
                if isinstance(child, dict | list)
            )
    duplicates.sort(key=lambda d: d.path)
    return value, duplicates


def depth_and_path(value: Any) -> tuple[int, str]:
    """The deepest container nesting in `value` and the path where it starts (iteratively).

    A depth-first walk over iterators: memory grows with the nesting, not with the size of a
    list. The path is only worked out when the nesting is too deep to pass.
    """
    if not isinstance(value, dict | list):
        return 0, ""
    deepest = 1
    stack: list[Iterator[Any]] = [_children(value)]
    while stack:
        for child in stack[-1]:
            if len(stack) + 1 > deepest:
                deepest = len(stack) + 1
            if len(stack) <= MAX_CONFIG_DEPTH:  # deep enough to report; no need to go further down
                stack.append(_children(child))
                break
        else:
            stack.pop()
    if deepest <= MAX_CONFIG_DEPTH:
        return deepest, ""
    return deepest, _top_path(_deep_path(value))


_CONTAINERS = frozenset({dict, list})


def _children(node: dict[str, Any] | list[Any]) -> Iterator[Any]:
    """The container children of a parsed JSON node, selected at C speed (json gives exact types)."""
    values = list(node.values()) if isinstance(node, dict) else node
    return compress(values, map(_CONTAINERS.__contains__, map(type, values)))


def _deep_path(value: Any) -> str:
    """The path of a container nested deeper than MAX_CONFIG_DEPTH (the first one found)."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, depth, path = stack.pop()
        if depth > MAX_CONFIG_DEPTH:
            return path
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, dict | list):
                child_path = f"{path}.{key}" if isinstance(node, dict) else f"{path}[{key}]"
                stack.append((child, depth + 1, child_path.lstrip(".")))
    return ""


def _top_path(path: str) -> str:
    """The first two steps of a path (a 900-deep path is no use in a message)."""
    parts = re.split(r"(?=\[)|\.", path)
    return "".join(p if p.startswith("[") else f".{p}" for p in parts[:2] if p).lstrip(".")


def surrogate_paths(value: Any) -> list[str]:
    """Paths of strings (keys or values) that hold a lone surrogate."""
    found: list[str] = []
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if _SURROGATE.search(node):
                found.append(path or "(document)")
        elif isinstance(node, dict):
            for key, child in node.items():
                if _SURROGATE.search(key):
                    found.append(f"{path}.{ascii(key)[1:-1]}".lstrip("."))
                if isinstance(child, str | dict | list):
                    stack.append((child, f"{path}.{ascii(key)[1:-1]}".lstrip(".")))
        elif isinstance(node, list):
            stack.extend(
                (child, f"{path}[{index}]") for index, child in enumerate(node) if isinstance(child, str | dict | list)
            )
    return sorted(found)


# Strict UTF-8 text cannot carry a surrogate: in a parsed document one only comes from a
# `\\uD800`-style escape, so a text without such an escape needs no walk at all.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _show(value: Any) -> str:
    text = ascii(value) if not isinstance(value, dict | list) else f"<{type(value).__name__}>"
    return text if len(text) <= 40 else text[:37] + "..."


def hazard_findings(value: Any, duplicates: list[DuplicateKey], file: str, text: str | None = None) -> list[Finding]:
    """Findings for duplicated keys, lone surrogates and extreme nesting in one parsed file.

    `text`, the file's JSON text, lets the lone-surrogate walk be skipped when no escape could
    have made one.
    """
    findings: list[Finding] = []
    for duplicate in duplicates:
        shown = ", ".join(_show(v) for v in duplicate.values)
        if duplicate.differ:
            findings.append(
                make_finding(
                    "DFT059",
                    f"{file}: key {duplicate.path} appears {len(duplicate.values)} times with different values "
                    f"({shown}); Python json, transformers and vLLM read the last, other readers may read the first",
                    "keep one copy with the intended value; `dflash-tools convert` writes the last one alone",
                    keys=(duplicate.path,),
                    file=file,
                )
            )
        else:
            findings.append(
                make_finding(
                    "DFT060",
                    f"{file}: key {duplicate.path} appears {len(duplicate.values)} times (same value {_show(duplicate.values[-1])})",
                    "remove the repeated key; strict JSON readers refuse duplicates",
                    keys=(duplicate.path,),
                    file=file,
                )
            )
    bad_strings = [] if text is not None and not _SURROGATE_ESCAPE.search(text) else surrogate_paths(value)
    if bad_strings:
        # One finding per file: a conversion that moves the strings (into a nested decoder
        # config, or a restore copy) still carries the same problem, not a new one.
        shown = ", ".join(bad_strings[:5]) + (f" and {len(bad_strings) - 5} more" if len(bad_strings) > 5 else "")
        findings.append(
            make_finding(
                "DFT061",
                f"{file}: {shown} hold{'s' if len(bad_strings) == 1 else ''} a lone surrogate (\\ud800-\\udfff "
                "escape): not Unicode text; strict JSON readers refuse it and it cannot be written as UTF-8",
                "replace those strings with valid text",
                keys=tuple(bad_strings),
                file=file,
            )
        )
    depth, where = depth_and_path(value)
    if depth > MAX_CONFIG_DEPTH:
        findings.append(
            make_finding(
                "DFT062",
                f"{file}: {where or 'the document'} nests more than {MAX_CONFIG_DEPTH} levels deep "
                "(no config an engine reads needs that many)",
                f"remove {where or 'the nested value'}; nothing an engine reads nests this deep",
                keys=(where,) if where else (),
                file=file,
            )
        )
    return findings
