"""The package's shape (docs/architecture.md): no import cycles, imports point down the layers.

The import graph is read from the source with `ast`, so it also sees the imports inside functions
(the lazy ones that keep torch and the Hub client off the `--help` path), which a runtime check
of `sys.modules` would miss. Importing `a.b.c` also runs `a/__init__` and `a/b/__init__`; those
implicit edges are not counted, or every package that re-exports its modules would be a cycle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "dflash_tools"

# Top level of dflash_tools/: the public facade and the packages, nothing else.
FACADE = {"__init__.py", "__main__.py", "errors.py", "_version.py", "findings.py", "smoke_contract.py", "documents.py"}

# What each package may import from dflash_tools (a name covers its submodules). `errors`,
# `_version`, `findings` and `documents` (the one JSON encoder of results) import nothing of ours
# and may be imported everywhere.
ANYWHERE = {"errors", "_version", "findings", "documents"}
ALLOWED: dict[str, set[str]] = {
    "findings": set(),
    "documents": set(),
    "smoke_contract": set(),
    "files": set(),
    "reading": {"files"},
    "draft": {"reading", "files"},
    "dialects": {"draft", "engine_rules"},
    "inspect": {"dialects", "draft", "reading"},
    "convert": {"inspect", "dialects", "draft", "reading", "files", "engine_rules", "serving", "plan"},
    "engine_rules": set(),
    "vllm_plugin": {"engine_rules"},
    "serving": {"engine_rules", "inspect", "dialects", "draft", "reading", "vllm_plugin"},
    "plan": {"serving", "engine_rules", "inspect", "draft", "reading"},
    "reference_engine": {"inspect", "draft", "reading", "smoke_contract"},
    "smoke": {
        "reference_engine",
        "plan",
        "serving",
        "engine_rules",
        "inspect",
        "draft",
        "reading",
        "vllm_plugin",
        "smoke_contract",
    },
    "cli": {
        "inspect",
        "convert",
        "smoke",
        "plan",
        "serving",
        "engine_rules",
        "dialects",
        "draft",
        "reading",
        "files",
        "smoke_contract",
    },
    "__init__": {"inspect", "convert", "plan", "serving", "smoke"},
    "__main__": {"cli"},
}


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of `package` under `root`."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports anywhere in its body (functions included)."""
    modules = module_files(root, package)

    def owner(name: str) -> str | None:
        # `from a.b import c` names module a.b.c when it exists, else something defined in a.b.
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                edges.update(owner(alias.name) for alias in node.names if alias.name.split(".")[0] == package)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != package:
                    continue
                edges.update(owner(f"{target}.{alias.name}") for alias in node.names)
        edges.discard(None)
        edges.discard(module)
        graph[module] = {e for e in edges if e is not None}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_no_import_cycles() -> None:
    graph = import_graph(ROOT, PACKAGE)
    assert len(graph) > 50  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_cycle_detection_sees_function_local_imports(tmp_path: Path) -> None:
    """The check above can fail: a cycle closed by an import inside a function is found."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub.b import helper\n")
    (package / "sub" / "b.py").write_text("def helper():\n    from pkg import a\n    return a\n")
    (package / "c.py").write_text("from . import a\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"} and graph["pkg.c"] == {"pkg.a"}
    assert find_cycle(graph) in (["pkg.a", "pkg.sub.b", "pkg.a"], ["pkg.sub.b", "pkg.a", "pkg.sub.b"])
    (package / "sub" / "b.py").write_text("def helper():\n    return 1\n")
    assert find_cycle(import_graph(tmp_path, "pkg")) is None


# The checkout's fixture factory and demo training, outside the wheel: it may use these layers of
# the package, and the package never imports it (pyproject.toml builds the wheel from dflash_tools/).
TESTING = "dflash_tools_testing"
TESTING_MAY_IMPORT = {"reading", "reference_engine"}


def test_the_fixture_factory_stays_outside_the_package() -> None:
    inside = {m: sorted(t for t in ts if t.split(".")[0] == TESTING) for m, ts in import_graph_of(PACKAGE).items()}
    assert {m: ts for m, ts in inside.items() if ts} == {}
    used = {t.split(".")[1] for ts in import_graph_of(TESTING).values() for t in ts if t.split(".")[0] == PACKAGE}
    assert used <= TESTING_MAY_IMPORT | ANYWHERE, sorted(used)


def import_graph_of(package: str) -> dict[str, set[str]]:
    """File -> every dotted name it imports (anywhere in its body), as written."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[str(path.relative_to(ROOT))] = targets
    return graph


def test_top_level_holds_only_the_facade_and_packages() -> None:
    top = ROOT / PACKAGE
    modules = {p.name for p in top.glob("*.py")}
    assert modules == FACADE
    packages = {p.name for p in top.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(ALLOWED) - {"__init__", "__main__"} - {m.removesuffix(".py") for m in FACADE}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_point_down_the_layers(layer: str) -> None:
    allowed = ALLOWED[layer] | ANYWHERE | {layer}
    wrong = []
    for module, targets in import_graph(ROOT, PACKAGE).items():
        if layer_of(module) != layer:
            continue
        for target in sorted(targets):
            name = target.removeprefix(PACKAGE + ".")
            if target == PACKAGE or not any(name == a or name.startswith(a + ".") for a in allowed):
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_every_package_says_what_it_holds_and_may_import() -> None:
    for init in sorted((ROOT / PACKAGE).glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert doc, f"{init} has no docstring"
        assert "import" in doc.lower(), f"{init}: the docstring does not say what the package may import"


def test_the_core_imports_neither_typer_nor_rich() -> None:
    offenders = []
    for module, path in module_files(ROOT, PACKAGE).items():
        if layer_of(module) == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            offenders += [f"{module}: {n}" for n in names if n.split(".")[0] in ("typer", "rich")]
    assert not offenders


def test_nothing_cites_notes_outside_the_repository() -> None:
    """Code, tests, docs and scripts cite the project's own docs (docs/rules.md, ...) or engine files,
    never the steering notes that live beside the checkout (their SPEC or research/ files)."""
    pattern = re.compile(r"\bSPEC\s*§|\bthe SPEC\b|research/[a-z-]+\.md|\.\./shared\b|shared/SPEC")
    roots = ["dflash_tools", "tests", "bench", "fuzz", "docs", ".ci", "configs"]
    files = [p for root in roots for p in (ROOT / root).rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES]
    files += [ROOT / "README.md", ROOT / "pyproject.toml"]
    this = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in files
        if path.resolve() != this
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []


SOURCE_SUFFIXES = {".py", ".md", ".sh", ".toml", ".json", ".txt"}


MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    """The house keeps rooms a reader need not scroll: a module that grows past this splits."""
    long = {
        str(path.relative_to(ROOT)): count
        for path in sorted((ROOT / PACKAGE).rglob("*.py"))
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
