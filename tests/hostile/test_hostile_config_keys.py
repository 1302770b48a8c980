"""Issue 12: engine-read config keys, duplicate keys, lone surrogates, deep nesting, hostile geometry values.

Each reproduction of the issue runs through the real CLI (inspect and convert), and must end in a
finding or a one-line error with the documented exit code, never an internal error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dflash_tools import dialects
from dflash_tools.cli import app
from dflash_tools.draft import config_keys
from tests.conftest import CheckpointFactory

ROOT = Path(__file__).parents[2]
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def inspect_json(folder: Path) -> tuple[int, dict[str, Any]]:
    code, out, _ = invoke("inspect", str(folder), "--json")
    return code, json.loads(out)


def set_key(folder: Path, path: str, value: Any) -> None:
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    node = config
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value
    config_path.write_text(json.dumps(config, indent=2))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("hidden_act", None),
        ("hidden_act", 5),
        ("hidden_act", "bogus"),
        ("hidden_act", []),
        ("is_causal", None),
        ("use_sliding_window", {}),
        ("rope_parameters.rope_type", []),
        ("rope_parameters.rope_type", None),
        ("tie_word_embeddings", None),
        ("dtype", "\x1b[31m"),
        ("model_type", "7"),
        ("rms_norm_eps", 0),
        ("layer_types", ["sliding_attention", "diagonal"]),
    ],
)
def test_wrong_engine_read_values_are_errors_naming_the_key(
    make_checkpoint: CheckpointFactory, path: str, value: Any
) -> None:
    folder = make_checkpoint("zlab-dflash2")
    set_key(folder, path, value)
    code, document = inspect_json(folder)
    assert code == 1
    errors = [f for f in document["findings"] if f["severity"] == "error"]
    assert [f["code"] for f in errors] == ["DFT006"], errors
    assert errors[0]["keys"] == [path]
    assert "\x1b" not in json.dumps(document, ensure_ascii=False)


def test_speculators_nested_decoder_keys_are_checked_where_they_live(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("speculators-dflash2")
    set_key(folder, "transformer_layer_config.hidden_act", "bogus")
    code, document = inspect_json(folder)
    assert code == 1
    assert [f["keys"] for f in document["findings"] if f["code"] == "DFT006"] == [
        ["transformer_layer_config.hidden_act"]
    ]


def test_implausible_same_typed_value_is_a_warning_naming_the_key(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2")
    set_key(folder, "rms_norm_eps", 1e30)
    code, document = inspect_json(folder)
    assert code == 0
    assert [(f["code"], f["keys"]) for f in document["findings"]] == [("DFT058", ["rms_norm_eps"])]


@pytest.mark.parametrize(("path", "value"), [("dflash_config.mask_token_id", 0), ("sliding_window", None)])
def test_sane_values_stay_clean(make_checkpoint: CheckpointFactory, path: str, value: Any) -> None:
    folder = make_checkpoint("zlab-dflash2")
    set_key(folder, path, value)
    code, document = inspect_json(folder)
    assert code == 0 and document["findings"] == []


def test_a_key_the_reader_also_checks_is_reported_once(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2")
    set_key(folder, "hidden_size", "64")
    _, document = inspect_json(folder)
    assert [f["keys"] for f in document["findings"] if f["code"] == "DFT006"] == [["hidden_size"]]


def test_config_keys_doc_is_generated_from_the_table() -> None:
    assert (ROOT / "docs" / "config-keys.md").read_text() == config_keys.render_markdown(dialects.SPECS), (
        "docs/config-keys.md is not what the table says: python -m dflash_tools.dialects > docs/config-keys.md"
    )
    documented = (ROOT / "docs" / "config-keys.md").read_text()
    assert all(f"| `{entry.key}` |" in documented for entry in config_keys.KEYS)


# --------------------------------------------------------------------------------------------
# Duplicate keys
# --------------------------------------------------------------------------------------------


def _duplicated(folder: Path) -> str:
    text = (folder / "config.json").read_text()
    text = text.replace('"dflash_config": {', '"dflash_config": 5,\n  "dflash_config": {', 1)
    text = text.replace('"block_size": 8,', '"block_size": 4,\n    "block_size": 8,', 1)
    (folder / "config.json").write_text(text)
    return text


def test_duplicated_keys_are_reported_by_path(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash2")
    _duplicated(folder)
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text.replace('"vocab_size": 512', '"vocab_size": 512, "vocab_size": 512'))
    code, document = inspect_json(folder)
    assert code == 1
    found = {(f["code"], tuple(f["keys"])) for f in document["findings"] if f["code"] in ("DFT059", "DFT060")}
    assert found == {
        ("DFT059", ("dflash_config",)),
        ("DFT059", ("dflash_config.block_size",)),
        ("DFT060", ("vocab_size",)),
    }


def test_convert_writes_one_key_with_the_value_engines_read(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    folder = make_checkpoint("zlab-dflash2")
    _duplicated(folder)
    out = tmp_path / "out"
    code, _, err = invoke("convert", str(folder), "-o", str(out))
    assert code == 0, err
    text = (out / "config.json").read_text()
    assert text.count('"dflash_config"') == 1 and '"dflash_config": 5' not in text
    assert text.count('"block_size": 4') == 0
    config = json.loads(text)
    assert config["dflash_config"]["block_size"] == 8 and config["block_size"] == 8
    code, document = inspect_json(out)
    assert code == 0, document["findings"]
    # The object stays where the file's last copy of it stood, after num_target_layers.
    assert list(config).index("dflash_config") == list(config).index("num_target_layers") + 1


# --------------------------------------------------------------------------------------------
# Internal errors that must become findings or one-line errors
# --------------------------------------------------------------------------------------------


def test_lone_surrogate_with_raw_non_ascii(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    folder = make_checkpoint("zlab-dflash2")
    text = (folder / "config.json").read_text()
    text = text.replace('"model_type": "qwen3"', '"model_type": "qwen3", "note": "caf\u00e9 \\ud800"')
    (folder / "config.json").write_text(text, encoding="utf-8")
    code, document = inspect_json(folder)
    assert code == 1
    assert [f["keys"] for f in document["findings"] if f["code"] == "DFT061"] == [["note"]]
    for extra in ([], ["--to", "speculators"]):
        out = tmp_path / f"out{len(extra)}"
        # The output keeps the user's own key and its DFT061 error: written, and exit 1 unless
        # --allow-errors accepts it.
        code, _, err = invoke("convert", str(folder), "-o", str(out), *extra)
        assert code == 1 and "internal error" not in err, err
        code, _, err = invoke("convert", str(folder), "-o", str(out), "--force", "--allow-errors", *extra)
        assert code == 0, err
        written = (out / "config.json").read_bytes().decode("utf-8")
        assert "\\ud800" in written and "caf\u00e9" in written
        assert "caf\u00e9 \ud800" in json.dumps(json.loads(written), ensure_ascii=False)


def test_list_valued_block_size(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    folder = make_checkpoint("zlab-dflash2")
    set_key(folder, "dflash_config.block_size", [8])
    code, document = inspect_json(folder)
    assert code == 1 and "DFT010" in {f["code"] for f in document["findings"]}
    code, _, err = invoke("convert", str(folder), "-o", str(tmp_path / "out"), "--block-size", "8")
    assert code == 0, err
    assert "internal error" not in err
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dflash_config"]["block_size"] == 8


@pytest.mark.parametrize("depth", [65, 332, 989])
def test_deeply_nested_unused_key(make_checkpoint: CheckpointFactory, tmp_path: Path, depth: int) -> None:
    folder = make_checkpoint("zlab-dflash2")
    text = (folder / "config.json").read_text()
    nested = "[" * depth + "1" + "]" * depth
    (folder / "config.json").write_text(text.replace("{", '{"unused": ' + nested + ",", 1))
    code, document = inspect_json(folder)
    assert code == 1
    assert {f["code"] for f in document["findings"]} & {"DFT062", "DFT001"}
    code, _, err = invoke("convert", str(folder), "-o", str(tmp_path / "out"))
    assert code == 2, err
    assert "internal error" not in err and len(err.strip().splitlines()) <= 2
