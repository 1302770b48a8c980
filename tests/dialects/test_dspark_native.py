"""Native DSpark keys that sit in `dflash_config` (dflash_tools/dialects/dspark_native.py).

RadixArk's published `DSparkDraftModel` drafts (tests/corpus/published/RadixArk__Kimi-K3-DSpark__*)
keep `target_layer_ids` and `mask_token_id` in `dflash_config`. vLLM and SGLang read a
`dflash_config` copy of either key before the top-level one; the description must name the values
every engine column reads, or the columns report a draft served unlike its training.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import dflash_tools_testing as testing
from dflash_tools import dialects
from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from tests.corpus.entries import BY_DIR

KIMI = BY_DIR["published/RadixArk__Kimi-K3-DSpark__eb03982e"]
KIMI_IDS = [7, 23, 51, 67, 83]
KIMI_MASK = 163824


def engine_views(folder: Path) -> dict[str, Any]:
    report = inspect_for_engines(load_checkpoint(str(folder)), list(ENGINE_RULES))
    return {f"{view['engine']}=={view['version']}": view for view in report.extra["engines"].values()}


def test_the_published_kimi_draft_reads_its_keys_from_dflash_config() -> None:
    desc = dialects.read(KIMI.config())
    assert desc.dialect.value == "dspark-native"
    assert (desc.target_layer_ids, desc.target_layer_ids_key) == (KIMI_IDS, "dflash_config.target_layer_ids")
    assert (desc.mask_token_id, desc.mask_token_id_key) == (KIMI_MASK, "dflash_config.mask_token_id")
    report = inspect_checkpoint(str(KIMI.folder))
    assert report.ok and {"DFT006", "DFT032"}.isdisjoint(f.code for f in report.findings)


def test_every_engine_column_serves_the_kimi_draft_as_trained() -> None:
    views = engine_views(KIMI.folder)
    assert set(views) == set(ENGINE_RULES)
    for name, view in views.items():
        assert (view["target_layer_ids"], view["mask_token_id"]) == (KIMI_IDS, KIMI_MASK), name
        assert view["matches_training"], (name, view["findings"])


def test_a_dflash_config_copy_wins_over_the_top_level_one_as_in_the_engines(tmp_path: Path) -> None:
    config = copy.deepcopy(KIMI.config())
    config["target_layer_ids"] = [1, 2, 3, 4, 5]
    config["mask_token_id"] = 163800
    folder = tmp_path / "both"
    testing.write_json(folder / "config.json", config)
    desc = dialects.read(config)
    assert (desc.target_layer_ids, desc.mask_token_id) == (KIMI_IDS, KIMI_MASK)
    for name, view in engine_views(folder).items():
        assert (view["target_layer_ids"], view["mask_token_id"]) == (desc.target_layer_ids, desc.mask_token_id), name
        assert view["matches_training"], (name, view["findings"])


def test_top_level_keys_are_read_when_dflash_config_lacks_them() -> None:
    config = copy.deepcopy(KIMI.config())
    del config["dflash_config"]["target_layer_ids"]
    config["target_layer_ids"] = [1, 2, 3, 4, 5]
    desc = dialects.read(config)
    assert (desc.target_layer_ids, desc.target_layer_ids_key) == ([1, 2, 3, 4, 5], "target_layer_ids")
    assert desc.mask_token_id_key == "dflash_config.mask_token_id"


def test_a_bad_value_in_dflash_config_is_named_by_its_path(tmp_path: Path) -> None:
    config = copy.deepcopy(KIMI.config())
    config["dflash_config"]["mask_token_id"] = "163824"
    folder = tmp_path / "bad"
    testing.write_json(folder / "config.json", config)
    report = inspect_checkpoint(str(folder))
    assert not report.ok
    assert any(f.code == "DFT006" and f.keys == ("dflash_config.mask_token_id",) for f in report.findings)
