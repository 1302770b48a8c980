"""What the docs name exists: library names, the bundled examples, smoke-test's serving values.

Each test here failed on the docs as they were (issue 22): docs/convert.md placed
`VerificationFailed` under `dflash_tools.errors`, README's examples table lacked
`example:vllm-cpu-demo/*`, and docs/smoke-test.md did not explain the serving values `stock` and
`unknown` that smoke-test prints.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import dflash_tools
from dflash_tools.cli.examples_run import all_examples
from dflash_tools.errors import DflashToolsError
from tests.docs.doc_blocks import ROOT, blocks, documents

_DOTTED = re.compile(r"`(dflash_tools(?:\.\w+)+)`")


def docs_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in documents())


def resolve(dotted: str) -> object:
    """A module, or an attribute of the longest importable prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            value = getattr(value, name)
        return value
    raise ImportError(dotted)


def test_every_dotted_library_name_in_the_docs_exists() -> None:
    missing = []
    for dotted in sorted(set(_DOTTED.findall(docs_text()))):
        try:
            resolve(dotted)
        except (ImportError, AttributeError):
            missing.append(dotted)
    assert missing == []


def exception_classes() -> dict[str, type]:
    """Every DflashToolsError subclass of the core (the CLI and torch-only modules left out)."""
    found: dict[str, type] = {}
    for module in pkgutil.walk_packages(dflash_tools.__path__, "dflash_tools."):
        if module.name.startswith(("dflash_tools.cli", "dflash_tools.reference_engine", "dflash_tools.vllm_plugin")):
            continue
        if module.name.endswith("__main__"):
            continue
        loaded = importlib.import_module(module.name)
        for name, value in vars(loaded).items():
            if inspect.isclass(value) and issubclass(value, DflashToolsError) and value.__module__ == module.name:
                found[name] = value
    return found


def test_exceptions_the_docs_name_are_named_where_they_live() -> None:
    """An exception class mentioned by its bare name is also given with its module somewhere."""
    text = docs_text()
    dotted = set(_DOTTED.findall(text))
    classes = exception_classes()
    assert {"SourceError", "UsageError", "OperationError", "VerificationFailed"} <= set(classes)
    unplaced = []
    for name in classes:
        if re.search(rf"`{name}`", text) and not any(d.endswith(f".{name}") for d in dotted):
            unplaced.append(name)
    assert unplaced == [], "name the module too, e.g. `dflash_tools.errors.UsageError`"
    for name in dotted:
        if name.rsplit(".", 1)[-1] in classes:
            assert resolve(name) is classes[name.rsplit(".", 1)[-1]], name


def test_readme_lists_every_bundled_example() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Bundled examples") : readme.index("## Exit codes")]
    assert [name for name, _ in all_examples() if f"`example:{name}`" not in table] == []


def test_every_serving_value_is_explained() -> None:
    """Every word smoke-test can print as a run's `serving` (the `Serving` members) has its row."""
    from dflash_tools.smoke.run_plan import Serving

    values = {serving.value for serving in Serving}
    smoke = (ROOT / "docs" / "smoke-test.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([^`]+)` \|", smoke, re.M))
    assert sorted(values - rows) == [], "docs/smoke-test.md: add a row to the serving table"


def test_ci_runs_the_readmes_set_up_commands_word_for_word() -> None:
    """README promises that `.ci/run` runs its two set-up commands exactly."""
    # The first shell block under "Set-up" is the two commands.
    setup = next(b for b in blocks([ROOT / "README.md"]) if b.section.startswith("Set-up") and b.shell)
    # A line of .ci/run runs a command when it is the command, perhaps after VAR=value settings.
    ci_lines = {re.sub(r"^(\w+=\S+\s+)+", "", line.strip()) for line in (ROOT / ".ci" / "run").read_text().splitlines()}
    commands = setup.commands()
    assert len(commands) == 2
    missing = [command for command in commands if command not in ci_lines]
    assert missing == [], f".ci/run does not run README's {missing}"


def test_the_readme_stays_short() -> None:
    """A newcomer reads the README whole: at most 250 lines (it had grown to 262); the rest is in docs/."""
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250
