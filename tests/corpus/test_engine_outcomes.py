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

Where the tool disagrees today because of work that is landing (issue 32), the pair is a strict
xfail naming the missing piece, so it fails (XPASS) the day the piece arrives and the entry here
is deleted. Every other disagreement is a bug in the tool, listed in `BUGS` with the engine's
evidence (`outcomes.TOOL_BUGS`, which the engine tiers mark too).
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

LOADPATH = (
    "issue 32 item 1a (helper loadpath): the column has no `wont-load` outcome yet for a config the engine's "
    "config loader raises on (a model_type transformers does not know, or none)"
)
LAYOUT = (
    "issue 32 item 3 (helper layout): a speculators DSpark saved without sample_from_anchor reads as trained "
    "anchor-first; its proposal count (speculative_tokens 7 = block_size 8 - 1) says bonus, as vLLM serves it"
)
PENDING: dict[tuple[str, str], str] = {}
for _dir in (
    "edited/PixelML__Qwen3.8-Flash-Next-NVFP4-DFlash__partial",
    "edited/nvidia__NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4-DSpark__atlas-reduced",
    "framework/lightseekorg__TorchSpec__37a86412-glm52_dspark_draft_config",
    "framework/lightseekorg__TorchSpec__6f21829c-dflash_draft_config",
    "framework/lightseekorg__TorchSpec__a31111ee-kimi_k3_dflash2_mla_swa",
    "framework/lightseekorg__TorchSpec__afe66884-domino_draft_config",
    "framework/lightseekorg__TorchSpec__d9069939-qwen3_8_27b_dspark_draft",
):
    for _release in RELEASES:
        PENDING[(_dir, _release)] = LOADPATH
for _dir in (  # speculators-format files: no top-level model_type, and SGLang reads no speculators_config
    "edited/RedHatAI__GLM-5.2-speculator.dspark__sglang-test-dict",
    "edited/RedHatAI__Qwen3.6-35B-A3B-speculator.dspark__reduced",
    "unpublished/minimax-m27-dflash-end-to-end-DRAFT",
    "unpublished/speculators-issue-613__qwen36-35b-dflash",
    "framework/lightseekorg__TorchSpec__7f1e0906-kimi_k3_dspark_mla",  # k3_dspark: vLLM registers it, SGLang not
):
    PENDING[(_dir, "sglang==0.5.23")] = LOADPATH
PENDING.update(TOOL_BUGS)


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
            marks=[pytest.mark.xfail(strict=True, reason=LAYOUT)] if "GLM-5.2-speculator" in entry.dir else [],
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
