"""Dotted paths into a config (`draft.config_paths`): one home for reading and writing them."""

from __future__ import annotations

import ast
from pathlib import Path

from dflash_tools.draft.config_paths import find_path, set_path, values_at

PACKAGE = Path(__file__).resolve().parents[2] / "dflash_tools"
HOME = PACKAGE / "draft" / "config_paths.py"

# Modules that split a dotted name for another purpose than walking a config, and why.
OTHER_DOTTED_NAMES = {
    "vllm_plugin/sources.py": "a function's qualified name (`Class.method`), walked through a syntax tree",
    "inspect/report.py": "the natural sort key of a tensor name (`layers.10.mlp`)",
    "documents.py": "a result's attribute path (`site.path`), walked through its objects",
}


def test_find_and_values_at_read_what_is_there() -> None:
    config = {"a": {"b": None, "c": 1}, "d": [1], "e": 2}
    assert find_path(config, "a.b") == (True, None)  # a null is present (engines stop at it)
    assert find_path(config, "a.x") == (False, None)
    assert find_path(config, "d.0") == (False, None)  # a path names objects, never a list index
    assert find_path(config, "e.f") == (False, None)
    assert values_at(config, ["e", "a.c", "a.x", "a.b"]) == {"e": 2, "a.c": 1, "a.b": None}


def test_set_path_makes_the_objects_on_the_way() -> None:
    config: dict[str, object] = {"a": 1, "b": {"keep": True}}
    set_path(config, "b.c.d", 2)
    set_path(config, "a.x", 3)  # a value on the way that is not an object is replaced
    assert config == {"a": {"x": 3}, "b": {"keep": True, "c": {"d": 2}}}


def splits_on_dots(path: Path) -> list[int]:
    """Lines where a module splits a string on "." (`x.split(".")`): how a dotted walk starts."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "split"
            and [getattr(arg, "value", None) for arg in node.args] == ["."]
        ):
            lines.append(node.lineno)
    return lines


def test_no_module_walks_a_dotted_path_of_its_own() -> None:
    """A reader or writer of `a.b.c` elsewhere is a copy of `config_paths` (three readers and two
    writers were, each with its own idea of a list on the way)."""
    found = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != HOME and (lines := splits_on_dots(path))
    }
    assert set(found) == set(OTHER_DOTTED_NAMES), found
