"""speculators' config classes read our checkpoints with the same fields inspect reports.

speculators' config class accepts unknown keys, so loading proves nothing by itself: every test
compares field by field what speculators parsed with what `inspect` decided.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest
from speculators import SpeculatorModelConfig

from dflash_tools.convert import convert_checkpoint
from dflash_tools.draft.description import Algorithm
from dflash_tools.inspect import InspectReport, inspect_checkpoint
from tests.real_speculators.conftest import CONVERTIBLE_EXAMPLES, EXAMPLES, SPECULATORS_EXAMPLES

pytestmark = pytest.mark.real_speculators


def ours(report: InspectReport, *, proposal_from_geometry: bool) -> dict[str, Any]:
    """What inspect says, in speculators' terms (aux ids are z-lab ids + 1)."""
    desc, geometry = report.description, report.geometry
    assert desc is not None and geometry is not None
    decoder = desc.decoder
    layer_types = decoder.layer_types or ["full_attention"] * decoder.num_hidden_layers
    fields: dict[str, Any] = {
        "algorithm": desc.algorithm.value,
        "block_size": geometry.block_size,
        "sample_from_anchor": geometry.sample_from_anchor,
        "aux_hidden_state_layer_ids": [i + 1 for i in desc.target_layer_ids],
        "mask_token_id": desc.mask_token_id,
        "draft_vocab_size": desc.draft_vocab_size,
        "vocab_size": decoder.vocab_size,
        "layer_types": list(layer_types),
        "sliding_window": decoder.sliding_window if "sliding_attention" in layer_types else None,
        "hidden_size": decoder.hidden_size,
        "num_hidden_layers": decoder.num_hidden_layers,
        "num_attention_heads": decoder.num_attention_heads,
        "num_key_value_heads": decoder.num_key_value_heads,
        "head_dim": decoder.head_dim,
        "intermediate_size": decoder.intermediate_size,
        # convert writes K_max; a file read as is carries its own (possibly wrong, DFT012) value.
        "speculative_tokens": geometry.max_speculative_tokens
        if proposal_from_geometry
        else (desc.proposal_speculative_tokens or [None])[0],
    }
    if desc.algorithm is not Algorithm.DSPARK:
        fields["sliding_window_non_causal"] = (
            desc.sliding_window_non_causal
            if desc.sliding_window_non_causal is not None
            else desc.algorithm is Algorithm.DFLASH2
        )
    if desc.dflash2 is not None:
        spec = desc.dflash2
        fields.update(
            conv_kernel_size=spec.conv_kernel_size,
            conv_group_size=spec.conv_group_size,
            selector_rank=spec.selector_rank,
            selector_top_k=spec.selector_top_k,
        )
    return fields


def theirs(config: Any, keys: set[str]) -> dict[str, Any]:
    """The same fields as speculators' config object holds them."""
    layer = config.transformer_layer_config
    layer_types = list(getattr(layer, "layer_types", None) or ["full_attention"] * layer.num_hidden_layers)
    fields: dict[str, Any] = {
        "algorithm": config.speculators_config.algorithm,
        "block_size": config.block_size,
        "sample_from_anchor": config.sample_from_anchor,
        "aux_hidden_state_layer_ids": list(config.aux_hidden_state_layer_ids),
        "mask_token_id": config.mask_token_id,
        "draft_vocab_size": config.draft_vocab_size,
        "vocab_size": config.target_vocab_size,
        "layer_types": layer_types,
        "sliding_window": layer.sliding_window if "sliding_attention" in layer_types else None,
        "hidden_size": layer.hidden_size,
        "num_hidden_layers": layer.num_hidden_layers,
        "num_attention_heads": layer.num_attention_heads,
        "num_key_value_heads": layer.num_key_value_heads,
        "head_dim": layer.head_dim,
        "intermediate_size": layer.intermediate_size,
        "speculative_tokens": config.speculators_config.proposal_methods[0].speculative_tokens,
    }
    for key in keys - set(fields):
        fields[key] = getattr(config, key)
    return fields


def assert_same_fields(folder: Path, *, proposal_from_geometry: bool) -> tuple[InspectReport, Any]:
    report = inspect_checkpoint(str(folder))
    expected = ours(report, proposal_from_geometry=proposal_from_geometry)
    config = SpeculatorModelConfig.from_pretrained(str(folder))
    assert type(config).__name__.lower().startswith(expected["algorithm"])
    assert theirs(config, set(expected)) == expected
    return report, config


def test_the_installed_speculators_is_0_9_0() -> None:
    assert importlib.metadata.version("speculators") == "0.9.0"


@pytest.mark.parametrize("name", SPECULATORS_EXAMPLES)
def test_bundled_speculators_examples_read_the_same(name: str) -> None:
    assert_same_fields(EXAMPLES / name, proposal_from_geometry=False)


@pytest.mark.parametrize("name", CONVERTIBLE_EXAMPLES)
def test_convert_to_speculators_reads_the_same(name: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    convert_checkpoint(str(EXAMPLES / name), out, to="speculators")
    report, _ = assert_same_fields(out, proposal_from_geometry=True)
    source = inspect_checkpoint(str(EXAMPLES / name))
    # Conversion keeps the geometry the source declared.
    assert report.geometry is not None and source.geometry is not None
    assert (report.geometry.block_size, report.geometry.sample_from_anchor) == (
        source.geometry.block_size,
        source.geometry.sample_from_anchor,
    )


@pytest.mark.parametrize("name", SPECULATORS_EXAMPLES)
def test_configs_speculators_saves_inspect_cleanly(name: str, tmp_path: Path) -> None:
    report, config = assert_same_fields(EXAMPLES / name, proposal_from_geometry=False)
    config.save_pretrained(str(tmp_path))
    # A config alone: inspect reads it without weights (DFT005) and decides the same geometry.
    saved = inspect_checkpoint(str(tmp_path / "config.json"))
    assert saved.geometry is not None and report.geometry is not None
    assert saved.geometry.to_dict() | SOURCES == report.geometry.to_dict() | SOURCES
    assert ours(saved, proposal_from_geometry=False) == ours(report, proposal_from_geometry=False)
    # speculators writes every field, defaults included: a value the source left implicit (DFT011)
    # becomes explicit, and no new finding appears.
    assert {f.code for f in saved.findings} - {"DFT005"} <= {f.code for f in report.findings}


# How each value was decided (and from which key, on what evidence) may change when speculators
# writes every field: a layout the source left to its dialect's default becomes a declaration.
SOURCES = {
    "block_size_source": None,
    "sample_from_anchor_source": None,
    "sample_from_anchor_key": None,
    "layout_decided_by": None,
    "layout_evidence": None,
}
