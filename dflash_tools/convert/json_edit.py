"""Byte-preserving JSON edits: rewrite config.json and the shard index as a minimal diff.

Rewritten JSON files keep the bytes of every value that did not change: key order, indentation,
number spelling, inline lists. Only the members that changed are re-serialized, in the file's
own style, so a normalization shows up as a minimal diff.

Cost: linear, and at C speed where nothing changes. The text is parsed once (`dumps_like`; the
style is read from the same parse), and a container is decoded whole by the standard library's C
scanner (a hook refuses repeated keys, which send that container down the member-by-member path);
its members or items get nodes of their own only when an edit reaches inside it. Unchanged values
are compared as canonical JSON text (`same_json`). A config holding a list of a million entries
used to cost 12-18 times the CPU of `inspect` and 840 MB: one Python node per entry, built twice
(bench/bench_convert_lists.py).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# A \uXXXX escape of a non-ASCII code point: the file was written with ensure_ascii=True.
_NON_ASCII_ESCAPE = re.compile(r"\\u(?:00[89a-fA-F][0-9a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3})")


@dataclass
class _Node:
    """A parsed JSON value and where its text lies in the source."""

    kind: str  # "object" | "array" | "scalar"
    start: int
    end: int
    value: Any
    # object: (key, key text span, value node) per member, in file order
    members: list[tuple[str, tuple[int, int], _Node]] = field(default_factory=list)
    items: list[_Node] = field(default_factory=list)
    # This container, or one inside it, repeats a key: its text is never reused as a whole,
    # so a rewrite keeps one copy of each key (the last, which is what Python's json reads).
    repeats_key: bool = False
    # A container decoded whole (`value` set, no repeated key inside): its members or items are
    # parsed only when asked for (`_members`, `_items`).
    lazy: bool = False


class _RepeatedKey(Exception):
    pass


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise _RepeatedKey
    return value


# Decodes a container at C speed, refusing a repeated key anywhere inside it.
_WHOLE_DECODER = json.JSONDecoder(object_pairs_hook=_no_repeated_keys)


def _skip(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    return match.end() if match else pos


def _parse(text: str, pos: int) -> _Node:
    pos = _skip(text, pos)
    char = text[pos : pos + 1]
    if char in ("{", "["):
        try:
            value, end = _WHOLE_DECODER.raw_decode(text, pos)
        except (_RepeatedKey, ValueError, RecursionError):
            pass  # parsed member by member below (which also says where a broken text breaks)
        else:
            return _Node("object" if char == "{" else "array", pos, end, value, lazy=True)
    return _parse_members(text, pos)


def _expand(node: _Node, text: str) -> _Node:
    """A lazy container's members or items, parsed one level down (their own values lazy)."""
    if node.lazy:
        parsed = _parse_members(text, node.start)
        node.members, node.items, node.lazy = parsed.members, parsed.items, False
    return node


def _members(node: _Node, text: str) -> list[tuple[str, tuple[int, int], _Node]]:
    return _expand(node, text).members


def _items(node: _Node, text: str) -> list[_Node]:
    return _expand(node, text).items


def _parse_members(text: str, pos: int) -> _Node:
    pos = _skip(text, pos)
    char = text[pos : pos + 1]
    if char == "{":
        node = _Node("object", pos, pos, {})
        pos = _skip(text, pos + 1)
        if text[pos : pos + 1] == "}":
            node.end = pos + 1
            return node
        while True:
            if text[pos : pos + 1] != '"':
                raise ValueError(f"expected a key at offset {pos}")
            key, key_end = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
            key_span = (pos, key_end)
            pos = _skip(text, key_end)
            if text[pos : pos + 1] != ":":
                raise ValueError(f"expected ':' at offset {pos}")
            child = _parse(text, pos + 1)
            if key in node.value or child.repeats_key:
                node.repeats_key = True
            node.members.append((key, key_span, child))
            node.value[key] = child.value
            pos = _skip(text, child.end)
            if text[pos : pos + 1] == ",":
                pos = _skip(text, pos + 1)
                continue
            if text[pos : pos + 1] == "}":
                node.end = pos + 1
                return node
            raise ValueError(f"expected ',' or '}}' at offset {pos}")
    if char == "[":
        node = _Node("array", pos, pos, [])
        pos = _skip(text, pos + 1)
        if text[pos : pos + 1] == "]":
            node.end = pos + 1
            return node
        while True:
            child = _parse(text, pos)
            node.repeats_key = node.repeats_key or child.repeats_key
            node.items.append(child)
            node.value.append(child.value)
            pos = _skip(text, child.end)
            if text[pos : pos + 1] == ",":
                pos = _skip(text, pos + 1)
                continue
            if text[pos : pos + 1] == "]":
                node.end = pos + 1
                return node
            raise ValueError(f"expected ',' or ']' at offset {pos}")
    value, end = _DECODER.raw_decode(text, pos)
    return _Node("scalar", pos, end, value)


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON text would be: 1, 1.0 and true are different values here."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        if list(a) != list(b):
            return False
        return _same_items(list(a.values()), list(b.values()))
    if isinstance(a, list):
        return _same_items(a, b)
    return _same_json_walk(a, b)


