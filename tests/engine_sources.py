"""Reading an engine's released source files without importing the engine (for the tiers).

SGLang cannot be imported here (its parser module imports its GPU kernels) and a vLLM wheel of
another release is not installed: both are read as text, from the wheel (a zip) or an unpacked
folder, and parsed with `ast`. `extract` executes a few pure-Python definitions of a module
(a parser, a formula) in a namespace of their own, so a test can run the engine's own code on
our configs; everything else in the module (torch, kernels) is never executed.
"""

from __future__ import annotations

import ast
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dflash_tools.engine_rules import EngineRules

# A cite names files as `package/path/file.py`, optionally followed by `: Name` or `: Class.method`.
CITED = re.compile(r"(?P<file>[a-z_]+/[\w/]*\.py)(?:: (?P<name>[A-Za-z_][\w.]*))?")


class Sources:
    """The files of one released package, from a wheel or an unpacked folder."""

    def __init__(self, location: Path) -> None:
        self.location = location
        self._zip = zipfile.ZipFile(location) if location.is_file() else None
        self._cache: dict[str, str | None] = {}

    def read(self, path: str) -> str | None:
        if path not in self._cache:
            if self._zip is not None:
                try:
                    self._cache[path] = self._zip.read(path).decode("utf-8")
                except KeyError:
                    self._cache[path] = None
            else:
                file = self.location / path
                self._cache[path] = file.read_text(encoding="utf-8") if file.is_file() else None
        return self._cache[path]

    def tree(self, path: str) -> ast.Module:
        text = self.read(path)
        assert text is not None, f"{path} is not in {self.location}"
        return ast.parse(text, path)

    def names(self, pattern: str) -> list[str]:
        """Files whose path matches `pattern` (a regular expression)."""
        if self._zip is not None:
            candidates: Iterable[str] = self._zip.namelist()
        else:
            candidates = (str(p.relative_to(self.location)) for p in self.location.rglob("*.py"))
        return sorted(name for name in candidates if re.fullmatch(pattern, name))


def top_level(module: ast.Module) -> dict[str, ast.stmt]:
    """Name -> the top-level definition or assignment that binds it."""
    found: dict[str, ast.stmt] = {}
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node
    return found


def defines(module: ast.Module, dotted: str) -> bool:
    """Whether `dotted` (`name` or `Class.method`) is defined in the module. A plain name may
    also be a method or nested function: cites name the function a rule lives in."""
    head, _, attribute = dotted.partition(".")
    binding = top_level(module).get(head)
    if attribute:
        return isinstance(binding, ast.ClassDef) and any(
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attribute for node in binding.body
        )
    if binding is not None:
        return True
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == head
        for node in ast.walk(module)
    )


def cite_problems(rules: EngineRules, sources: Sources) -> list[str]:
    """Every cited file that is missing, and every cited name its file does not define."""
    problems = []
    for cite in rules.cites():
        for match in CITED.finditer(cite):
            path, name = match["file"], match["name"]
            if sources.read(path) is None:
                problems.append(f"{path}: not in the release ({cite!r})")
            elif name is not None and not defines(sources.tree(path), name):
                problems.append(f"{path}: defines no {name} ({cite!r})")
    return problems


def names_read(module: ast.Module) -> set[str]:
    """Every string constant and attribute name in a module: a config key is read as
    `config.get("key")`, `config["key"]` or `config.key`."""
    found: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def key_problems(rules: EngineRules, sources: Sources) -> list[str]:
    """Every location of a key rule whose key name is not a string in the files its rule cites."""
    problems = []
    for rule in rules.keys:
        files = {match["file"] for match in CITED.finditer(rule.cite)}
        strings: set[str] = set()
        for path in files:
            if sources.read(path) is not None:
                strings |= names_read(sources.tree(path))
        for location in rule.locations:
            for part in location.split("."):
                if part not in strings:
                    problems.append(
                        f"{rule.key} ({rule.path}): {part!r} of {location} is read nowhere in {sorted(files)}"
                    )
    return problems


def function_source(sources: Sources, path: str, dotted: str) -> str:
    """The source text of a function or method (`name` or `Class.method`)."""
    text = sources.read(path)
    assert text is not None
    module = ast.parse(text)
    head, _, attribute = dotted.partition(".")
    node: ast.AST | None = top_level(module).get(head)
    if attribute and isinstance(node, ast.ClassDef):
        node = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == attribute)
    assert node is not None, f"{path}: no {dotted}"
    segment = ast.get_source_segment(text, node)
    assert segment is not None
    return segment


def extract(sources: Sources, path: str, names: Iterable[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute the top-level definitions `names` of one module (and nothing else) in `namespace`.

    The module's imports are not run: `namespace` supplies what the definitions use. Annotations
    stay unevaluated (`from __future__ import annotations`), as in the module itself.
    """
    module = sources.tree(path)
    bindings = top_level(module)
    missing = [name for name in names if name not in bindings]
    assert not missing, f"{path} defines none of {missing}"
    body: list[ast.stmt] = [ast.ImportFrom(module="__future__", names=[ast.alias(name="annotations")], level=0)]
    body += [bindings[name] for name in dict.fromkeys(names)]
    code = compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), path, "exec")
    exec(code, namespace)  # the engine's own released definitions, chosen by name
    return namespace
