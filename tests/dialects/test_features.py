"""Config features engines treat differently (DFT035, dflash_tools/dialects/features.py) and keys
nobody explains (DFT009, dflash_tools/dialects/key_census.py); the engine columns' verdicts on
features, and where each column reads the layout (docs/engines.md, "Config features")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import dflash_tools_testing as testing
from dflash_tools import dialects
from dflash_tools.convert import convert_checkpoint
from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.findings import Finding
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines

SGLANG, VLLM33, VLLM34 = "sglang==0.5.23", "vllm==0.33.0", "vllm==0.34.0"


def zlab(dialect: str = "zlab-dflash2", **top: Any) -> dict[str, Any]:
    config = testing.make_config(dialect, testing.TINY)
    config.update(top)
    return config


def reader_findings(config: dict[str, Any], code: str) -> list[Finding]:
    return [f for f in dialects.read(config).reader_findings if f.code == code]


def columns(tmp_path: Path, config: dict[str, Any]) -> tuple[dict[str, Any], list[Finding]]:
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash2", config=config)
    report = inspect_for_engines(load_checkpoint(str(folder)), list(ENGINE_RULES))
    views = {f"{v['engine']}=={v['version']}": v for v in report.extra["engines"].values()}
    return views, report.findings


MOE = {
    "draft_ffn_type": "moe",
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 64,
    "norm_topk_prob": True,
}


def test_an_moe_dflash2_draft_is_named_with_what_each_release_does(tmp_path: Path) -> None:
    (finding,) = reader_findings(zlab(**MOE), "DFT035")
    assert finding.values["feature"] == "moe-ffn" and finding.severity.value == "warning"
    assert {finding.values[spec] for spec in ENGINE_RULES} == {"refused", "served-wrong"}
    assert finding.values[VLLM34] == "refused" and finding.values[SGLANG] == "served-wrong"
    # Its companion keys are known: no DFT009 for them.
    assert reader_findings(zlab(**MOE), "DFT009") == []
    views, findings = columns(tmp_path, zlab(**MOE))
    assert views[VLLM34]["outcome"] == "refused" and views[SGLANG]["outcome"] == "served-wrong"
    assert any(f.code == "DFT074" and f.values.get("engine") == VLLM34 for f in findings)


def test_use_swa_is_served_by_vllm_and_ignored_by_sglang(tmp_path: Path) -> None:
    config = zlab()
    config["dflash_config"]["use_swa"] = True
    config["dflash_config"]["swa_window_size"] = 1024
    (finding,) = reader_findings(config, "DFT035")
    assert finding.values["feature"] == "sliding-window-everywhere"
    assert (finding.values[VLLM33], finding.values[VLLM34], finding.values[SGLANG]) == (
        "served",
        "served",
        "served-wrong",
    )
    views, _ = columns(tmp_path, config)
    assert views[SGLANG]["outcome"] == "served-wrong" and views[VLLM34]["outcome"] == "served"


def test_quantized_weights_and_own_embeddings_outside_sglangs_nemotron_test() -> None:
    config = zlab("zlab-dflash", has_embed_tokens=True, quantization_config={"quant_algo": "W4A16_NVFP4"})
    found = {f.values["feature"]: f for f in reader_findings(config, "DFT035")}
    assert set(found) == {"own-embeddings", "quantized"}
    # Not the whole Nemotron-3.5 layout (no eagle_aux_hidden_state_layer_ids): SGLang drops both.
    assert found["quantized"].values[SGLANG] == "served-wrong" and found["quantized"].values[VLLM34] == "served"
    assert found["own-embeddings"].values[SGLANG] == "served-wrong"


def test_a_tap_on_the_targets_last_layer_depends_on_the_target() -> None:
    config = zlab("zlab-dflash", num_target_layers=4)  # layer ids (1, 3): 3 is the last of 4
    (finding,) = reader_findings(config, "DFT035")
    assert finding.values["feature"] == "last-layer-tap" and finding.severity.value == "warning"
    assert reader_findings(zlab("zlab-dflash"), "DFT035") == []  # 5 target layers: no tap on the last


@pytest.mark.parametrize("value", [True, 0.5, "gated"])
def test_a_key_nobody_explains_is_named(value: Any) -> None:
    config = zlab("zlab-dflash", residual_gate=value)
    config["dflash_config"]["tap_mixing"] = value
    (finding,) = reader_findings(config, "DFT009")
    assert finding.keys == ("residual_gate", "dflash_config.tap_mixing")
    assert "residual_gate" in finding.message


def test_known_null_and_neutral_keys_are_not_named() -> None:
    config = zlab("zlab-dflash", residual_gate=None, mlp_bias=False, transformers_version="5.0", bos_token_id=1)
    assert reader_findings(config, "DFT009") == []
    assert [f.keys for f in reader_findings(zlab("zlab-dflash", mlp_bias=True), "DFT009")] == [("mlp_bias",)]


def test_each_column_says_which_spelling_it_reads(tmp_path: Path) -> None:
    config = zlab("zlab-dflash")
    config.pop("sample_from_anchor", None)
    del config["dflash_config"]["sample_from_anchor"]
    config["dflash_config"]["query_zero_predicts_next"] = True  # anchor-first, in a spelling no release reads
    views, findings = columns(tmp_path, config)
    assert views[VLLM34]["layout_read_from"] == ["dflash_config.sample_from_anchor"]
    assert views[VLLM34]["layout_source"] == "default"
    assert views[SGLANG]["layout_read_from"] == [] and views[SGLANG]["layout_source"] == "not read"
    for spec in ENGINE_RULES:
        (misread,) = [f for f in findings if f.code == "DFT071" and f.values.get("engine") == spec]
        assert "it does not read dflash_config.query_zero_predicts_next" in misread.message, spec


def test_convert_writes_shift_label_for_a_domino_draft(tmp_path: Path) -> None:
    config = zlab("zlab-dflash")
    # Declared as sample_from_anchor only: SGLang's Domino path reads shift_label alone.
    config["dflash_config"].update(projector_type="domino", pure_draft_prefix_len=1, gru_hidden_dim=64, emb_dim=64)
    assert config["dflash_config"]["sample_from_anchor"] is False and "shift_label" not in config["dflash_config"]
    source = testing.write_checkpoint(tmp_path / "src", "zlab-dflash", config=config)
    convert_checkpoint(str(source), tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())["dflash_config"]
    assert (written["sample_from_anchor"], written["shift_label"]) == (False, False)
