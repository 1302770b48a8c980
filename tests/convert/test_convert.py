"""`convert` through its Python API: normalization, cross-dialect round trips, refusals, safety."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dflash_tools_testing as testing
from dflash_tools import convert_checkpoint, plan_conversion
from dflash_tools.convert import RESTORE_KEY, VerificationFailed
from dflash_tools.dialects import read
from dflash_tools.draft.description import DraftDescription
from dflash_tools.errors import OperationError, UsageError
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.safetensors_header import expected_nbytes, read_local_header
from tests.conftest import CheckpointFactory, default_spec

NORMALIZATION_CODES = {"DFT010", "DFT011", "DFT012"}


def tree_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file (through links), so a test can prove the source never changed."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def random_data(spec: testing.DraftSpec, seed: int = 0) -> dict[str, bytes]:
    rng = np.random.default_rng(seed)
    return {name: rng.bytes(expected_nbytes(dtype, shape)) for name, dtype, shape in testing.tensor_table(spec)}


def tensor_bytes(folder: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for path in sorted(folder.glob("*.safetensors")):
        header = read_local_header(path)
        with open(path, "rb") as handle:
            for name, tensor in header.tensors.items():
                handle.seek(header.data_start + tensor.data_offsets[0])
                out[name] = handle.read(tensor.num_bytes)
    return out


def codes(folder: Path) -> set[str]:
    return {f.code for f in inspect_checkpoint(str(folder)).findings}


def meaning(desc: DraftDescription) -> dict[str, Any]:
    """What a config says about the draft, whatever the dialect."""
    d = desc.decoder
    return {
        "algorithm": desc.algorithm,
        "decoder": (
            d.hidden_size,
            d.num_hidden_layers,
            d.num_attention_heads,
            d.num_key_value_heads,
            d.head_dim,
            d.intermediate_size,
            d.vocab_size,
            d.layer_types,
            d.sliding_window,
            d.rope,
            d.rms_norm_eps,
        ),
        "target_layer_ids": desc.target_layer_ids,
        "mask_token_id": desc.mask_token_id,
        "draft_vocab_size": desc.draft_vocab_size,
        "dflash2": desc.dflash2,
    }


# --------------------------------------------------------------------------------------------
# Same-dialect normalization
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", testing.ALL_DIALECTS)
def test_normalizes_every_dialect(make_checkpoint: CheckpointFactory, tmp_path: Path, dialect: str) -> None:
    spec = replace(default_spec(dialect), sample_from_anchor=None)
    source = make_checkpoint(dialect, spec)
    before = tree_hashes(source)
    assert codes(source) & {"DFT011"}, "the fixture should start un-normalized"
    result = convert_checkpoint(str(source), tmp_path / "out")
    assert result.written and result.ok
    out_codes = codes(tmp_path / "out")
    assert not out_codes & NORMALIZATION_CODES
    assert tree_hashes(source) == before
    # Weights untouched: hard-linked, zero bytes copied.
    assert result.weight_bytes_copied == 0
    assert tensor_bytes(tmp_path / "out") == tensor_bytes(source)


def test_normalization_writes_every_location_and_nothing_else(
    make_checkpoint: CheckpointFactory, tmp_path: Path
) -> None:
    source = make_checkpoint("zlab-dflash", replace(testing.TINY, sample_from_anchor=None))
    original = json.loads((source / "config.json").read_text())
    convert_checkpoint(str(source), tmp_path / "out")
    text = (tmp_path / "out" / "config.json").read_text()
    config = json.loads(text)
    assert config["block_size"] == config["dflash_config"]["block_size"] == 8
    assert config["sample_from_anchor"] is config["dflash_config"]["sample_from_anchor"] is False
    rest = {k: v for k, v in config.items() if k not in ("block_size", "sample_from_anchor", "dflash_config")}
    assert rest == {k: v for k, v in original.items() if k != "dflash_config"}
    assert list(config)[: len(original)] == list(original)  # key order kept, new keys appended
    # The unchanged lines are byte-identical: only additions in the diff.
    source_lines = (source / "config.json").read_text().splitlines()
    assert [line for line in source_lines if line.rstrip(",") not in {x.rstrip(",") for x in text.splitlines()}] == []


def test_already_normalized_config_round_trips_byte_for_byte(
    make_checkpoint: CheckpointFactory, tmp_path: Path
) -> None:
    source = make_checkpoint("zlab-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=None))
    convert_checkpoint(str(source), tmp_path / "once")
    plan = plan_conversion(str(tmp_path / "once"))
    assert not plan.changed and plan.diff() == ""
    convert_checkpoint(str(tmp_path / "once"), tmp_path / "twice")
    assert (tmp_path / "twice" / "config.json").read_bytes() == (tmp_path / "once" / "config.json").read_bytes()


@pytest.mark.parametrize("style", [{"indent": 4, "sort_keys": True}, {"indent": "\t"}, {"separators": (",", ":")}])
def test_file_style_is_kept(make_checkpoint: CheckpointFactory, tmp_path: Path, style: dict[str, Any]) -> None:
    source = make_checkpoint("speculators-dflash", replace(testing.TINY, sample_from_anchor=None))
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps(config, **style))
    convert_checkpoint(str(source), tmp_path / "out")
    # speculators writes sorted keys, so the new key lands in its sorted place.
    assert list(config) == sorted(config)
    expected = dict(sorted({**config, "sample_from_anchor": False}.items()))
    assert (tmp_path / "out" / "config.json").read_text() == json.dumps(expected, **style)


def test_legacy_speculators_proposal_count_is_fixed(tmp_path: Path) -> None:
    plan = plan_conversion("example:speculators-dflash-legacy")
    assert plan.config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 7
    assert any(d.source == "fixed" and "April 2026" in d.message for d in plan.decisions)
    convert_checkpoint("example:speculators-dflash-legacy", tmp_path / "out")
    assert not codes(tmp_path / "out") & NORMALIZATION_CODES


def test_flags_override_absent_values(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash2", replace(testing.TINY_DFLASH2, block_size=7, sample_from_anchor=None))
    convert_checkpoint(str(source), tmp_path / "out", sample_from_anchor=True)
    report = inspect_checkpoint(str(tmp_path / "out"))
    assert report.geometry is not None
    assert (report.geometry.block_size, report.geometry.sample_from_anchor, report.geometry.max_speculative_tokens) == (
        7,
        True,
        7,
    )
    assert report.geometry.sample_from_anchor_source.value == "explicit"


def test_speculators_block_size_default_is_applied_and_reported(make_checkpoint: CheckpointFactory) -> None:
    config = testing.make_config("speculators-dflash", testing.TINY)
    del config["block_size"]
    source = make_checkpoint("speculators-dflash", config=config)
    plan = plan_conversion(str(source))
    assert plan.config["block_size"] == 8
    assert any(d.key == "block_size" and d.source == "default" for d in plan.decisions)


def test_zlab_without_block_size_needs_the_flag(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    config = testing.make_config("zlab-dflash", testing.TINY)
    del config["dflash_config"]["block_size"]
    source = make_checkpoint("zlab-dflash", config=config)
    with pytest.raises(OperationError, match="block_size is absent") as caught:
        plan_conversion(str(source))
    assert "--block-size" in caught.value.hint
    convert_checkpoint(str(source), tmp_path / "out", block_size=16)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dflash_config"]["block_size"] == 16


# --------------------------------------------------------------------------------------------
# Conflicts and overrides
# --------------------------------------------------------------------------------------------


def test_disagreeing_block_sizes_are_refused_with_the_flag(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash", testing.TINY, block_size_location="both")
    config = json.loads((source / "config.json").read_text())
    config["block_size"] = 16
    (source / "config.json").write_text(json.dumps(config, indent=2))
    with pytest.raises(OperationError, match="block_size disagrees") as caught:
        plan_conversion(str(source))
    assert "--block-size" in caught.value.hint
    convert_checkpoint(str(source), tmp_path / "out", block_size=8)
    assert not codes(tmp_path / "out") & NORMALIZATION_CODES


def test_disagreeing_layouts_are_refused_with_the_flags(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    config = testing.make_config("zlab-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=True))
    config["sample_from_anchor"] = False
    source = make_checkpoint("zlab-dflash2", config=config)
    with pytest.raises(OperationError, match="sample_from_anchor disagrees") as caught:
        plan_conversion(str(source))
    assert "--sample-from-anchor" in caught.value.hint and "--no-sample-from-anchor" in caught.value.hint
    convert_checkpoint(str(source), tmp_path / "out", sample_from_anchor=True)
    config_out = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config_out["sample_from_anchor"] is config_out["dflash_config"]["sample_from_anchor"] is True


def test_flag_contradicting_an_explicit_value_needs_force(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=False))
    with pytest.raises(OperationError, match="--sample-from-anchor contradicts") as caught:
        plan_conversion(str(source), sample_from_anchor=True)
    assert "--force" in caught.value.hint
    with pytest.raises(OperationError, match="--block-size 7 contradicts"):
        plan_conversion(str(source), block_size=7)
    plan = plan_conversion(str(source), block_size=7, sample_from_anchor=True, force=True)
    assert (plan.geometry.block_size, plan.geometry.sample_from_anchor) == (7, True)


def test_flag_contradicting_evidence_warns(make_checkpoint: CheckpointFactory) -> None:
    source = make_checkpoint("speculators-dflash", replace(testing.TINY, sample_from_anchor=None))
    plan = plan_conversion(str(source), sample_from_anchor=True)
    assert any("contradicts the evidence" in w for w in plan.warnings)
    assert plan.config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 8


def test_new_errors_in_the_result_refuse_the_output(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    # conv taps (2) > block_size (1): DFT015 in the output, not in the source.
    source = make_checkpoint("zlab-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=False))
    with pytest.raises(VerificationFailed, match="DFT015") as caught:
        convert_checkpoint(str(source), tmp_path / "out", block_size=1, sample_from_anchor=True, force=True)
    assert [f.code for f in caught.value.findings] == ["DFT015"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [source.name]


# --------------------------------------------------------------------------------------------
# Cross-dialect
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "other"),
    [
        ("zlab-dflash", "speculators"),
        ("zlab-dflash2", "speculators"),
        ("speculators-dflash", "zlab"),
        ("speculators-dflash2", "zlab"),
    ],
)
@pytest.mark.parametrize("shards", [1, 3])
def test_round_trip_restores_config_and_tensor_bytes(tmp_path: Path, start: str, other: str, shards: int) -> None:
    spec = default_spec(start)
    source = testing.write_checkpoint(tmp_path / "source", start, spec, shards=shards, data=random_data(spec))
    before = tree_hashes(source)
    home = start.split("-")[0]
    there = convert_checkpoint(str(source), tmp_path / "there", to=other)
    assert there.plan.output_dialect.family == other
    back = convert_checkpoint(str(tmp_path / "there"), tmp_path / "back", to=home)
    convert_checkpoint(str(source), tmp_path / "normalized")
    # The round trip gives back the normalized source config, byte for byte.
    assert (tmp_path / "back" / "config.json").read_bytes() == (tmp_path / "normalized" / "config.json").read_bytes()
    assert RESTORE_KEY not in json.loads((tmp_path / "back" / "config.json").read_text())
    # Same meaning on the other side too, and identical tensor data all the way.
    assert meaning(read(json.loads((tmp_path / "there" / "config.json").read_text()))) == meaning(
        read(json.loads((source / "config.json").read_text()))
    )
    assert tensor_bytes(tmp_path / "there") == tensor_bytes(source) == tensor_bytes(tmp_path / "back")
    for folder in ("there", "back"):
        assert not codes(tmp_path / folder) & NORMALIZATION_CODES
    assert back.ok and tree_hashes(source) == before


@pytest.mark.parametrize(
    ("start", "other"),
    [
        ("zlab-dflash", "speculators"),
        ("zlab-dflash2", "speculators"),
        ("speculators-dflash", "zlab"),
        ("speculators-dflash2", "zlab"),
    ],
)
def test_round_trip_puts_a_written_layout_flag_where_normalizing_puts_it(
    tmp_path: Path, start: str, other: str
) -> None:
    # As published (transformers and speculators save with sorted keys), without the layout flag:
    # normalizing writes sample_from_anchor in sorted place, and so must the way back from the
    # restore record (tests/corpus has the published files).
    spec = replace(default_spec(start), sample_from_anchor=None)
    config = json.loads(json.dumps(testing.make_config(start, spec), sort_keys=True))
    source = testing.write_checkpoint(tmp_path / "source", start, spec, config=config)
    convert_checkpoint(str(source), tmp_path / "there", to=other)
    convert_checkpoint(str(tmp_path / "there"), tmp_path / "back", to=start.split("-")[0])
    convert_checkpoint(str(source), tmp_path / "normalized")
    normalized = (tmp_path / "normalized" / "config.json").read_text()
    assert "sample_from_anchor" not in (source / "config.json").read_text()
    assert list(json.loads(normalized)) == sorted(json.loads(normalized))
    assert (tmp_path / "back" / "config.json").read_text() == normalized


def test_speculators_to_zlab_shape(tmp_path: Path) -> None:
    convert_checkpoint("example:speculators-dflash", tmp_path / "z", to="zlab")
    config = json.loads((tmp_path / "z" / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["dflash_config"]["target_layer_ids"] == [1, 3]  # aux [2, 4] - 1
    assert config["hidden_size"] == 64 and "transformer_layer_config" not in config
    assert "is_causal" not in config  # sliding_window_non_causal false: per-layer default
    assert config[RESTORE_KEY]["dialect"] == "speculators-dflash"


def test_zlab_to_speculators_shape_and_verifier(tmp_path: Path) -> None:
    target = tmp_path / "target"
    testing.write_json(target / "config.json", testing.make_target_config(testing.TINY_DFLASH2))
    convert_checkpoint("example:zlab-dflash2", tmp_path / "s", to="speculators", target=str(target))
    config = json.loads((tmp_path / "s" / "config.json").read_text())
    assert config["aux_hidden_state_layer_ids"] == [2, 4]
    assert config["sliding_window_non_causal"] is True  # from is_causal: false
    assert "is_causal" not in config["transformer_layer_config"]
    assert config["speculators_config"]["verifier"] == {
        "architectures": ["Qwen3ForCausalLM"],
        "name_or_path": str(target),
    }
    assert config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 7
    assert config["transformer_layer_config"]["hidden_size"] == 64


def test_zlab_without_is_causal_maps_to_false_and_reports_dft040(
    make_checkpoint: CheckpointFactory, tmp_path: Path
) -> None:
    spec = replace(testing.TINY, layer_types=("full_attention", "sliding_attention"))
    source = make_checkpoint("zlab-dflash", spec)
    result = convert_checkpoint(str(source), tmp_path / "s", to="speculators")
    assert json.loads((tmp_path / "s" / "config.json").read_text())["sliding_window_non_causal"] is False
    assert result.after is not None and "DFT040" in {f.code for f in result.after.findings}
    assert any("DFT040" in w for w in result.plan.warnings)
    convert_checkpoint(str(tmp_path / "s"), tmp_path / "z", to="zlab")
    assert "is_causal" not in json.loads((tmp_path / "z" / "config.json").read_text())


def test_speculators_without_causal_key_uses_the_class_default(
    make_checkpoint: CheckpointFactory, tmp_path: Path
) -> None:
    config = testing.make_config("speculators-dflash2", testing.TINY_DFLASH2)
    del config["sliding_window_non_causal"]
    source = make_checkpoint("speculators-dflash2", config=config)
    convert_checkpoint(str(source), tmp_path / "z", to="zlab")
    assert json.loads((tmp_path / "z" / "config.json").read_text())["is_causal"] is False
    convert_checkpoint(str(tmp_path / "z"), tmp_path / "s", to="speculators")
    assert "sliding_window_non_causal" not in json.loads((tmp_path / "s" / "config.json").read_text())


def test_embed_tokens_is_dropped_by_streaming_when_going_to_zlab(tmp_path: Path) -> None:
    spec = replace(testing.TINY, with_embed_tokens=True)
    source = testing.write_checkpoint(tmp_path / "src", "speculators-dflash", spec, shards=2, data=random_data(spec))
    result = convert_checkpoint(str(source), tmp_path / "z", to="zlab")
    assert [c.name for c in result.plan.tensor_changes] == ["embed_tokens.weight"]
    kept = tensor_bytes(source)
    del kept["embed_tokens.weight"]
    assert tensor_bytes(tmp_path / "z") == kept
    index = json.loads((tmp_path / "z" / "model.safetensors.index.json").read_text())
    assert "embed_tokens.weight" not in index["weight_map"]
    assert index["metadata"]["total_size"] == sum(len(b) for b in kept.values())
    assert {r.action for r in result.files if r.path.endswith(".safetensors")} == {"repack", "hardlink"}
    assert codes(tmp_path / "z") <= {"DFT050"}


def test_verifier_tensors_and_prefixes_are_cleaned_in_normalization(
    make_checkpoint: CheckpointFactory, tmp_path: Path
) -> None:
    table = [
        (("model." + n) if n.startswith("layers.0.") else n, d, s) for n, d, s in testing.tensor_table(testing.TINY)
    ]
    table.append(("verifier_norm.weight", "BF16", (64,)))
    source = make_checkpoint("zlab-dflash", replace(testing.TINY, sample_from_anchor=False), tensors=table)
    assert {"DFT020", "DFT021"} <= codes(source)
    result = convert_checkpoint(str(source), tmp_path / "out")
    actions = {c.action for c in result.plan.tensor_changes}
    assert actions == {"drop", "rename"}
    assert not codes(tmp_path / "out") & {"DFT020", "DFT021"}


# --------------------------------------------------------------------------------------------
# Refusals that protect behaviour
# --------------------------------------------------------------------------------------------


def test_dflash2_scalars_have_no_speculators_equivalent(make_checkpoint: CheckpointFactory) -> None:
    config = testing.make_config("zlab-dflash2", testing.TINY_DFLASH2)
    config["dflash_config"]["output_multiplier"] = 0.196
    source = make_checkpoint("zlab-dflash2", config=config)
    with pytest.raises(OperationError, match="output_multiplier = 0.196 has no speculators equivalent"):
        plan_conversion(str(source), to="speculators")
    config["dflash_config"]["output_multiplier"] = 1.0  # the default changes nothing: allowed
    (source / "config.json").write_text(json.dumps(config))
    assert plan_conversion(str(source), to="speculators").cross_dialect


def test_reduced_vocabulary_has_no_zlab_equivalent(make_checkpoint: CheckpointFactory) -> None:
    source = make_checkpoint("speculators-dflash", replace(testing.TINY, draft_vocab_size=256))
    with pytest.raises(OperationError, match="reduced vocabulary .* has no z-lab equivalent"):
        plan_conversion(str(source), to="zlab")


def test_missing_draft_vocab_size_is_named(make_checkpoint: CheckpointFactory) -> None:
    config = testing.make_config("speculators-dflash", testing.TINY)
    del config["draft_vocab_size"]
    source = make_checkpoint("speculators-dflash", config=config)
    with pytest.raises(OperationError, match="class default") as caught:
        plan_conversion(str(source), to="zlab")
    assert '"draft_vocab_size": 512' in caught.value.hint


def test_dflash2_with_reduced_vocabulary_is_refused(make_checkpoint: CheckpointFactory) -> None:
    config = testing.make_config("speculators-dflash2", testing.TINY_DFLASH2)
    config["draft_vocab_size"] = 256
    source = make_checkpoint("speculators-dflash2", config=config)
    with pytest.raises(OperationError, match="DFlash2 needs the full target vocabulary"):
        plan_conversion(str(source), to="zlab")


def test_causal_full_attention_has_no_speculators_form(make_checkpoint: CheckpointFactory) -> None:
    spec = replace(testing.TINY, layer_types=("full_attention", "full_attention"), extra_config={"is_causal": True})
    source = make_checkpoint("zlab-dflash", spec)
    with pytest.raises(OperationError, match="is_causal: true"):
        plan_conversion(str(source), to="speculators")


@pytest.mark.parametrize(
    ("example", "to"), [("dspark-native", "zlab"), ("open-spec", "speculators"), ("speculators-dspark", "zlab")]
)
def test_other_dialects_only_normalize(example: str, to: str) -> None:
    with pytest.raises(OperationError, match="cross-dialect conversion covers") as caught:
        plan_conversion(f"example:{example}", to=to)
    assert "drop --to" in caught.value.hint


# --------------------------------------------------------------------------------------------
# Output locations and in-place
# --------------------------------------------------------------------------------------------


def test_output_must_be_empty_unless_forced(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        convert_checkpoint(str(source), out)
    assert (out / "keep.txt").exists()
    convert_checkpoint(str(source), out, force=True)
    assert not (out / "keep.txt").exists() and (out / "config.json").exists()
    (tmp_path / "empty").mkdir()
    convert_checkpoint(str(source), tmp_path / "empty")


@pytest.mark.parametrize("where", ["same", "inside", "parent"])
def test_output_may_not_overlap_the_source(make_checkpoint: CheckpointFactory, where: str) -> None:
    source = make_checkpoint("zlab-dflash")
    output = {"same": source, "inside": source / "out", "parent": source.parent}[where]
    before = tree_hashes(source)
    with pytest.raises(UsageError):
        convert_checkpoint(str(source), output, force=True)
    assert tree_hashes(source) == before


def test_option_mistakes_are_usage_errors(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash")
    with pytest.raises(UsageError, match="exclude"):
        convert_checkpoint(str(source), tmp_path / "o", in_place=True)
    with pytest.raises(UsageError, match="no output"):
        convert_checkpoint(str(source))
    with pytest.raises(UsageError, match="folder"):
        convert_checkpoint(str(source / "config.json"), tmp_path / "o")
    with pytest.raises(UsageError):
        plan_conversion(str(source), to="open-spec")


def test_in_place_keeps_a_backup(make_checkpoint: CheckpointFactory) -> None:
    source = make_checkpoint("zlab-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=None))
    (source / "config.json").chmod(0o640)
    original = (source / "config.json").read_bytes()
    weights = tree_hashes(source)["model.safetensors"]
    result = convert_checkpoint(str(source), in_place=True)
    assert result.written and result.backups == [source / "config.json.bak"]
    assert (source / "config.json.bak").read_bytes() == original
    assert (source / "config.json").stat().st_mode & 0o777 == 0o640
    assert not codes(source) & NORMALIZATION_CODES
    assert tree_hashes(source)["model.safetensors"] == weights
    assert sorted(p.name for p in source.parent.iterdir() if p.name.startswith(".")) == []
    # Nothing left to do: no write, no second backup.
    assert not convert_checkpoint(str(source), in_place=True).written
    # A change with an old backup present needs --force (or --no-backup).
    (source / "config.json").write_bytes(original)
    with pytest.raises(UsageError, match="already exists"):
        convert_checkpoint(str(source), in_place=True)
    assert (source / "config.json").read_bytes() == original
    assert convert_checkpoint(str(source), in_place=True, force=True).written
    assert (source / "config.json.bak").read_bytes() == original


def test_in_place_without_backup_and_with_tensor_edits(tmp_path: Path) -> None:
    spec = replace(testing.TINY, with_embed_tokens=True)
    source = testing.write_checkpoint(tmp_path / "src", "speculators-dflash", spec, data=random_data(spec))
    result = convert_checkpoint(str(source), in_place=True, to="zlab", backup=False)
    assert result.backups == [] and not list(source.glob("*.bak"))
    assert "embed_tokens.weight" not in read_local_header(source / "model.safetensors").tensors
    assert read(json.loads((source / "config.json").read_text())).dialect.value == "zlab-dflash"


def make_hf_cache_snapshot(root: Path, source: Path) -> Path:
    """Lay a checkpoint out like the Hugging Face cache: snapshot links into ../../blobs."""
    repo = root / "models--org--draft"
    snapshot = repo / "snapshots" / ("c0ffee" + "0" * 34)
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for path in source.iterdir():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        (repo / "blobs" / digest).write_bytes(path.read_bytes())
        (snapshot / path.name).symlink_to(Path("../../blobs") / digest)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snapshot.name)
    return snapshot


def test_in_place_refused_in_the_hf_cache(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    snapshot = make_hf_cache_snapshot(tmp_path / "elsewhere-cache", make_checkpoint("zlab-dflash2"))
    blobs = tree_hashes(snapshot.parent.parent / "blobs")
    with pytest.raises(UsageError, match="Hugging Face cache"):
        convert_checkpoint(str(snapshot), in_place=True)
    # Writing a copy elsewhere is fine, and links to the real blobs without touching them.
    result = convert_checkpoint(str(snapshot), tmp_path / "out")
    assert [f.code for f in result.plan.before.findings if f.severity.value == "error"] == []
    assert result.written and tree_hashes(snapshot.parent.parent / "blobs") == blobs
    weights = tmp_path / "out" / "model.safetensors"
    assert not weights.is_symlink() and weights.stat().st_nlink == 2
    for inside in (snapshot / "sub", Path(os.environ["HF_HUB_CACHE"]) / "converted"):
        with pytest.raises(UsageError, match="Hugging Face cache"):
            convert_checkpoint(str(tmp_path / "out"), inside)


def test_link_modes(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash")
    copy = convert_checkpoint(str(source), tmp_path / "copy", link_mode="copy")
    assert copy.weight_bytes_copied == (source / "model.safetensors").stat().st_size
    sym = convert_checkpoint(str(source), tmp_path / "sym", link_mode="symlink")
    assert (tmp_path / "sym" / "model.safetensors").is_symlink() and sym.weight_bytes_copied == 0
    assert sym.ok and any("DFT004" in note for note in sym.notes)
    hard = convert_checkpoint(str(source), tmp_path / "hard", link_mode="hardlink")
    assert (tmp_path / "hard" / "model.safetensors").stat().st_ino == (source / "model.safetensors").stat().st_ino
    assert hard.bytes_linked > 0


def test_bundled_examples_are_copied_not_linked(tmp_path: Path) -> None:
    result = convert_checkpoint("example:zlab-dflash", tmp_path / "out")
    assert {r.action for r in result.files} == {"write", "copy"}


def test_other_files_are_carried_over(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash")
    (source / "tokenizer.json").write_text("{}")
    (source / "sub").mkdir()
    (source / "sub" / "notes.txt").write_text("x")
    (source / ".cache").mkdir()
    (source / ".cache" / "junk").write_text("x")
    convert_checkpoint(str(source), tmp_path / "out")
    assert sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file()) == [
        "config.json",
        "model.safetensors",
        "sub/notes.txt",
        "tokenizer.json",
    ]


def test_dry_run_writes_nothing(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash", replace(testing.TINY, sample_from_anchor=None))
    result = convert_checkpoint(str(source), tmp_path / "out", dry_run=True)
    assert not result.written and not (tmp_path / "out").exists()
    assert '+  "sample_from_anchor": false' in result.plan.diff()
    # The dry run names what the run does (issue 27: it said "link" where the run said "hardlink").
    assert [f.action for f in result.files] == ["write", "hardlink"]
    done = convert_checkpoint(str(source), tmp_path / "out")
    assert [(f.path, f.action) for f in result.files] == [
        (f.path, f.action) for f in done.files if f.path in {g.path for g in result.files}
    ]
    copy = convert_checkpoint(str(source), tmp_path / "copy", dry_run=True, link_mode="copy")
    assert [f.action for f in copy.files] == ["write", "copy"]
    document = result.to_dict()
    assert document["schema_version"] == 1 and document["changed"] is True
    assert "sample_from_anchor" in document["config"]["changed_keys"]
    json.dumps(document)


def test_source_is_unchanged_by_every_kind_of_run(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    spec = replace(testing.TINY, with_embed_tokens=True, sample_from_anchor=None)
    source = make_checkpoint("speculators-dflash", spec, shards=2)
    before = tree_hashes(source)
    stats = {p.name: p.stat() for p in source.iterdir()}
    convert_checkpoint(str(source), tmp_path / "a")
    convert_checkpoint(str(source), tmp_path / "b", to="zlab")
    convert_checkpoint(str(source), tmp_path / "c", dry_run=True)
    assert tree_hashes(source) == before
    assert {p.name: p.stat().st_mtime_ns for p in source.iterdir()} == {n: s.st_mtime_ns for n, s in stats.items()}


def test_decisions_say_which_evidence_wrote_the_layout(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    """A layout settled by evidence is written with the evidence named and no flip suggested; only a
    layout nothing but the default says names the flag for the other one (issue 32)."""
    legacy = plan_conversion("example:speculators-dflash-legacy")
    (settled,) = [d for d in legacy.decisions if d.key == "sample_from_anchor"]
    assert settled.source == "inferred" and "PR #760" in settled.message
    assert "--sample-from-anchor" not in settled.message
    assumed = make_checkpoint("zlab-dflash", spec=replace(testing.TINY, sample_from_anchor=None))
    (default,) = [d for d in plan_conversion(str(assumed)).decisions if d.key == "sample_from_anchor"]
    assert default.source == "default" and "--sample-from-anchor" in default.message


def test_a_layout_flag_against_the_evidence_is_said_aloud(tmp_path: Path) -> None:
    plan = plan_conversion("example:speculators-dflash-legacy", sample_from_anchor=True)
    assert any("contradicts the evidence" in w and "PR #760" in w for w in plan.warnings)
