"""One name per thing: no class is known by a second name, and no two classes share one.

A second name (`TargetSpec = TargetDescription`, `HubTimeout = HttpTimeout`) makes a reader ask
whether two things differ; two classes under one name (`Answer`: an HTTP response read within its
bounds, and a server's completion) make a reader take one for the other.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dflash_tools"

# Public classes two modules still both define, and why the two are told apart by their module.
SHARED_CLASS_NAMES = {
    # The plugin's decision on one vLLM (patch / native / refuse) and convert's decision on one key.
    "Decision": {"vllm_plugin/__init__.py", "convert/decide.py"},
}


def module_trees() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(PACKAGE)): ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_no_class_has_a_second_name() -> None:
    classes = {
        node.name for tree in module_trees().values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
    }
    aliases = [
        f"{module}: {node.targets[0].id} = {node.value.id}"
        for module, tree in module_trees().items()
        for node in tree.body
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Name)
        and node.value.id in classes
    ]
    assert aliases == []


def test_no_two_public_classes_share_a_name() -> None:
    homes: dict[str, set[str]] = defaultdict(set)
    for module, tree in module_trees().items():
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                homes[node.name].add(module)
    shared = {name: modules for name, modules in homes.items() if len(modules) > 1}
    assert shared == SHARED_CLASS_NAMES
