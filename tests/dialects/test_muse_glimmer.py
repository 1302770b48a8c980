"""The Muse Glimmer assistant format: a dialect of its own (dflash_tools/dialects/muse_glimmer.py).

`tests/data/published/muse-glimmer-30b-assistant.json` is the published config verbatim (z-lab/dflash
commit 0a7587c0, tests/fixtures/assistant-config.json; sha256 38915167...6fa30a): both engines serve
it with their DFlash model (docs/engines.md, "Architectures").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dflash_tools_testing as testing
from dflash_tools import dialects
from dflash_tools.convert import convert_checkpoint
from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines

PUBLISHED = Path(__file__).parents[1] / "data" / "published" / "muse-glimmer-30b-assistant.json"


def engines(source: Path) -> dict[str, Any]:
    report = inspect_for_engines(load_checkpoint(str(source)), list(ENGINE_RULES))
    return {f"{view['engine']}=={view['version']}": view for view in report.extra["engines"].values()}


def test_the_published_config_is_read_as_its_own_dialect() -> None:
    report = inspect_checkpoint(str(PUBLISHED)).to_dict()
    assert report["dialect"] == "muse-glimmer-assistant"
    assert [f["code"] for f in report["findings"] if f["severity"] != "info"] == ["DFT011"]
    assert report["geometry"]["block_size"] == 16 and report["geometry"]["sample_from_anchor"] is False
    desc = dialects.read(json.loads(PUBLISHED.read_text()))
    # No vocab_size in the file: the vocabulary vLLM adds when it loads it.
    assert desc.decoder.vocab_size == 202048 and desc.is_causal is False
    assert desc.target_layer_ids == [1, 13, 25, 37, 49] and desc.mask_token_id == 201818


def test_every_engine_release_serves_it_as_trained() -> None:
    views = engines(PUBLISHED)
    assert set(views) == set(ENGINE_RULES)
    for spec, view in views.items():
        assert (view["outcome"], view["layout"], view["num_speculative_tokens"]) == ("served", "bonus", 15), spec
        assert view["target_layer_ids"] == [1, 13, 25, 37, 49] and view["mask_token_id"] == 201818, spec


def test_normalize_writes_the_layout_where_vllm_reads_it(tmp_path: Path) -> None:
    folder = tmp_path / "draft"
    testing.write_json(folder / "config.json", json.loads(PUBLISHED.read_text()))
    convert_checkpoint(str(folder), tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["architectures"] == ["MuseGlimmerAssistantModel"] and "vocab_size" not in written
    assert written["dflash_config"] == {"sample_from_anchor": False} and written["block_size"] == 16
    after = inspect_checkpoint(str(tmp_path / "out")).to_dict()
    assert after["geometry"]["sample_from_anchor_key"] == "dflash_config.sample_from_anchor"
    assert [f["code"] for f in after["findings"] if f["severity"] != "info"] == []


def test_convert_to_zlab_and_back_with_the_weights(tmp_path: Path) -> None:
    source = testing.write_checkpoint(tmp_path / "src", "muse-glimmer-assistant", testing.TINY)
    assert inspect_checkpoint(str(source)).to_dict()["dialect"] == "muse-glimmer-assistant"
    result = convert_checkpoint(str(source), tmp_path / "z", to="zlab")
    renamed = {c.name: c.new_name for c in result.plan.tensor_changes if c.action == "rename"}
    assert renamed == {"encoder.fc.weight": "fc.weight", "encoder.output_norm_enc.weight": "hidden_norm.weight"}
    zlab = inspect_checkpoint(str(tmp_path / "z")).to_dict()
    assert zlab["dialect"] == "zlab-dflash"
    assert [f["code"] for f in zlab["findings"] if f["code"].startswith("DFT02")] == []
    convert_checkpoint(str(tmp_path / "z"), tmp_path / "back", to="muse-glimmer")
    back = inspect_checkpoint(str(tmp_path / "back")).to_dict()
    assert back["dialect"] == "muse-glimmer-assistant"
    assert [f["code"] for f in back["findings"] if f["code"].startswith("DFT02")] == []
    assert back["geometry"] == inspect_checkpoint(str(source)).to_dict()["geometry"] | {
        "sample_from_anchor_key": back["geometry"]["sample_from_anchor_key"]
    }
