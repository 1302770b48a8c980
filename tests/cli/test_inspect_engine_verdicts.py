"""Plain `inspect` (no --engine) says what every engine release does with the draft.

One line per release from its table (outcome, K, query positions), the outcome words defined
on screen, the verdict naming the releases that serve the draft as trained, the same verdicts
in JSON (`engine_verdicts`); no engine is read: a vLLM installed here is not consulted.
The expected values are the ones `--engine all` prints for the same draft: the two modes are
two views of the same tables.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.engine_rules import ENGINE_RULES, Outcome

runner = CliRunner()
ANCHOR_FIRST = "example:zlab-dflash2-anchor-first"
EXAMPLES = [
    "example:zlab-dflash",
    "example:zlab-dflash2",
    ANCHOR_FIRST,
    "example:speculators-dflash",
    "example:dspark-native",
]


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["inspect", *args])
    return result.exit_code, result.stdout


def columns(source: str) -> dict[str, dict[str, Any]]:
    """The `--engine all` columns of `source`, by `engine==version`."""
    _, out = run(source, "--engine", "all", "--json")
    return {f"{c['engine']}=={c['version']}": c for c in json.loads(out)["engines"].values()}


@pytest.mark.parametrize("source", EXAMPLES)
def test_plain_json_has_every_releases_verdict(source: str) -> None:
    code, out = run(source, "--json")
    document = json.loads(out)
    verdicts = {f"{v['engine']}=={v['version']}": v for v in document["engine_verdicts"].values()}
    assert list(verdicts) == list(ENGINE_RULES)
    full = columns(source)
    for spec, verdict in verdicts.items():
        assert verdict["outcome"] == full[spec]["outcome"], spec
        k = full[spec]["num_speculative_tokens"]
        assert verdict["num_speculative_tokens"] == k, spec
    # Informative only: the exit code and the findings are the draft's own, as before.
    assert "engines" not in document
    assert not any(f["code"].startswith("DFT07") for f in document["findings"])
    assert code == (0 if document["ok"] else 1)


def test_plain_inspect_of_an_anchor_first_draft_names_the_engines() -> None:
    """The silent failure shows without a flag: SGLang serves it one position off, vLLM with the plugin."""
    code, out = run(ANCHOR_FIRST)
    assert code == 0
    lines = out.splitlines()
    served = [spec for spec, c in columns(ANCHOR_FIRST).items() if c["outcome"] in ("served", "served-with-plugin")]
    others = [spec for spec in ENGINE_RULES if spec not in served]
    assert served and others  # the example is one that some release serves wrong
    verdict = " ".join(lines[1:3])
    assert verdict.startswith("engines: served as trained by ")
    assert all(spec in verdict.split(", not by")[0] for spec in served)
    assert all(spec in verdict.split(", not by")[1] for spec in others)
    for spec, column in columns(ANCHOR_FIRST).items():
        line = next(line for line in lines if line.startswith(spec + " "))
        assert column["outcome"] in line and f"K {column['num_speculative_tokens']}" in line
        assert "query positions" in line
    # Each outcome word shown is defined once, on the lines below the engine lines.
    words = {c["outcome"] for c in columns(ANCHOR_FIRST).values()}
    for word in words:
        definitions = [line for line in lines if line.strip().startswith(f"{word}: ")]
        assert len(definitions) == 1, word
    # --engine keeps the full columns (no one-line verdicts) and the launch lines.
    _, full = run(ANCHOR_FIRST, "--engine", "all")
    assert "launch" in full and not any(line.startswith(tuple(ENGINE_RULES)) for line in full.splitlines())
    assert all(sum(line.strip().startswith(f"{word}: ") for line in full.splitlines()) == 1 for word in words)


def test_every_outcome_word_has_a_meaning() -> None:
    from dflash_tools.serving.verdict import OUTCOME_WORDS

    assert {outcome.value for outcome in Outcome} <= set(OUTCOME_WORDS)


def test_no_engine_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vLLM installed here (without the plugin) is neither imported nor consulted: the verdicts
    are the tables' (the plugin assumed installed with vLLM on the serving host)."""
    fake = tmp_path / "vllm"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise RuntimeError('plain inspect imported vllm')\n")
    (fake / "version.py").write_text("__version__ = '0.34.0'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = run(ANCHOR_FIRST, "--json")
    assert code == 0, out
    assert "vllm" not in sys.modules
    outcomes = {v["outcome"] for v in json.loads(out)["engine_verdicts"].values() if v["engine"] == "vllm"}
    assert outcomes == {"served-with-plugin"}
