"""The SGLang column on every corpus file (tests/corpus/) against SGLang 0.5.23's own code.

For each real published config: SGLang serves it when its architecture is in an `EntryClass` of
`sglang/srt/models/dflash.py` or `dspark.py` and `parse_dflash_draft_config` (DSPARK: also
`parse_dspark_draft_config`) accepts it; then the block size, layout, target layers and mask token
`inspect --engine sglang==0.5.23` reports must be the ones SGLang's parser gives.
"""

from __future__ import annotations

from typing import Any

import pytest

from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from tests.corpus.entries import ENTRIES, PENDING_ARCHITECTURES, Entry
from tests.engine_sources import Sources
from tests.real_sglang.test_sglang_source import entry_classes, parsers, sglang_reads

pytestmark = pytest.mark.real_sglang

__all__ = ["parsers"]  # the fixture, shared with test_sglang_source

SPEC = "sglang==0.5.23"
# Files SGLang serves and the column calls unsupported until issue 26 item 1 lands (strict xfails).
# The Kimi K3 DSpark drafts are not here: the column already reads them as SGLang does.
PENDING: dict[str, str] = {name: PENDING_ARCHITECTURES[name] for name in ()}


@pytest.fixture(scope="module")
def registered(sglang: Sources) -> set[str]:
    return set(entry_classes(sglang, "sglang/srt/models/dflash.py")) | set(
        entry_classes(sglang, "sglang/srt/models/dspark.py")
    )


def corpus_params() -> list[Any]:
    out = []
    for entry in ENTRIES:
        reason = PENDING.get(entry.dir)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(entry, id=entry.dir, marks=marks))
    return out


@pytest.mark.parametrize("entry", corpus_params())
def test_the_sglang_column_agrees_with_sglang_on_the_corpus(
    entry: Entry, parsers: dict[str, Any], registered: set[str]
) -> None:
    config = entry.config()
    architecture = (config.get("architectures") or [""])[0]
    theirs = sglang_reads(parsers, config)
    served = architecture in registered and not theirs.refused
    view = inspect_for_engines(load_checkpoint(str(entry.folder)), [SPEC]).extra["engines"]["sglang"]
    if view["outcome"] == "wont-load":
        # It stops at config load, before the parsers compared here run: the verdict is checked
        # against transformers' AutoConfig in test_sglang_config_loading.py.
        return
    if not served:
        assert view["outcome"] in ("refused", "unsupported"), (view["outcome"], view["refusal"])
        return
    assert view["outcome"] not in ("refused", "unsupported"), view["refusal"]
    if view["outcome"] == "unchecked":
        # An architecture SGLang registers and no dialect reads (Laguna): refused by name
        # (DFT008), so the column states no geometry to compare.
        assert view["reads_format"] is False or view["block_size"] is None, view
        return
    assert (view["block_size"], view["block_size_source"]) == (theirs.block_size, theirs.block_source)
    assert view["layout"] == theirs.layout
    assert view["target_layer_ids"] == theirs.target_layer_ids
    assert view["mask_token_id"] == theirs.mask_token_id
    # What inspect says the draft was trained with is what SGLang reads from the file. Every
    # published file reads; a partial copy may lack decoder fields (DFT006) and read as nothing.
    trained = inspect_checkpoint(str(entry.folder)).description
    assert trained is not None or entry.klass != "published", entry.dir
    if trained is not None and theirs.target_layer_ids is not None:
        assert trained.target_layer_ids == theirs.target_layer_ids
    if trained is not None and theirs.mask_token_id is not None:
        assert trained.mask_token_id == theirs.mask_token_id


def test_the_corpus_covers_what_sglang_registers(registered: set[str]) -> None:
    """The corpus has a file of each algorithm SGLang serves (DFlash, DFlash2, DSpark)."""
    architectures = {entry.architecture for entry in ENTRIES}
    assert {"DFlashDraftModel", "DFlash2DraftModel", "Qwen3DSparkModel", "DSparkDraftModel"} <= architectures
    assert {"DFlashDraftModel", "DFlash2DraftModel", "Qwen3DSparkModel"} <= registered
