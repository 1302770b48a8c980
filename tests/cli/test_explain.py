"""`dflash-tools explain` and shell completion (docs/findings.md; docs/inspect.md, "Shell completion").

explain prints the catalogue of `dflash_tools.findings`, the one source docs/findings.md is
rendered from (tests/draft/test_findings_catalogue.py keeps the page equal to it); completion is
typer's, driven here through the environment a shell's completion script sets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.cli.explain_run import plain
from dflash_tools.findings import CATALOGUE

runner = CliRunner()


def test_explain_a_code_says_when_and_what_to_do() -> None:
    result = runner.invoke(app, ["explain", "DFT071"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    info = CATALOGUE["DFT071"]
    flat = " ".join(result.stdout.split())
    assert flat.startswith(f"DFT071 error: {info.title}")
    assert f"when: {' '.join(plain(info.condition).split())}" in flat
    assert f"what to do: {' '.join(plain(info.action).split())}" in flat
    assert all(len(line) <= 80 for line in result.stdout.splitlines())


@pytest.mark.parametrize("spelling", ["dft076", "76", "076", " DFT076 "])
def test_explain_takes_the_spellings_people_type(spelling: str) -> None:
    result = runner.invoke(app, ["explain", spelling, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["ok"] is True and document["exit_code"] == 0 and document["command"] == "explain"
    assert [f["code"] for f in document["findings"]] == ["DFT076"]
    assert document["findings"][0]["action"] == plain(CATALOGUE["DFT076"].action)


def test_an_unknown_code_is_a_usage_error_with_the_nearest_codes() -> None:
    result = runner.invoke(app, ["explain", "DFT999", "--json"])
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["ok"] is False and document["error"]["kind"] == "usage"
    assert "DFT999" in document["error"]["message"] and "explain" in document["error"]["hint"]


def test_explain_alone_lists_every_code_at_80_columns() -> None:
    result = runner.invoke(app, ["explain"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines if line.startswith("DFT")] == list(CATALOGUE)
    assert all(len(line) <= 80 for line in lines)


def test_markdown_links_read_as_paths() -> None:
    assert plain("see [sliding-window.md](sliding-window.md)") == "see docs/sliding-window.md"
    assert plain("the rule ([plan.md](plan.md)); docs/sliding-window.md gives it") == (
        "the rule (docs/plan.md); docs/sliding-window.md gives it"
    )
    assert plain('[tier-vllm.md](tier-vllm.md), "Architectures"') == 'docs/tier-vllm.md, "Architectures"'


def test_explain_needs_no_docs_folder(tmp_path: Path) -> None:
    """The catalogue is in the package (an installed wheel has no docs/): run from elsewhere."""
    completed = subprocess.run(
        [sys.executable, "-m", "dflash_tools", "explain", "DFT055", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(completed.stdout)["findings"][0]["code"] == "DFT055"


# --- shell completion: what bash's completion script asks, as typer answers it ---------------------


def complete(words: str, env: dict[str, str] | None = None) -> list[str]:
    """The words typer's bash completion offers for the last word of `words` (a trailing space:
    for a new, empty word)."""
    split = words.split()
    current = len(split) if words.endswith(" ") else len(split) - 1
    completed = subprocess.run(
        [sys.executable, "-c", "from dflash_tools.cli import main; main()"],
        env={
            **os.environ,
            "_DFLASH_TOOLS_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(current),
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    return completed.stdout.split()


def test_example_names_complete_after_a_source_and_after_t_and_d() -> None:
    assert "example:zlab-dflash2-anchor-first" in complete("dflash-tools inspect example:zlab")
    assert complete("dflash-tools plan -d example:vllm-cpu-demo/z") == [
        "example:vllm-cpu-demo/zlab-dflash",
        "example:vllm-cpu-demo/zlab-dflash-anchor-first",
    ]
    assert "example:engine-demo/target" in complete("dflash-tools smoke-test -t example:engine")


def test_bash_splits_at_the_colon_and_still_gets_the_names() -> None:
    """bash's COMP_WORDBREAKS holds `:`: `example:zlab` arrives as three words."""
    assert complete("dflash-tools inspect example : zlab") == [
        "zlab-dflash",
        "zlab-dflash2",
        "zlab-dflash2-anchor-first",
    ]
    assert ":zlab-dflash2" in complete("dflash-tools inspect example :")


def test_engine_values_and_finding_codes_complete() -> None:
    from dflash_tools.engine_rules import ENGINE_RULES

    vllm = [spec for spec in ENGINE_RULES if spec.startswith("vllm==")]
    assert complete("dflash-tools plan --engine vllm") == [*vllm, "vllm"]
    assert "all" in complete("dflash-tools inspect --engine a")
    assert complete("dflash-tools inspect --engine sglang,vllm==") == [f"sglang,{spec}" for spec in vllm]
    assert complete("dflash-tools explain DFT07") == [code for code in CATALOGUE if code.startswith("DFT07")]
