"""The trained layout of real drafts that declare none, from their evidence (issue 32, item 3).

RedHatAI's GLM-5.2 DSpark speculator is a speculators-format DSpark saved without
`sample_from_anchor` (block_size 8, proposal count 7). speculators' own DSpark config class
defaults the flag to true, but such a save predates the flag (speculators PR #760) and was
trained bonus-anchor; its proposal count, B - 1, says so too; vLLM 0.33.0 and 0.34.0 translate
the absent flag as false (`vllm/transformers_utils/configs/speculators/algos.py`, update_dspark)
and serve it with 7 drafts. Read as anchor-first, the tool called it broken on both vLLM
releases and printed a convert line that would have broken it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dflash_tools.cli._layout import hint_commands
from dflash_tools.convert import convert_checkpoint
from dflash_tools.draft.geometry import num_query_tokens
from dflash_tools.engine_rules import Layout
from dflash_tools.errors import OperationError
from dflash_tools.findings import Severity
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from tests.corpus.entries import BY_DIR

GLM52 = BY_DIR["edited/RedHatAI__GLM-5.2-speculator.dspark__sglang-test-dict"]
VLLM = ("vllm==0.33.0", "vllm==0.34.0")
LAYOUT_FLAGS = ("--sample-from-anchor", "--no-sample-from-anchor")


def layout_writing_commands(findings: list[Any]) -> list[str]:
    """The fix lines a user would copy that write a layout (docs/rules.md: only evidence may)."""
    return [c for f in findings for c in hint_commands(f.hint) if any(flag in c.split() for flag in LAYOUT_FLAGS)]


def test_the_redhat_glm52_speculator_reads_bonus_anchor_with_its_evidence() -> None:
    report = inspect_checkpoint(str(GLM52.folder))
    geometry = report.to_dict()["geometry"]
    assert (geometry["layout"], geometry["sample_from_anchor"], geometry["sample_from_anchor_source"]) == (
        "bonus-anchor",
        False,
        "inferred",
    )
    assert (geometry["max_speculative_tokens"], geometry["num_query_tokens"]) == (7, 8)
    assert geometry["layout_decided_by"] == "proposal-count"
    evidence = [(e["kind"], e["says"], e["rank"]) for e in geometry["layout_evidence"]]
    assert evidence == [
        ("proposal-count", "bonus-anchor", 2),
        ("trainer-record", "bonus-anchor", 4),
        ("dialect-default", "anchor-first", 5),  # speculators' class default: outweighed, not evidence of training
    ]
    assert "PR #760" in geometry["layout_evidence"][1]["why"]
    # Nothing is wrong with it: DFT011 is a note (the evidence settles the layout), no DFT012.
    assert report.ok
    (note,) = [f for f in report.findings if f.code == "DFT011"]
    assert note.severity is Severity.INFO and "bonus-anchor" in note.message
    assert "DFT012" not in {f.code for f in report.findings}
    assert layout_writing_commands(report.findings) == []


def test_both_vllm_releases_serve_it_with_7_drafts_and_8_query_positions() -> None:
    report = inspect_for_engines(load_checkpoint(str(GLM52.folder)), list(VLLM))
    for spec in VLLM:
        column = report.extra["engines"][spec]
        assert (column["outcome"], column["layout"], column["num_speculative_tokens"]) == ("served", "bonus", 7), spec
        assert column["matches_training"] is True
        # Query positions as the column computes them: the layout it serves, for its drafts.
        assert num_query_tokens(column["num_speculative_tokens"], column["layout"] == Layout.ANCHOR_FIRST.value) == 8
        assert '"num_speculative_tokens": 7' in column["launch_command"]
    assert report.ok, [f.message for f in report.findings]
    assert not [f for f in report.findings if f.code in ("DFT012", "DFT071")]
    assert layout_writing_commands(report.findings) == []


def test_normalizing_it_writes_the_layout_its_evidence_says(tmp_path: Path) -> None:
    source = tmp_path / "draft"
    source.mkdir()
    shutil.copyfile(GLM52.config_path, source / "config.json")
    result = convert_checkpoint(str(source), tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["sample_from_anchor"] is False
    assert written["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 7
    (decision,) = [d for d in result.to_dict()["decisions"] if d["key"] == "sample_from_anchor"]
    assert decision["source"] == "inferred" and "block_size - 1" in decision["message"]
    assert "--sample-from-anchor" not in decision["message"]


def _with_counts(tmp_path: Path, counts: list[int]) -> Path:
    """The same draft with one proposal method per count (a config that says two things)."""
    config = GLM52.config()
    method = config["speculators_config"]["proposal_methods"][0]
    config["speculators_config"]["proposal_methods"] = [{**method, "speculative_tokens": c} for c in counts]
    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_evidence_that_disagrees_leaves_the_layout_unknown_with_both_readings(tmp_path: Path) -> None:
    folder = _with_counts(tmp_path, [7, 8])
    report = inspect_for_engines(load_checkpoint(str(folder)), list(VLLM))
    geometry = report.to_dict()["geometry"]
    assert geometry["layout"] == "unknown" and geometry["sample_from_anchor_source"] == "unknown"
    assert geometry["sample_from_anchor"] is None and geometry["max_speculative_tokens"] is None
    assert [(r["layout"], r["max_speculative_tokens"], r["num_query_tokens"]) for r in geometry["readings"]] == [
        ("bonus-anchor", 7, 8),
        ("anchor-first", 8, 8),
    ]
    codes = [f.code for f in report.findings]
    assert "DFT018" in codes and "DFT012" not in codes  # each count fits one reading
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
    for spec in VLLM:
        column = report.extra["engines"][spec]
        # Neither "served" nor "misaligned": both readings are said, and no launch line claims either.
        assert column["outcome"] == "unchecked" and column["launch"] is None
        assert column["matches_training"] is False
        (note,) = [f for f in report.findings if f.code == "DFT018" and f.values.get("engine") == spec]
        assert "if trained bonus-anchor: served" in note.message
        assert "if trained anchor-first: misaligned" in note.message
    # The way to settle it is named; it is not a fix line (it needs the target and a GPU), and no
    # fix line writes a layout.
    unknown = [f for f in report.findings if f.code == "DFT018"]
    assert all("--compare-layouts" in f.hint for f in unknown)
    assert [c for f in report.findings for c in hint_commands(f.hint)] == []


def test_convert_refuses_to_write_an_unknown_layout(tmp_path: Path) -> None:
    folder = _with_counts(tmp_path, [7, 8])
    with pytest.raises(OperationError) as raised:
        convert_checkpoint(str(folder), tmp_path / "out")
    assert "unknown" in raised.value.message and "--compare-layouts" in raised.value.hint
    # Once settled, the user's flag writes it.
    convert_checkpoint(str(folder), tmp_path / "out", sample_from_anchor=False)
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["sample_from_anchor"] is False
    assert [m["speculative_tokens"] for m in written["speculators_config"]["proposal_methods"]] == [7, 7]


def test_an_engine_misalignment_resting_on_an_inferred_layout_is_a_warning(tmp_path: Path) -> None:
    """The same draft with its count at B: anchor-first by the count (DSpark never stored B by
    mistake). vLLM translates the absent flag as false and serves bonus: misaligned, but the
    layout is inferred, so DFT071 is a warning, not an error."""
    report = inspect_for_engines(load_checkpoint(str(_with_counts(tmp_path, [8]))), ["vllm==0.34.0"])
    assert report.geometry is not None and report.geometry.layout == "anchor-first"
    assert report.extra["engines"]["vllm==0.34.0"]["outcome"] == "misaligned"
    (misaligned,) = [f for f in report.findings if f.code == "DFT071"]
    assert misaligned.severity is Severity.WARNING


PUBLISHED = BY_DIR["published/z-lab__Qwen3-8B-DFlash-b16__9b41424b"]


def test_a_published_release_settles_the_layout_its_config_does_not_state(tmp_path: Path) -> None:
    """z-lab's Qwen3-8B DFlash declares no layout; its config is a published release
    (configs/profiles), which records it as bonus-anchor: DFT011 is a note, not a question."""
    report = inspect_checkpoint(str(PUBLISHED.folder))
    geometry = report.to_dict()["geometry"]
    assert (geometry["layout"], geometry["layout_decided_by"]) == ("bonus-anchor", "published-release")
    assert geometry["sample_from_anchor_key"] == "z-lab/Qwen3-8B-DFlash-b16@9b41424b"
    (note,) = [f for f in report.findings if f.code == "DFT011"]
    assert note.severity is Severity.INFO
    # The same keys, edited: no longer the published release, so only z-lab's default says it.
    config = PUBLISHED.config()
    config["max_position_embeddings"] = 8192
    (tmp_path / "config.json").write_text(json.dumps(config))
    edited = inspect_checkpoint(str(tmp_path))
    assert edited.to_dict()["geometry"]["sample_from_anchor_source"] == "default"
    (warning,) = [f for f in edited.findings if f.code == "DFT011"]
    assert warning.severity is Severity.WARNING and layout_writing_commands(edited.findings) == []
