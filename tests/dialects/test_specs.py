"""Dialect specs: one registry, and the layers below read the spec, not the dialect's name.

docs/adding-a-dialect.md: a new dialect is its module (with `SPEC`), a line in the registry, a
`FormatRule` per engine table and the fixture factory's config writer. The tests here keep the
registry, the factory and the engine tables in step, and drive the config-key table, the checks
and geometry with a dialect that exists only in this file: if any of them still branched on a
family name, the made-up dialect would fail there.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import dflash_tools_testing as testing
from dflash_tools import dialects
from dflash_tools.dialects._common import ConfigView, block_size_values, layout_values, read_decoder
from dflash_tools.draft.checks import check_config
from dflash_tools.draft.config_keys import check_config_keys
from dflash_tools.draft.description import Algorithm, Dialect, DraftDescription
from dflash_tools.draft.dialect_spec import Causality, DialectKeys, DialectSpec, LayoutKey
from dflash_tools.draft.geometry import resolve_geometry
from dflash_tools.engine_rules import ENGINE_RULES

ROOT = Path(__file__).resolve().parents[2]


def default_spec(dialect: str) -> testing.DraftSpec:
    if "dspark" in dialect:
        return testing.TINY_DSPARK
    return testing.TINY_DFLASH2 if dialect.endswith("dflash2") else testing.TINY


def test_the_registry_and_the_fixture_factory_name_the_same_dialects() -> None:
    registered = [d.value for spec in dialects.SPECS for d in spec.dialects]
    assert len(set(registered)) == len(registered)
    assert sorted(registered) == sorted(testing.ALL_DIALECTS)
    assert len({spec.family for spec in dialects.SPECS}) == len(dialects.SPECS)


@pytest.mark.parametrize("name", testing.ALL_DIALECTS)
def test_each_dialect_is_detected_and_read_by_its_own_spec(name: str) -> None:
    config = testing.make_config(name, default_spec(name))
    dialect = dialects.detect(config)
    assert dialect is not None and dialect.value == name
    assert dialects.by_name(name) is dialect
    assert dialect in dialect.spec.dialects and dialects.spec_for_family(dialect.family) is dialect.spec
    desc = dialects.read(config)
    assert desc.dialect is dialect and desc.spec is dialect.spec and desc.algorithm is dialect.algorithm
    assert dialects.module_for(dialect).SPEC is dialect.spec


def test_every_engine_table_says_whether_it_reads_each_format() -> None:
    missing = [
        f"{key}: {spec.family}"
        for key, rules in ENGINE_RULES.items()
        for spec in dialects.SPECS
        if rules.reads_format(spec.family) is None
    ]
    assert missing == []


def test_the_page_on_adding_a_dialect_lists_at_most_four_places() -> None:
    page = (ROOT / "docs" / "adding-a-dialect.md").read_text(encoding="utf-8")
    section = page.split("## The files", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. `([^`]+)`", section, re.MULTILINE)
    assert 1 <= len(steps) <= 4, steps
    named = set(re.findall(r"`(dflash_tools(?:_testing)?/[\w/.]+)`", section))
    # Every generated page a test compares with its generator is named with its command.
    for command in ("python -m dflash_tools.dialects >", "python -m dflash_tools.engine_rules.docs > docs/engines.md"):
        assert command in " ".join(page.split()), command
    assert set(steps) <= named
    for name in named:
        # The new module's own name is a placeholder; every other path exists today.
        path = ROOT / name.replace("NEW", "zlab")
        assert path.is_file() or path.is_dir(), name
    # Each dialect module the page describes has what it says: a SPEC and the reader functions.
    for spec in dialects.SPECS:
        module = dialects.module_for(spec.dialects[0])
        assert all(callable(getattr(module, name)) for name in ("detect", "read", "normalize"))


# --------------------------------------------------------------------------------------------
# A dialect that exists only here
# --------------------------------------------------------------------------------------------

TOY = DialectSpec(
    family="toy",
    title="Toy",
    markers="toy_format_version",
    dialects=(Dialect("toy-dflash", Algorithm.DFLASH),),
    keys=DialectKeys(
        decoder=("decoder.",),
        algorithm=("toy_config.",),
        block_size=("toy_config.block_size",),
        layout=(LayoutKey("toy_config.query_zero_predicts_next"), LayoutKey("sample_from_anchor", mirror=True)),
    ),
    causality=Causality.IS_CAUSAL,
    format_keys=("toy_format_version",),
)
(TOY_DFLASH,) = TOY.dialects


def toy_config(**toy: Any) -> dict[str, Any]:
    decoder = testing.make_config("zlab-dflash", testing.TINY)
    for key in ("architectures", "auto_map", "dflash_config", "block_size", "sample_from_anchor"):
        decoder.pop(key, None)
    return {"toy_format_version": 1, "decoder": decoder, "toy_config": {"target_layer_ids": [1, 3], **toy}}


def toy_read(config: dict[str, Any]) -> DraftDescription:
    """A reader written the way a dialect module writes one: `_common` helpers and the spec."""
    top = ConfigView(config)
    toy = top.sub("toy_config")
    decoder_view = top.sub("decoder")
    assert toy is not None and decoder_view is not None
    decoder = read_decoder(decoder_view)
    return DraftDescription(
        dialect=TOY_DFLASH,
        algorithm=TOY_DFLASH.algorithm,
        decoder=decoder,
        target_layer_ids=toy.get_int_list("target_layer_ids", minimum=None) or [],
        target_layer_ids_key="toy_config.target_layer_ids",
        mask_token_id=toy.get_int("mask_token_id", minimum=0),
        mask_token_id_key="toy_config.mask_token_id" if toy.has("mask_token_id") else None,
        draft_vocab_size=decoder.vocab_size,
        block_size_values=block_size_values(config, TOY),
        sample_from_anchor_values=layout_values(config, TOY),
        raw_config=config,
        reader_findings=top.findings,
    )


def test_the_config_key_table_checks_keys_where_the_spec_keeps_them() -> None:
    config = toy_config(block_size=7, mask_token_id="500", conv_kernel_size=0)
    config["decoder"]["rms_norm_eps"] = 0
    findings = check_config_keys(config, TOY)
    assert sorted(key for f in findings for key in f.keys) == [
        "decoder.rms_norm_eps",
        "toy_config.conv_kernel_size",
        "toy_config.mask_token_id",
    ]


def test_geometry_reads_block_size_and_layout_where_the_spec_keeps_them() -> None:
    geometry, findings = resolve_geometry(toy_read(toy_config(block_size=7, query_zero_predicts_next=True)))
    assert geometry is not None and findings == []
    assert (geometry.block_size, geometry.sample_from_anchor, geometry.sample_from_anchor_source.value) == (
        7,
        True,
        "explicit",
    )
    assert geometry.sample_from_anchor_key == "toy_config.query_zero_predicts_next"

    mirrored = toy_config(block_size=7)
    mirrored["sample_from_anchor"] = True
    geometry, findings = resolve_geometry(toy_read(mirrored))
    assert geometry is not None and geometry.sample_from_anchor_source.value == "inferred"
    (dft011,) = findings
    assert "engines read toy_config.query_zero_predicts_next" in dft011.message

    absent_geometry, absent = resolve_geometry(toy_read(toy_config()))
    assert absent_geometry is None
    assert [f.message for f in absent if f.code == "DFT010"] == [
        "block_size is absent: none of toy_config.block_size is set"
    ]


def test_checks_read_the_spec() -> None:
    desc = toy_read(toy_config(block_size=7))
    (mask,) = [f for f in check_config(desc) if f.code == "DFT032"]
    assert mask.keys == ("toy_config.mask_token_id",)
    negative = replace(desc, target_layer_ids=[-1, 3], mask_token_id=500)
    assert [f.code for f in check_config(negative)] == ["DFT030"]  # the spec allows no id below 0
