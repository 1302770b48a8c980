"""The SGLang table's architecture rows against the wheel's own model registry (docs/engines.md).

SGLang registers a model class by listing it in its file's `EntryClass`
(sglang/srt/models/*.py). Every DFlash-family class any of those lists names must have a row in
the table, with its file and class as the loader and the file's `EntryClass` as the cite, and
every row must be such a class: a release that registers a new one fails this tier until the
table has a row for it.
"""

from __future__ import annotations

import ast
import re

import pytest

from dflash_tools.engine_rules import ENGINE_RULES
from tests.engine_sources import Sources, top_level

pytestmark = pytest.mark.real_sglang

RULES = ENGINE_RULES["sglang==0.5.23"]
# DFlash-family by name: DFlash, DFlash2 and their variants, DSpark, XPress, LiLiCorr, the Muse
# Glimmer assistant; and the names a DFly, DFlare or Domino class would carry.
DFLASH_FAMILY = re.compile(r"DFlash|DSpark|XPress|LiLiCorr|GlimmerAssistant|DFly|DFlare|Domino", re.IGNORECASE)


def entry_classes(sources: Sources, path: str) -> list[str]:
    node = top_level(sources.tree(path)).get("EntryClass")
    if not isinstance(node, ast.Assign):
        return []
    value = node.value
    elements = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
    return [element.id for element in elements if isinstance(element, ast.Name)]


def test_every_registered_dflash_family_class_has_a_row_and_every_row_a_class(sglang: Sources) -> None:
    registered: dict[str, tuple[str, str]] = {}
    for path in sglang.names(r"sglang/srt/models/[^/]+\.py"):
        for name in entry_classes(sglang, path):
            if DFLASH_FAMILY.search(name):
                stem = path.rsplit("/", 1)[1].removesuffix(".py")
                registered[name] = (f"{stem}.{name}", f"{path}: EntryClass")
    assert "MuseGlimmerAssistantModel" in registered and len(registered) >= 10
    rows = {row.name: (row.loader, row.cite) for row in RULES.architectures}
    assert sorted(set(registered) - set(rows)) == [], "registered, with no row in the table"
    assert sorted(set(rows) - set(registered)) == [], "rows the release does not register"
    assert rows == registered
    for route in RULES.routes:
        assert set(route.architectures) == {row.name for row in RULES.architectures if row.algorithm == route.algorithm}
