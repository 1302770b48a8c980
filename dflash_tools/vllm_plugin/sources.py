"""Read vLLM's source files without importing vLLM, and cut single functions out of them.

The same code reads an installed vLLM through its package folder, for the launcher (without
importing it) and inside the plugin, so the fingerprint that the plugin checks at runtime is the
one the real-vLLM tier checks against the installed release.
Paths are POSIX paths relative to the folder that holds the `vllm` package, e.g.
`vllm/config/vllm.py`.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

SourceReader = Callable[[str], str | None]
"""Relative path -> file text, or None when the file does not exist."""


def directory_reader(root: Path) -> SourceReader:
    """Files under `root`, the folder that contains the `vllm` package (site-packages)."""

    def read(relative: str) -> str | None:
        path = root.joinpath(*PurePosixPath(relative).parts)
        try:
            return path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    return read


def installed_package_root(package: str = "vllm") -> Path | None:
    """The folder holding `package`, found without importing it (None when not installed)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


@dataclass(frozen=True)
class FunctionSource:
    """One function's text as it stands in a file, and where."""

    qualname: str
    text: str
    first_line: int  # the first decorator's line, else the `def` line (1-based), as in co_firstlineno
    def_line: int
    last_line: int

    @property
    def sha256(self) -> str:
        return hashlib.sha256(normalize(self.text).encode("utf-8")).hexdigest()


def normalize(text: str) -> str:
    """Dedented, trailing whitespace stripped: indentation of the class must not matter."""
    lines = [line.rstrip() for line in textwrap.dedent(text).strip("\n").splitlines()]
    return "\n".join(lines) + "\n"


def find_function(module_text: str, qualname: str) -> FunctionSource | None:
    """`Class.method` or `function` (property getters by their name) from a module's text."""
    try:
        tree = ast.parse(module_text)
    except SyntaxError:
        return None
    parts = qualname.split(".")
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        found: ast.AST | None = None
        for stmt in body:
            if last and isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == part:
                found = stmt
                # A property setter after the getter has the same name; the getter comes first.
                break
            if not last and isinstance(stmt, ast.ClassDef) and stmt.name == part:
                found = stmt
                break
        if found is None:
            return None
        node = found
        if not last:
            assert isinstance(found, ast.ClassDef)
            body = found.body
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    lines = module_text.splitlines()
    end = node.end_lineno or node.lineno
    text = "\n".join(lines[node.lineno - 1 : end])
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return FunctionSource(qualname=qualname, text=text, first_line=first, def_line=node.lineno, last_line=end)
