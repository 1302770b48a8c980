"""A translated config keeps its source's bytes in its record (`embed_text`), and converting back
gets them out again (`embedded_text`): one-line lists, key order, CRLF line ends and all."""

from __future__ import annotations

import json

import pytest

from dflash_tools.convert.json_edit import dumps_like, embed_text, embedded_text

SOURCES = [
    '{\n  "architectures": ["DFlashDraftModel"],\n  "layer_types": [\n    "full_attention"\n  ],\n'
    '  "dflash_config": {"target_layer_ids": [1, 2, 3]}\n}',
    '{\r\n    "b": [1,2],\r\n    "a": {"x": [ "y" ]}\r\n}',
    '{"a": [1, 2], "b": {"c": null}}',
]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("style_from", ['{\n  "k": 1\n}\n', '{\r\n\t"k": 1\r\n}', '{"k": 1}'])
def test_the_record_keeps_the_source_bytes(source: str, style_from: str) -> None:
    outer = {"kind": "translated", "record": {"dialect": "zlab", "config": json.loads(source)}}
    fresh = dumps_like(outer, None, style_from=style_from)
    embedded = embed_text(fresh, ("record", "config"), source)
    assert json.loads(embedded) == outer
    assert embedded_text(embedded, ("record", "config")) == source


def test_a_source_of_another_value_is_not_embedded() -> None:
    fresh = dumps_like({"record": {"config": {"a": [1]}}}, None)
    assert embed_text(fresh, ("record", "config"), '{"a": [2]}') == fresh
    assert embed_text(fresh, ("record", "missing"), '{"a": [1]}') == fresh
