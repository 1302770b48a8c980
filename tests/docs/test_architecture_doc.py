"""docs/architecture.md describes the house as it is: checked against the packages, their
docstrings and the import map of tests/test_architecture.py, so that it cannot keep describing a
package or module that moved (it once listed `engine/`, `draft.findings` and `smoke.contract`
long after they were gone).

- The package map has one row per package of `dflash_tools/` and per top-level module, and no
  other; each row's "may import" column names exactly what the import map allows it.
- Each package's docstring says the same in its `Imports:` sentence.
- Every module, path or dotted name the page writes in backticks exists: a path in the checkout,
  a module of the package, or a name a module defines; a bare name in a row's "holds" column is a
  module of that package or a name defined in it or in a package it may import.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tests.test_architecture import ALLOWED, ANYWHERE, FACADE, PACKAGE, ROOT

PAGE = ROOT / "docs" / "architecture.md"
SOURCE = ROOT / PACKAGE
# What every layer may import without saying so (tests/test_architecture.py's ANYWHERE, and the
# two modules that import nothing of ours).
UNSAID = ANYWHERE | {"errors", "_version"}
TICKED = re.compile(r"`([^`]+)`")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def packages() -> set[str]:
    return {p.parent.name for p in SOURCE.glob("*/__init__.py")}


def layers() -> set[str]:
    """Everything the import map names: the packages and the top-level modules."""
    return packages() | {name.removesuffix(".py") for name in FACADE}


def package_map() -> list[tuple[list[str], str, str]]:
    """The rows of the page's package map: (the names in the first column, holds, may import)."""
    section = PAGE.read_text(encoding="utf-8").split("## Package map", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((TICKED.findall(cells[0]), cells[1], cells[2]))
    return rows


def layer_of_cell(name: str) -> str:
    """`files/` -> files; `__init__.py` -> __init__."""
    return name.rstrip("/").removesuffix(".py")


def named_layers(text: str) -> set[str]:
    return {token for token in TICKED.findall(text) if token in layers()} - UNSAID


def test_the_package_map_has_a_row_for_each_package_and_top_level_module() -> None:
    listed = [layer_of_cell(name) for names, _, _ in package_map() for name in names]
    assert len(listed) == len(set(listed)), listed
    expected = packages() | {name.removesuffix(".py") for name in FACADE}
    assert set(listed) == expected, f"rows for packages that are gone: {sorted(set(listed) - expected)}; " + (
        f"packages without a row: {sorted(expected - set(listed))}"
    )


def test_each_row_may_import_what_the_import_map_allows() -> None:
    wrong = {}
    for names, _, may_import in package_map():
        allowed = set().union(*(ALLOWED.get(layer_of_cell(name), set()) for name in names)) - UNSAID
        if named_layers(may_import) != allowed:
            wrong[", ".join(names)] = (sorted(named_layers(may_import)), sorted(allowed))
    assert wrong == {}, "row: (the page says, the import map allows)"


def imports_sentence(docstring: str) -> str:
    """The sentence of a package docstring that starts with `Imports:` (what may be imported)."""
    start = docstring.find("Imports:")
    assert start >= 0
    rest = docstring[start:]
    end = re.search(r"\.(\s|$)", rest)
    return rest[: end.start()] if end else rest


def test_each_package_docstring_says_what_the_import_map_allows() -> None:
    wrong = {}
    for package in sorted(packages()):
        docstring = ast.get_docstring(ast.parse((SOURCE / package / "__init__.py").read_text(encoding="utf-8"))) or ""
        said = named_layers(imports_sentence(docstring)) - {package}
        allowed = ALLOWED[package] - UNSAID
        if said != allowed:
            wrong[package] = (sorted(said), sorted(allowed))
    assert wrong == {}, "package: (its docstring says, the import map allows)"


@cache
def defined(module: Path) -> frozenset[str]:
    """The top-level names a module defines or imports."""
    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


def module_file(dotted: str) -> Path | None:
    """`draft.target` -> dflash_tools/draft/target.py (or the package's __init__.py)."""
    path = SOURCE.joinpath(*dotted.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def dotted_exists(dotted: str) -> bool:
    """A module of the package, or a name defined in one (`serving.engine_view.engine_view`)."""
    parts = dotted.removeprefix(PACKAGE + ".").split(".")
    for cut in range(len(parts), 0, -1):
        module = module_file(".".join(parts[:cut]))
        if module is not None:
            rest = parts[cut:]
            return not rest or (len(rest) == 1 and rest[0] in defined(module))
    return False


def path_exists(token: str) -> bool:
    return any((base / token).exists() for base in (SOURCE, ROOT))


def package_defines(package: str, name: str) -> bool:
    folder = SOURCE / package
    if any(folder.rglob(f"{name}.py")) or any(folder.rglob(f"{name}/__init__.py")):
        return True
    return any(name in defined(module) for module in folder.rglob("*.py"))


def test_every_name_the_page_writes_exists() -> None:
    page = PAGE.read_text(encoding="utf-8")
    missing = []
    for token in sorted(set(TICKED.findall(page))):
        if " " in token or "NAME" in token:
            continue  # a command line, or a placeholder (`cli/NAME_cmd.py`)
        if "/" in token or token.endswith(".py"):
            if re.fullmatch(r"[\w./-]+", token) and not path_exists(token):
                missing.append(token)
        elif (
            re.fullmatch(r"[a-z_]+(\.[A-Za-z_]\w*)+", token)
            and token.split(".")[0] in layers() | {PACKAGE}
            and not dotted_exists(token)
        ):
            missing.append(token)
    assert missing == []


def test_every_name_a_row_says_its_package_holds_is_there() -> None:
    missing = {}
    for names, holds, _ in package_map():
        homes = {layer_of_cell(name) for name in names if name.endswith("/")}
        if not homes:
            continue
        (package,) = homes
        searched = {package} | (ALLOWED[package] & packages())
        absent = [
            token
            for token in TICKED.findall(holds)
            if IDENTIFIER.fullmatch(token)
            and "NAME" not in token  # a placeholder (`NAME_cmd`)
            and token not in layers()
            and not any(package_defines(home, token) for home in searched)
        ]
        if absent:
            missing[package] = absent
    assert missing == {}
