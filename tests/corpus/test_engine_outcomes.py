"""The tool's engine columns against what each engine release does with each corpus file.

The record (`engine_outcomes.json`, tests/corpus/README.md "What each engine does") was made by
running each engine's own code on the file, and the engine tiers re-run it; here, offline and
without any engine, `inspect --engine` (the library's `inspect_for_engines`) must say the same:
- a file the engine cannot load (its config loader raises) is `wont-load`;
- a file whose architecture the release has no model class for is `unsupported`;
- a file the engine loads and then refuses is `refused`;
- a file the engine builds a speculator for is served in some form (served, with the plugin,
  misaligned, served wrong, or `unchecked` where the tool reads no config of it), in the engine's
  layout; for SGLang, with the block size, target layers and mask token its parsers give.

Every disagreement is a bug in the tool, listed with the engine's evidence in
`outcomes.TOOL_BUGS` (strict xfails, here and in the engine tiers).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from tests.corpus.entries import BY_DIR, ENTRIES, Entry
from tests.corpus.outcomes import TOOL_BUGS, load

RECORD = load()
RELEASES = ("vllm==0.33.0", "vllm==0.34.0", "sglang==0.5.23")
CI = Path(__file__).resolve().parents[2] / ".ci"
SERVED = {"served", "served-with-plugin", "misaligned", "served-wrong", "unchecked"}

PENDING: dict[tuple[str, str], str] = dict(TOOL_BUGS)


def column(entry: Entry, release: str) -> dict[str, Any]:
    engines = inspect_for_engines(load_checkpoint(str(entry.folder)), [release]).extra["engines"]
    view: dict[str, Any] = engines["sglang" if release.startswith("sglang") else release]
    return view


def pairs() -> list[Any]:
    out = []
    for entry in ENTRIES:
        for release in RELEASES:
            reason = PENDING.get((entry.dir, release))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            out.append(pytest.param(entry, release, id=f"{release}:{entry.dir}", marks=marks))
    return out


def test_every_corpus_file_has_every_releases_outcome_and_its_source() -> None:
    transformers = {
        f"transformers=={found.group(1)}"
        for path in sorted(CI.glob("requirements-vllm-0.*.txt"))
        if (found := re.search(r"^transformers==(\S+)$", path.read_text(), re.M))
    }
    assert transformers, "the vLLM tier environments pin transformers"
    sglang_pin = {
        key
        for entry in RECORD.values()
        for key in entry
        if key.startswith("transformers==") and "SGLang" in entry[key].get("source", "")
    }
    assert sorted(RECORD) == sorted(BY_DIR)
    for name, releases in RECORD.items():
        assert set(releases) >= {*RELEASES, *transformers}, name
        assert len(sglang_pin & set(releases)) == 1, name  # AutoConfig under SGLang's own pin
        for release, outcome in releases.items():
            assert outcome["source"] and outcome["outcome"] in {"loads", "wont-load", *SERVED, "refused",
                                                                 "unsupported"}, (name, release)  # fmt: skip


@pytest.mark.parametrize(("entry", "release"), pairs())
def test_the_column_is_what_the_engine_does(entry: Entry, release: str) -> None:
    engine = RECORD[entry.dir][release]
    view = column(entry, release)
    if engine["outcome"] != "served":
        assert view["outcome"] == engine["outcome"], (view["outcome"], view["refusal"], engine.get("error"))
        return
    assert view["outcome"] in SERVED, (view["outcome"], view["refusal"])
    if view["layout"] is not None:
        assert view["layout"] == engine["layout"]
    if release.startswith("sglang") and view["outcome"] != "unchecked":
        assert view["block_size"] == engine["block_size"]
        assert view["target_layer_ids"] == engine["target_layer_ids"]
        assert view["mask_token_id"] == engine["mask_token_id"]


def declared_layout(config: dict[str, Any]) -> str | None:
    """The layout a speculators file's own proposal count implies: B - 1 drafts is bonus-anchor,
    B drafts anchor-first (speculators' `speculative_tokens = block_size - (not sample_from_anchor)`)."""
    methods = (config.get("speculators_config") or {}).get("proposal_methods") or []
    tokens = methods[0].get("speculative_tokens") if methods else None
    block = config.get("block_size")
    if not isinstance(tokens, int) or not isinstance(block, int):
        return None
    return {block - 1: "bonus", block: "anchor-first"}.get(tokens)


DECLARED = [entry for entry in ENTRIES if declared_layout(entry.config()) is not None]


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(
            entry,
            id=entry.dir,
        )
        for entry in DECLARED
    ],
)
def test_a_draft_vllm_serves_in_the_layout_its_proposal_count_declares_is_not_misaligned(entry: Entry) -> None:
    """Where vLLM's layout is the one the file's own proposal count declares, the column does not
    call the draft misaligned, and inspect raises no layout error about it."""
    for release in ("vllm==0.33.0", "vllm==0.34.0"):
        engine = RECORD[entry.dir][release]
        if engine["outcome"] == "served" and engine["layout"] == declared_layout(entry.config()):
            assert column(entry, release)["outcome"] != "misaligned", release
    assert "DFT012" not in {f.code for f in inspect_checkpoint(str(entry.folder)).findings}


def test_the_proposal_count_rule_covers_a_file_of_each_layout() -> None:
    assert {declared_layout(entry.config()) for entry in DECLARED} == {"bonus", "anchor-first"}


def vllm_k_pairs() -> list[Any]:
    """The (file, release) pairs vLLM itself served in the corpus record, with the K it drafted."""
    return [
        pytest.param(entry, release, id=f"{release}:{entry.dir}")
        for entry in ENTRIES
        for release in ("vllm==0.33.0", "vllm==0.34.0")
        if RECORD[entry.dir][release]["outcome"] == "served"
        and RECORD[entry.dir][release].get("num_speculative_tokens") is not None
    ]


@pytest.mark.parametrize(("entry", "release"), vllm_k_pairs())
def test_the_vllm_column_drafts_what_vllm_drafts(entry: Entry, release: str) -> None:
    """Drafts and query positions: where the record's K is the one vLLM chose itself (`k_given`
    null: DSpark takes block_size), the column's K is that one or a DFT072 names vLLM's choice
    (the launch line passes another); where the record's K was given, the column's query positions
    for that K are vLLM's."""
    engine = RECORD[entry.dir][release]
    report = inspect_for_engines(load_checkpoint(str(entry.folder)), [release])
    view = report.extra["engines"][release]
    if view["num_speculative_tokens"] is None:
        # No K the tool can know (no block size): a column that serves as trained asks for -k.
        assert view["outcome"] not in {"served", "served-with-plugin"} or "DFT075" in view["findings"], view
        return
    if engine["k_given"] is None and view["num_speculative_tokens"] != engine["num_speculative_tokens"]:
        named = [f.values for f in report.findings if f.code == "DFT072" and f.values.get("engine") == release]
        assert named, (view["num_speculative_tokens"], engine["num_speculative_tokens"])
        assert named[0]["default_num_speculative_tokens"] == engine["num_speculative_tokens"]
        assert named[0]["default_num_query_tokens"] == engine["query_positions"]
        return
    if engine["k_given"] is None or engine["k_given"] == view["num_speculative_tokens"]:
        assert view["num_speculative_tokens"] == engine["num_speculative_tokens"]
        assert view["num_query_tokens"] == engine["query_positions"]