def _same_items(a: list[Any], b: list[Any]) -> bool:
    """Two lists of JSON values, at C speed where they are equal: Python's `==` (weaker than
    JSON's: 1 == 1.0 == True) and then the item types, item by item; only the dicts and lists
    among the items are compared again. Anything else (NaN, which is not == itself) is walked."""
    if len(a) != len(b):
        return False
    if a == b:
        types = list(map(type, a))
        if types != list(map(type, b)):
            return False
        if dict not in types and list not in types:
            return True
        return all(same_json(x, y) for x, y in zip(a, b, strict=True) if type(x) is dict or type(x) is list)
    return all(_same_json_walk(x, y) for x, y in zip(a, b, strict=True))


def _same_json_walk(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same_json_walk(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_json_walk(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


@dataclass(frozen=True)
class JsonStyle:
    """How a file writes JSON: indent unit (None = one line), separators, escaping."""

    indent: str | None = "  "
    key_separator: str = ": "
    item_separator: str = ","
    ensure_ascii: bool = False
    trailing: str = "\n"
    # "\r\n" for a file written on Windows: new lines inside the document match the old ones.
    newline: str = "\n"


def detect_style(text: str, root: _Node | None = None) -> JsonStyle:
    """The style of an existing JSON document (defaults: 2 spaces, ': ', UTF-8, final newline);
    `root`: the document already parsed (`dumps_like` parses it once)."""
    if root is None:
        try:
            root = _parse(text, 0)
        except (ValueError, IndexError):
            return JsonStyle()
    ensure_ascii = bool(_NON_ASCII_ESCAPE.search(text)) and all(ord(c) < 128 for c in text)
    trailing = text[root.end :]
    indent: str | None = "  "
    key_separator, item_separator = ": ", ","
    members = _members(root, text) if root.kind == "object" else []
    if members:
        _, (_, key_end), first = members[0]
        key_separator = text[key_end : first.start]
        lead = text[root.start + 1 : members[0][1][0]]
        if "\n" in lead:
            indent = lead.rsplit("\n", 1)[1]
            item_separator = ","
        else:
            indent = None
            if len(members) > 1:
                item_separator = text[first.end : members[1][1][0]]
            else:
                item_separator = ", " if key_separator.endswith(" ") else ","
    newline = "\r\n" if "\r\n" in text[root.start : root.end] else "\n"
    return JsonStyle(indent, key_separator or ": ", item_separator, ensure_ascii, trailing, newline)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogates(text: str) -> str:
    """Lone surrogates as \\uXXXX escapes: the file said them that way, and UTF-8 cannot carry them.

    json.dumps(ensure_ascii=False) leaves them raw; they can only occur inside JSON strings, so
    escaping them there keeps the value and makes the text encodable.
    """
    return _LONE_SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _dumps(value: Any, style: JsonStyle, **options: Any) -> str:
    return _escape_surrogates(json.dumps(value, ensure_ascii=style.ensure_ascii, allow_nan=True, **options))


def _fresh(value: Any, style: JsonStyle, base_indent: str | None) -> str:
    """A value that did not exist in the file, written in the file's style at this depth."""
    if style.indent is None or base_indent is None:
        return _dumps(value, style, separators=(style.item_separator, style.key_separator))
    text = _dumps(value, style, indent=style.indent, separators=(",", style.key_separator))
    return text.replace("\n", style.newline + base_indent)


def _inline_separators(node: _Node, text: str, style: JsonStyle) -> tuple[str, str]:
    """Item and key separators of a container the file wrote on one line."""
    # A pretty-printed file's one-line containers read `[1, 2]` unless they show otherwise.
    item_separator = ", " if style.indent is not None else style.item_separator
    key_separator = style.key_separator
    items = _items(node, text) if node.kind == "array" else []
    members = _members(node, text) if node.kind == "object" else []
    if len(items) > 1:
        item_separator = text[items[0].end : items[1].start]
    elif members:
        _, (_, key_end), first = members[0]
        key_separator = text[key_end : first.start]
        if len(members) > 1:
            item_separator = text[first.end : members[1][1][0]]
    return item_separator, key_separator


def _emit(value: Any, node: _Node | None, text: str, style: JsonStyle, base_indent: str | None) -> str:
    if node is not None and not node.repeats_key and same_json(value, node.value):
        return text[node.start : node.end]
    if isinstance(value, dict) and node is not None and node.kind == "object" and _members(node, text):
        return _emit_object(value, node, text, style, base_indent)
    if isinstance(value, list) and node is not None and node.kind == "array" and value and _items(node, text):
        return _emit_array(value, node, text, style, base_indent)
    if node is not None and node.kind in ("object", "array") and "\n" not in text[node.start : node.end]:
        # A container the file kept on one line stays on one line, with its own separators.
        item_separator, key_separator = _inline_separators(node, text, style)
        return _dumps(value, style, separators=(item_separator, key_separator))
    return _fresh(value, style, base_indent)


def _emit_array(value: list[Any], node: _Node, text: str, style: JsonStyle, base_indent: str | None) -> str:
    """Rebuild an array item by item: unchanged items and the text between them keep their bytes."""
    lead = text[node.start + 1 : node.items[0].start]
    tail = text[node.items[-1].end : node.end - 1]
    gaps = [text[a.end : b.start] for a, b in zip(node.items, node.items[1:], strict=False)]
    multiline = "\n" in lead
    child_indent = lead.rsplit("\n", 1)[1] if multiline else None
    if gaps:
        extra_gap = gaps[-1]
    elif multiline:
        extra_gap = "," + lead
    else:
        extra_gap = ", " if style.indent is not None else style.item_separator
    parts = [
        _emit(item, node.items[index] if index < len(node.items) else None, text, style, child_indent)
        for index, item in enumerate(value)
    ]
    out = [parts[0]]
    for index, part in enumerate(parts[1:]):
        out.append(gaps[index] if index < len(gaps) else extra_gap)
        out.append(part)
    return "[" + lead + "".join(out) + tail + "]"


def _emit_object(value: dict[str, Any], node: _Node, text: str, style: JsonStyle, base_indent: str | None) -> str:
    """Rebuild an object member by member: unchanged members keep their exact text."""
    lead = text[node.start + 1 : node.members[0][1][0]]
    tail = text[node.members[-1][2].end : node.end - 1]
    _, (_, key_end), first_child = node.members[0]
    key_separator = text[key_end : first_child.start]
    item_separator = text[first_child.end : node.members[1][1][0]] if len(node.members) > 1 else "," + lead
    multiline = "\n" in lead
    child_indent = lead.rsplit("\n", 1)[1] if multiline else None
    # The last copy of a repeated key is the one Python's json read; the others are dropped.
    by_key = {key: (span, child) for key, span, child in node.members}
    last_index = {key: index for index, (key, _, _) in enumerate(node.members)}
    # The text before each member after the first (comma and whitespace), as the file wrote it.
    gaps = [text[a[2].end : b[1][0]] for a, b in zip(node.members, node.members[1:], strict=False)]
    keys = list(value)
    original_keys = [key for key, _, _ in node.members]
    if len(original_keys) > 2 and original_keys == sorted(original_keys):
        # A file written with sorted keys (transformers, speculators) gets new keys in place.
        keys = sorted(keys)
    elif len(set(original_keys)) < len(original_keys):
        # A repeated key stays where its last copy stood; keys new to the file follow.
        last_seen = {key: index for index, key in enumerate(original_keys)}
        keys.sort(key=lambda key: last_seen.get(key, len(original_keys)))
    out: list[str] = []
    previous: int | None = -1
    for key in keys:
        item = value[key]
        index = last_index.get(key)
        if index is not None:
            (key_start, _), child = by_key[key]
            # The key and its own separator keep their bytes ("a" : 1 stays spaced that way).
            member = text[key_start : child.start] + _emit(item, child, text, style, child_indent)
        else:
            member = _dumps(key, style) + key_separator + _fresh(item, style, child_indent)
        if out:
            follows_in_file = index is not None and previous is not None and 0 <= previous < index
            out.append(gaps[index - 1] if follows_in_file and index is not None else item_separator)
        out.append(member)
        previous = index
    if not out:
        return "{}"
    return "{" + lead + "".join(out) + tail + "}"


def dumps_like(value: Any, original: str | None, *, style_from: str | None = None) -> str:
    """Serialize `value` reusing `original`'s bytes for every member that did not change.

    With no original, the value is written fresh in the style of `style_from` (or 2-space
    indent, UTF-8, one trailing newline). `dumps_like(json.loads(text), text) == text` for any
    valid JSON text.
    """
    if original is not None:
        try:
            # Member by member at the top (an edit reaches the root); each member decoded whole.
            root = _parse_members(original, 0)
        except (ValueError, IndexError, RecursionError):
            root = None
        if root is not None:
            style = detect_style(original, root)
            lead = original[: root.start]
            trailing = original[root.end :]
            return lead + _emit(value, root, original, style, "") + trailing
    style = detect_style(style_from) if style_from is not None else JsonStyle()
    return _fresh(value, style, "") + style.trailing


def _node_at(text: str, path: tuple[str, ...]) -> _Node | None:
    """The node of the object member at `path` in the JSON `text` (None: absent or unreadable)."""
    try:
        node = _parse(text, 0)
        for key in path:
            if node.kind != "object" or node.repeats_key:
                return None
            node = next((child for name, _, child in _members(node, text) if name == key), None)  # type: ignore[assignment]
            if node is None:
                return None
    except (ValueError, IndexError, RecursionError):
        return None
    return node


def _line_indent(text: str, pos: int) -> str:
    """The whitespace that starts the line holding offset `pos`."""
    start = text.rfind("\n", 0, pos) + 1
    return text[start : _skip(text, start)].replace("\n", "").replace("\r", "")


def embed_text(text: str, path: tuple[str, ...], inner: str) -> str:
    """`text` with the value at `path` written as the JSON document `inner` (its bytes, re-indented
    to that depth), where both hold the same value; else `text` unchanged.

    Why: a translated config keeps its source under a record (convert.translate); written fresh,
    the record loses the source's own layout (one-line lists, say), and converting back could not
    give the source's bytes.
    """
    node = _node_at(text, path)
    try:
        inner_root = _parse(inner, 0)
    except (ValueError, IndexError, RecursionError):
        return text
    if node is None or node.kind != "object" or inner_root.repeats_key or not same_json(node.value, inner_root.value):
        return text
    base = _line_indent(text, node.start) if "\n" in text[node.start : node.end] else ""
    body = inner[inner_root.start : inner_root.end].replace("\n", "\n" + base)
    return text[: node.start] + body + text[node.end :]


def embedded_text(text: str, path: tuple[str, ...]) -> str | None:
    """The object at `path` in `text` as a document of its own, its bytes de-indented: what
    `embed_text` put there (None: absent, not an object, or not indented as one block)."""
    node = _node_at(text, path)
    if node is None or node.kind != "object":
        return None
    body = text[node.start : node.end]
    if "\n" not in body:
        return body
    base = _line_indent(text, node.end - 1)
    lines = body.split("\n")
    if not all(line.startswith(base) or not line.strip() for line in lines[1:]):
        return None
    return "\n".join([lines[0], *(line[len(base) :] for line in lines[1:])])
