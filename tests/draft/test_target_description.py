"""One reading of the target (`draft.target.TargetDescription`): every command that takes a target
reads its config.json through `target_from_config`, with one rule for a multimodal target's
`text_config` (the text model's key when it has it, else the top level's)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.draft.target import load_target, target_from_config, text_value
from dflash_tools.errors import SourceError
from dflash_tools.plan.checks import target_dims
from dflash_tools.reading.local import examples_dir

DEMO = examples_dir() / "vllm-cpu-demo"
DRAFT = "example:vllm-cpu-demo/zlab-dflash"
runner = CliRunner()


def multimodal_target(tmp_path: Path, **top: Any) -> Path:
    """The demo target as a multimodal model: its text model under `text_config`, except the keys
    in `top`, which move to the top level (as Qwen2-VL-style configs keep vocab_size there)."""
    folder = tmp_path / "vl-target"
    folder.mkdir()
    shutil.copy(DEMO / "target" / "model.safetensors", folder / "model.safetensors")
    text = json.loads((DEMO / "target" / "config.json").read_text(encoding="utf-8"))
    config: dict[str, Any] = {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl"}
    for key in top:
        config[key] = text.pop(key) if top[key] is None else top[key]
    config["text_config"] = text
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_a_multimodal_target_with_a_top_level_vocabulary_passes_inspect_and_plan(tmp_path: Path) -> None:
    """The disagreement this description ended: `inspect --target` read vocab_size from the top
    level, `plan` from text_config only ("text_config.vocab_size is None"), so one target passed
    one command and was refused by the other."""
    target = multimodal_target(tmp_path, vocab_size=None)
    inspected = runner.invoke(app, ["inspect", DRAFT, "--target", str(target), "--json"])
    assert inspected.exit_code == 0, inspected.output
    assert json.loads(inspected.stdout)["target"]["vocab_size"] == 128
    planned = runner.invoke(app, ["plan", "-t", str(target), "-d", DRAFT, "--gpu-memory", "16", "--json"])
    assert planned.exit_code == 0, planned.output
    (plan,) = json.loads(planned.stdout)["plans"]
    assert plan["target"]["model"]["vocab_size"] == 128 and plan["target"]["model"]["num_hidden_layers"] == 4
    # The plan's numbers are the plain target's: the same model, read from text_config.
    plain = runner.invoke(app, ["plan", "-t", str(DEMO / "target"), "-d", DRAFT, "--gpu-memory", "16", "--json"])
    (plain_plan,) = json.loads(plain.stdout)["plans"]
    assert plan["target"]["model"] == plain_plan["target"]["model"]
    assert plan["memory"] == plain_plan["memory"] and plan["max_model_len"] == plain_plan["max_model_len"]


def test_the_text_model_wins_and_the_top_level_fills_in() -> None:
    config = {"vocab_size": 7, "torch_dtype": "bfloat16", "text_config": {"vocab_size": 9, "hidden_size": 8}}
    assert text_value(config, "vocab_size") == (9, "text_config.vocab_size")
    assert text_value(config, "torch_dtype") == ("bfloat16", "torch_dtype")
    assert text_value({"vocab_size": 7}, "vocab_size") == (7, "vocab_size")


def test_every_field_reads_through_the_one_rule() -> None:
    text = {
        "num_hidden_layers": 2,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "sliding_window": 4096,
        "max_position_embeddings": 32768,
        "rope_parameters": {"rope_theta": 1e6},
    }
    config = {"architectures": ["X"], "vocab_size": 1000, "torch_dtype": "float16", "text_config": text}
    target = target_from_config(config, "vl", "/vl/config.json")
    assert target.multimodal and (target.num_hidden_layers, target.hidden_size, target.vocab_size) == (2, 512, 1000)
    assert (target.num_attention_heads, target.num_key_value_heads, target.head_dim) == (8, 2, 64)
    assert target.layer_types == ("sliding_attention", "full_attention") and target.sliding_window == 4096
    assert (target.max_position_embeddings, target.dtype, target.rope_theta) == (32768, "float16", 1e6)
    assert not target.mla and target_from_config({**config, "kv_lora_rank": 512}, "vl", "vl").mla
    dims = target_dims(target, "target")
    assert (dims.vocab_size, dims.dtype, dims.layer_types) == (1000, "float16", target.layer_types)
    # A window the config does not use slides nowhere (Qwen2-style use_sliding_window: false).
    unused = target_from_config({**config, "text_config": {**text, "use_sliding_window": False}}, "vl", "vl")
    assert unused.sliding_window is None


@pytest.mark.parametrize(
    ("config", "message"),
    [
        # Missing everywhere: named where a multimodal model keeps it.
        ({"text_config": {"num_hidden_layers": 2, "hidden_size": 8}}, r"text_config\.vocab_size is None"),
        # Present at the top level but wrong: named where it is.
        ({"vocab_size": "big", "text_config": {"num_hidden_layers": 2, "hidden_size": 8}}, r"/t: vocab_size is 'big'"),
        ({"num_hidden_layers": 2, "hidden_size": 8, "vocab_size": 0}, r"/t: vocab_size is 0"),
    ],
)
def test_a_pairing_key_that_cannot_be_read_is_named(config: dict[str, Any], message: str) -> None:
    with pytest.raises(SourceError, match=message):
        target_from_config(config, "t", "/t")


def test_inspect_plan_and_smoke_test_read_the_same_description(tmp_path: Path) -> None:
    """smoke-test's dry run reports the target as `load_target` reads it, multimodal included."""
    target = multimodal_target(tmp_path, vocab_size=None)
    description = load_target(str(target))
    result = runner.invoke(
        app, ["smoke-test", "--dry-run", "--json", "--runtime", "torch", "-t", str(target), "-d", DRAFT]
    )
    document = json.loads(result.stdout)
    assert document["target"] == description.to_dict() and document["target"]["multimodal"] is True
