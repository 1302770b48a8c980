"""The JSON documents of every command on every bundled example, byte for byte against golden files.

Each case runs one command line as a user types it (`inspect`, `inspect --engine all`, with the
bundled target that fits, several sources at once, `convert --check` (and with `--for` the newest
vLLM table), `plan`, `plan --preset`, `smoke-test --dry-run`) and compares its
stdout with `tests/cli/golden/CASE.json`. A change to any JSON document, intended or not, fails
here; an intended one is committed with its regenerated golden files, so the diff of the change
shows every document it moves:

    DFLASH_TOOLS_UPDATE_GOLDEN=1 python -m pytest tests/cli/test_golden_json.py -q

(docs/development.md, "Golden JSON files"). The update writes every case's file and removes
files no case produces any more; without the variable nothing is written.

What is stripped before the comparison, and only that, because it differs between machines:

- the absolute path of the checkout (the bundled examples' and configs' locations, the draft
  folder a launch line names) becomes `<CHECKOUT>`;
- smoke-test's `vllm` and `engine_available` (which engines this Python has installed) become
  `<ENVIRONMENT>`, and its `engine_missing` (present only where the engine is not installed) is
  dropped.

No command here reports a time. The documents are otherwise compared as printed: the check that
the stripping re-serializes a document to the very bytes printed (`_normalized`) keeps the
comparison byte for byte.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dflash_tools
from dflash_tools.cli import app
from dflash_tools.engine_rules import latest

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("DFLASH_TOOLS_UPDATE_GOLDEN", "") not in ("", "0")
CHECKOUT = Path(dflash_tools.__file__).resolve().parent.parent
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = CHECKOUT / "dflash_tools" / "examples"
PRESET = GOLDEN.parent / "golden_preset.json"
NEWEST_VLLM = latest("vllm").spec  # type: ignore[union-attr]
ENVIRONMENT_KEYS = ("vllm", "engine_available")

runner = CliRunner()


def _examples() -> list[str]:
    """Every bundled example, as `example:` names (nested ones as `group/name`)."""
    return sorted(
        config.parent.relative_to(EXAMPLES).as_posix()
        for config in EXAMPLES.rglob("config.json")
        if config.parent != EXAMPLES
    )


def _is_target(name: str) -> bool:
    # The bundled targets: `tiny-target` and each demo bundle's `target`.
    return name.rsplit("/", 1)[-1] in ("target", "tiny-target")


def _target_for(draft: str) -> str:
    """The bundled target a draft pairs with: its bundle's own, else the config-only tiny target."""
    group, _, _ = draft.rpartition("/")
    return f"{group}/target" if group else "tiny-target"


def _cases() -> dict[str, list[str]]:
    cases: dict[str, list[str]] = {}
    drafts = [name for name in _examples() if not _is_target(name)]
    for name in _examples():
        slug = name.replace("/", "__")
        source = f"example:{name}"
        cases[f"inspect--{slug}"] = ["inspect", source, "--json"]
        cases[f"inspect--{slug}--engine-all"] = ["inspect", source, "--engine", "all", "--json"]
        cases[f"convert-check--{slug}"] = ["convert", source, "--check", "--json"]
        if name in drafts:
            target = f"example:{_target_for(name)}"
            paired = ["inspect", source, "-t", target, "--engine", "all", "--json"]
            cases[f"inspect--{slug}--target--engine-all"] = paired
            cases[f"plan--{slug}"] = ["plan", "-t", target, "-d", source, "--json"]
            # `--for` adds a release's engine view of the written config (`plan.engines`).
            for_vllm = ["convert", source, "--check", "--for", NEWEST_VLLM, "--json"]
            cases[f"convert-check--{slug}--for-newest-vllm"] = for_vllm
    # Several sources: one array, an unreadable one as an error document in its place.
    several = ["example:zlab-dflash", "example:zlab-dflash2-anchor-first", "./no-such-draft"]
    cases["inspect--several--engine-all"] = ["inspect", *several, "--engine", "all", "--json"]
    # No bundled preset plans offline (their targets and drafts are on the Hub): a preset file of
    # bundled examples stands in, so the preset merge is covered too.
    cases["plan--preset"] = ["plan", "--preset", str(PRESET), "--json"]
    for bundle, runtime in (
        ("engine-demo", ["--runtime", "torch"]),
        ("vllm-cpu-demo", ["--runtime", "vllm", "--device", "cpu"]),
    ):
        bundled = [f"example:{name}" for name in drafts if name.startswith(f"{bundle}/")]
        draft_args = [arg for draft in bundled for arg in ("-d", draft)]
        argv = ["smoke-test", "--dry-run", "--json", "-t", f"example:{bundle}/target", *draft_args, *runtime]
        cases[f"smoke-test-dry-run--{bundle}"] = argv
    return cases


CASES = _cases()


def _normalized(stdout: str) -> str:
    """The document with what differs between machines replaced (the module docstring)."""
    document = json.loads(stdout)
    # The document is printed as json.dumps(indent=2) writes it: re-serializing the parsed
    # document must give the same bytes, so replacing values below changes nothing else.
    assert json.dumps(document, indent=2, ensure_ascii=False) + "\n" == stdout
    if isinstance(document, dict) and document.get("command") == "smoke-test":
        for key in ENVIRONMENT_KEYS:
            if key in document:
                document[key] = "<ENVIRONMENT>"
        document.pop("engine_missing", None)
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    for root in {str(CHECKOUT), str(REPO)}:
        text = re.sub(re.escape(root) + r"(?=[/\"' ])", "<CHECKOUT>", text)
    return text


@pytest.mark.parametrize("case", sorted(CASES))
def test_json_output_matches_golden(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # nothing a command writes lands in the checkout
    result = runner.invoke(app, CASES[case])
    assert result.exit_code in (0, 1, 2), result.stderr
    actual = _normalized(result.stdout)
    golden = GOLDEN / f"{case}.json"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        if not golden.exists() or golden.read_text(encoding="utf-8") != actual:
            golden.write_text(actual, encoding="utf-8")
        return
    assert golden.exists(), f"{golden.name} is missing: regenerate with DFLASH_TOOLS_UPDATE_GOLDEN=1 (module docstring)"
    expected = golden.read_text(encoding="utf-8")
    assert actual == expected, (
        f"`dflash-tools {' '.join(CASES[case])}` prints another document than {golden.name}; if the change is "
        "intended, regenerate with DFLASH_TOOLS_UPDATE_GOLDEN=1 and commit the diff"
    )


def test_every_golden_file_has_a_case() -> None:
    """A golden file that no case writes any more is stale (a renamed or removed example)."""
    stale = sorted(p.name for p in GOLDEN.glob("*.json") if p.stem not in CASES)
    if UPDATE:
        for name in stale:
            (GOLDEN / name).unlink()
        return
    assert not stale, f"golden files no case produces: {stale}; regenerate with DFLASH_TOOLS_UPDATE_GOLDEN=1"


def test_the_cases_cover_every_bundled_example() -> None:
    """Each bundled example is inspected, and each draft is paired with a bundled target that exists."""
    inspected = {argv[1] for argv in CASES.values() if argv[0] == "inspect"}
    assert inspected == {f"example:{name}" for name in _examples()}
    for argv in CASES.values():
        if "-t" in argv:
            assert (EXAMPLES / argv[argv.index("-t") + 1].removeprefix("example:") / "config.json").is_file()
