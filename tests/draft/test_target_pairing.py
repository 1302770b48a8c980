"""Pairing with the target (docs/rules.md, "Pairing with the target"): DFT030-DFT034, local and multimodal targets."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import dflash_tools_testing as testing
from dflash_tools.draft.target import load_target
from dflash_tools.errors import SourceError
from dflash_tools.inspect import inspect_checkpoint
from tests.conftest import CheckpointFactory


def write_target(tmp_path: Path, spec: testing.DraftSpec = testing.TINY, **changes: Any) -> Path:
    config = testing.make_target_config(spec)
    config.update(changes)
    folder = tmp_path / f"target-{len(list(tmp_path.iterdir()))}"
    testing.write_json(folder / "config.json", config)
    return folder


def codes_with_target(draft: Path, target: Path, k: int | None = None) -> list[str]:
    report = inspect_checkpoint(str(draft), target=str(target), num_speculative_tokens=k)
    # DFT055 (info) describes every speculators draft with sliding layers; tests/draft/test_sliding_window.py covers it.
    return [f.code for f in report.findings if f.code != "DFT055"]


@pytest.mark.parametrize("dialect", testing.ALL_DIALECTS)
def test_matching_target_has_no_findings(make_checkpoint: CheckpointFactory, tmp_path: Path, dialect: str) -> None:
    draft = make_checkpoint(dialect)
    target = write_target(tmp_path)
    assert [c for c in codes_with_target(draft, target) if c != "DFT011"] == []


def test_multimodal_target_uses_text_config(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    folder = tmp_path / "vl"
    testing.write_json(folder / "config.json", testing.make_target_config(testing.TINY, multimodal=True))
    spec = load_target(str(folder))
    assert spec.multimodal and spec.num_hidden_layers == 5
    assert codes_with_target(make_checkpoint("zlab-dflash"), folder) == []


def test_layer_id_out_of_range(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    draft = make_checkpoint("zlab-dflash", replace(testing.TINY, target_layer_ids=(1, 7)))
    assert "DFT030" in codes_with_target(draft, write_target(tmp_path))


def test_num_target_layers_differs(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    draft = make_checkpoint("zlab-dflash")
    assert codes_with_target(draft, write_target(tmp_path, num_hidden_layers=6)) == ["DFT030"]


def test_unsorted_and_duplicate_ids_without_target(make_checkpoint: CheckpointFactory) -> None:
    for ids in ((3, 1), (1, 1)):
        draft = make_checkpoint("zlab-dflash", replace(testing.TINY, target_layer_ids=ids))
        report = inspect_checkpoint(str(draft))
        assert [f.code for f in report.findings] == ["DFT030"]


def test_zlab_ids_in_speculators_convention(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    """A z-lab id equal to the target's layer count is one past the last layer: shifted by one."""
    draft = make_checkpoint("zlab-dflash", replace(testing.TINY, target_layer_ids=(2, 5)))
    assert codes_with_target(draft, write_target(tmp_path)) == ["DFT033"]


def test_speculators_aux_zero_is_shifted(make_checkpoint: CheckpointFactory) -> None:
    draft = make_checkpoint("speculators-dflash", replace(testing.TINY, target_layer_ids=(-1, 2)))
    codes = [f.code for f in inspect_checkpoint(str(draft)).findings]
    assert codes == ["DFT033", "DFT055"]  # DFT055: the sliding layers (tests/draft/test_sliding_window.py)


def test_hidden_size_mismatch(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    draft = make_checkpoint("zlab-dflash")
    codes = codes_with_target(draft, write_target(tmp_path, hidden_size=128))
    assert codes.count("DFT031") == 2  # fc width and draft hidden


def test_vocabulary_and_mask_mismatch(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    draft = make_checkpoint("zlab-dflash2")
    codes = codes_with_target(draft, write_target(tmp_path, vocab_size=400))
    assert codes.count("DFT032") == 2


def test_mask_token_outside_own_vocab_and_missing(make_checkpoint: CheckpointFactory) -> None:
    draft = make_checkpoint("zlab-dflash", replace(testing.TINY, mask_token_id=4096))
    assert [f.code for f in inspect_checkpoint(str(draft)).findings] == ["DFT032"]
    config = testing.make_config("zlab-dflash", testing.TINY)
    del config["dflash_config"]["mask_token_id"]
    draft = make_checkpoint("zlab-dflash", config=config)
    assert [f.code for f in inspect_checkpoint(str(draft)).findings] == ["DFT032"]


def test_dflash2_reduced_vocabulary(make_checkpoint: CheckpointFactory) -> None:
    spec = replace(testing.TINY_DFLASH2, draft_vocab_size=128)
    codes = [f.code for f in inspect_checkpoint(str(make_checkpoint("speculators-dflash2", spec))).findings]
    assert "DFT032" in codes


def test_rope_mismatch_warns(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    draft = make_checkpoint("zlab-dflash")
    target = write_target(tmp_path, rope_parameters={"rope_theta": 10000.0})
    assert codes_with_target(draft, target) == ["DFT034"]


def test_speculators_causal_full_layers(make_checkpoint: CheckpointFactory) -> None:
    spec = replace(testing.TINY, layer_types=("full_attention", "sliding_attention"))
    found = inspect_checkpoint(str(make_checkpoint("speculators-dflash", spec))).findings
    assert [f.code for f in found] == ["DFT040", "DFT055"]  # DFT055: layer 1 slides
    assert found[0].values == {"full_attention_layers": [0]}
    # DFlash2 writes sliding_window_non_causal true: full layers stay bidirectional.
    spec2 = replace(testing.TINY_DFLASH2, layer_types=("full_attention", "sliding_attention"))
    assert [f.code for f in inspect_checkpoint(str(make_checkpoint("speculators-dflash2", spec2))).findings] == [
        "DFT055"
    ]


def test_unreadable_target_is_a_source_error(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    with pytest.raises(SourceError, match="no config.json"):
        load_target(str(folder))
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "vocab_size": 9, "hidden_size": "big"}))
    with pytest.raises(SourceError, match="hidden_size"):
        load_target(str(folder))
