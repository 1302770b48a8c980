"""No code outside `dialects/` branches on a dialect's name (docs/adding-a-dialect.md).

A comparison with a family name or a dialect value (`family == "speculators"`), or a table keyed
by one (`{"zlab": ...}`), is a fact about a format that belongs in its spec. The engine tables
(`engine_rules/`: one `FormatRule` row per format is a step of adding a dialect) and the fixture
factory (`testing/`: its config writers are another) are the places such names belong. Each
branch that remains elsewhere is listed below with its reason: a new branch fails, and a file
whose branches are all gone must be struck off.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from dflash_tools import dialects

PACKAGE = Path(__file__).resolve().parents[2] / "dflash_tools"
NAMES = {spec.family for spec in dialects.SPECS} | {d.value for spec in dialects.SPECS for d in spec.dialects}
# Where dialect names are the data: the dialect modules, the engine tables' rows, the fixtures.
HOMES = ("dialects/", "engine_rules/", "testing/")

# file -> (branches, why it remains)
REMAINING: dict[str, tuple[int, str]] = {
    "convert/plan.py": (
        3,
        "convert's translation policy between the two writer formats: only speculators records a verifier, "
        "z-lab is the form a speculators draft is translated into, z-lab has no embed_tokens",
    ),
    "convert/translate.py": (
        6,
        "the cross-dialect refusals and mappings are rules of one direction between the two named writers",
    ),
    "cli/examples_run.py": (7, "the bundled examples' descriptions, keyed by folder names that match dialect names"),
    "vllm_plugin/markers.py": (1, "a marker-file key naming vLLM's speculator objects, not the speculators format"),
}


def _is_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_name(item) for item in node.elts)
    return False


def dialect_branches(source: str) -> list[int]:
    """Line numbers of comparisons with, and dict literals keyed by, a family name or dialect value."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_is_name(side) for side in (node.left, *node.comparators)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Dict):
            lines.extend(key.lineno for key in node.keys if key is not None and _is_name(key))
    return lines


def test_no_module_outside_the_dialects_branches_on_a_dialect_name() -> None:
    found: Counter[str] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if not name.startswith(HOMES):
            found.update({name: len(dialect_branches(path.read_text(encoding="utf-8")))})
    branching = {name for name, count in found.items() if count}
    # No file may start branching, and a file that stopped is struck off the list.
    assert branching == set(REMAINING)
    # Nor may a listed file grow a branch (fewer is fine: lower the count when you remove one).
    assert {name: found[name] for name in branching if found[name] > REMAINING[name][0]} == {}


def test_the_scan_sees_a_branch() -> None:
    """The check above can fail: each form it looks for is found."""
    assert dialect_branches('if desc.dialect.family == "zlab":\n    pass\n') == [1]
    assert dialect_branches('x = family in ("speculators", "open-spec")\n') == [1]
    assert dialect_branches('where = {"zlab": "dflash_config.mask_token_id"}\n') == [1]
    assert dialect_branches('if rules.engine == "sglang":\n    pass\n') == []
