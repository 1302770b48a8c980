"""The faithful JSON rewriter changes the bytes of the edited value and nothing else, inside arrays too.

Documents are generated as text, with the spellings a careful re-serializer would "fix": `1e400`
(Infinity to Python), `0.0e0`, `-0`, `1E+2`, `\\u00e9` escapes, tabs, CRLF line ends, odd spacing.
One or two scalars anywhere (most often inside arrays) get new values, and the output must equal
the input with exactly those spans replaced.

The default run draws 300 examples; `DFLASH_TOOLS_PROPERTY_EXAMPLES=10000 python -m pytest
tests/convert/test_json_array_edits.py` is the full campaign (issue 12 asks for 10,000).
"""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_tools.convert.json_edit import dumps_like, same_json

EXAMPLES = int(os.environ.get("DFLASH_TOOLS_PROPERTY_EXAMPLES", "300"))

# (spelling in the file, value Python reads)
_NUMBER_SPELLINGS = st.sampled_from(
    ["1e400", "-1e400", "0.0e0", "-0", "-0.0", "1E+2", "1.50", "7", "0", "12345678901234567890", "2.5e-7", "1e-06"]
)
_STRING_SPELLINGS = st.sampled_from(['"a"', '"caf\\u00e9"', '"caf\u00e9"', '"\\n\\t"', '""', '"\\/"', '"x\\"y"'])
_LITERALS = st.sampled_from(["true", "false", "null"])
_SPACE = st.sampled_from(["", " ", "  ", "\t", "\n", "\r\n", "\n    ", "\r\n  ", " \n "])


@st.composite
def _document(draw: st.DrawFn, depth: int = 0) -> tuple[str, list[tuple[int, int]]]:
    """JSON text and the spans of its scalars; containers most often arrays."""
    kinds = ["scalar", "array", "array", "object"] if depth < 4 else ["scalar"]
    kind = draw(st.sampled_from(kinds)) if depth else "object"
    if kind == "scalar":
        text = draw(st.one_of(_NUMBER_SPELLINGS, _STRING_SPELLINGS, _LITERALS))
        return text, [(0, len(text))]
    count = draw(st.integers(min_value=0 if depth else 1, max_value=4))
    pieces: list[str] = ["[" if kind == "array" else "{"]
    spans: list[tuple[int, int]] = []
    offset = 1
    for index in range(count):
        if index:
            pieces.append(",")
            offset += 1
        space = draw(_SPACE)
        pieces.append(space)
        offset += len(space)
        if kind == "object":
            key = f'"k{index}"' + draw(_SPACE) + ":" + draw(_SPACE)
            pieces.append(key)
            offset += len(key)
        child, child_spans = draw(_document(depth + 1))
        spans.extend((offset + a, offset + b) for a, b in child_spans)
        pieces.append(child)
        offset += len(child)
    tail = draw(_SPACE) if count else ""
    pieces.append(tail + ("]" if kind == "array" else "}"))
    return "".join(pieces), spans


_NEW_VALUES = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.booleans(),
    st.none(),
    st.text(alphabet="abcxyz_-. ", max_size=5),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)


def _scalar_paths(text: str) -> list[list[Any]]:
    """The JSON path of every scalar, in text order (parsed by the standard library)."""
    value = json.loads(text)
    # Walk the generated structure: containers are visited in text order, so the n-th scalar
    # in a depth-first walk is the n-th span.
    paths: list[list[Any]] = []

    def walk(node: Any, path: list[Any]) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                walk(child, [*path, key])
        elif isinstance(node, list):
            for index, child in enumerate(node):
                walk(child, [*path, index])
        else:
            paths.append(path)

    walk(value, [])
    return paths


def _set(value: Any, path: list[Any], new: Any) -> None:
    for step in path[:-1]:
        value = value[step]
    value[path[-1]] = new


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=_document(), data=st.data())
def test_edits_change_only_the_edited_bytes(document: tuple[str, list[tuple[int, int]]], data: st.DataObject) -> None:
    text, spans = document
    text += data.draw(st.sampled_from(["\n", "\r\n", ""]))
    value = json.loads(text)
    assert dumps_like(value, text) == text
    if not spans:
        return
    paths = _scalar_paths(text)
    assert len(paths) == len(spans)
    chosen = sorted(set(data.draw(st.lists(st.integers(0, len(spans) - 1), min_size=1, max_size=2))))
    expected = text
    edited = json.loads(text)
    # Replace from the end so earlier offsets stay valid.
    for index in reversed(chosen):
        new = data.draw(_NEW_VALUES)
        start, end = spans[index]
        old = json.loads(text[start:end])
        _set(edited, paths[index], new)
        if not same_json(old, new):
            expected = expected[:start] + json.dumps(new) + expected[end:]
    assert dumps_like(edited, text) == expected


def test_issue_reproduction_sibling_spellings_survive_a_proposal_edit() -> None:
    text = (
        '{\r\n  "speculators_config": {\r\n    "proposal_methods": [\r\n'
        '      {"speculative_tokens": 8, "accept_tolerance": 1e400, "z": 0.0e0, "m": -0}\r\n'
        "    ]\r\n  }\r\n}\r\n"
    )
    value = json.loads(text)
    value["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 7
    assert dumps_like(value, text) == text.replace('"speculative_tokens": 8', '"speculative_tokens": 7')


def test_items_appended_to_a_crlf_array_use_crlf() -> None:
    text = '{\r\n  "a": [\r\n    1,\r\n    2\r\n  ]\r\n}\r\n'
    value = json.loads(text)
    value["a"].append({"b": 3})
    out = dumps_like(value, text)
    assert json.loads(out) == value
    assert "\n" not in out.replace("\r\n", "")
    assert out.startswith('{\r\n  "a": [\r\n    1,\r\n    2,\r\n    ')
