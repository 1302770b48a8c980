"""What the key engine findings say: one sentence of cause (the message), one of action (the hint),
in words a user acts on, and no claim the tool cannot back (issue 34, "Findings that say what to do").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dflash_tools.convert import convert_checkpoint
from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from tests.engine_cases import edge_configs, example_drafts, write_config

SGLANG, VLLM34 = "sglang==0.5.23", "vllm==0.34.0"


def findings(source: str | Path) -> list[Any]:
    return inspect_for_engines(load_checkpoint(str(source)), list(ENGINE_RULES)).findings


def one(source: str | Path, code: str, spec: str) -> Any:
    [finding] = [f for f in findings(source) if f.code == code and f.values.get("engine") == spec]
    return finding


def depth(text: str) -> int:
    """How deep parentheses nest in `text`."""
    deepest = level = 0
    for char in text:
        level += {"(": 1, ")": -1}.get(char, 0)
        deepest = max(deepest, level)
    return deepest


def test_dft071_says_in_words_what_sglang_does_and_what_to_do() -> None:
    finding = one("example:zlab-dflash2-anchor-first", "DFT071", SGLANG)
    assert "SGLang 0.5.23 would run this anchor-first draft one position off" in finding.message
    assert "acceptance collapses while the output stays correct" in finding.message
    assert finding.hint.startswith("serve it with vLLM and the dflash-tools plugin")
    assert depth(finding.message) <= 1 and depth(finding.hint) <= 1


def test_dft076_names_the_release_and_what_stops_it() -> None:
    finding = one("example:zlab-dflash2-anchor-first", "DFT076", VLLM34)
    assert finding.message.startswith(
        f"{VLLM34}: vLLM 0.34.0 serves this anchor-first draft as trained only through the dflash-tools plugin"
    )
    assert "DFLASH_TOOLS_REQUIRE_PLUGIN=1 stops vLLM if the plugin is missing" in finding.hint


def test_dft070_says_the_release_cannot_load_it_and_what_to_write() -> None:
    finding = one("example:open-spec", "DFT070", SGLANG)
    assert finding.message.startswith(f"{SGLANG}: SGLang 0.5.23 cannot load this draft: it reads no open-spec config")
    assert "write the z-lab form" in finding.hint


def test_dft078_says_the_release_cannot_load_it_and_how_to_convert() -> None:
    # SGLang loads a config through transformers' AutoConfig, which needs a top-level model_type that
    # a speculators-format file does not have: it stops there, before any dialect is read.
    finding = one("example:speculators-dflash", "DFT078", SGLANG)
    assert finding.message.startswith(
        f"{SGLANG}: SGLang 0.5.23 cannot load this draft: its config loader stops at model_type"
    )
    assert finding.hint.startswith("convert it to the z-lab form")


def test_no_engine_finding_nests_parentheses_three_deep(tmp_path: Path) -> None:
    sources: list[str | Path] = [f"example:{name}" for name in example_drafts()]
    sources += [write_config(tmp_path / name, config) for name, config in edge_configs().items()]
    deep = [
        (str(source), f.code, text)
        for source in sources
        for f in findings(source)
        for text in (f.message, f.hint)
        if depth(text) >= 3
    ]
    assert deep == []


def test_a_translated_zlab_draft_gets_no_speculators_training_claim(tmp_path: Path) -> None:
    """`convert --to speculators` of a z-lab draft: it was trained by z-lab's code, so nothing is
    said about how speculators' trainer windowed it (DFT055)."""
    convert_checkpoint("example:zlab-dflash2", tmp_path / "spec", to="speculators")
    report = inspect_checkpoint(str(tmp_path / "spec"))
    assert report.to_dict()["dialect"] == "speculators-dflash2"
    assert "DFT055" not in [f.code for f in report.findings]


@pytest.mark.parametrize("name", ["speculators-dflash", "speculators-dflash2"])
def test_dft055_states_the_rule_without_claiming_the_training(name: str) -> None:
    [finding] = [f for f in inspect_checkpoint(f"example:{name}").findings if f.code == "DFT055"]
    assert "speculators trained" not in finding.message
    assert "if this draft was trained there" in finding.message
