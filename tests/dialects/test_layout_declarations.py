"""One declaration of the layout, whatever its spelling (docs/rules.md, "How sample_from_anchor is decided").

`sample_from_anchor`, `query_zero_predicts_next` and Domino's `shift_label` say the same thing;
each dialect's spec lists where it keeps a declaration. Any one declares the layout (explicit),
two that disagree are DFT010 naming both keys and where each sits, a non-boolean is DFT006, and
the JSON geometry names the key the layout was read from.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import dflash_tools_testing as testing
from dflash_tools import dialects
from dflash_tools.convert import convert_checkpoint
from dflash_tools.draft.geometry import resolve_geometry
from dflash_tools.errors import OperationError
from dflash_tools.findings import Finding
from dflash_tools.inspect import inspect_checkpoint

UNDECLARED = replace(testing.TINY, sample_from_anchor=None, block_size=7)


def zlab(**nested: Any) -> dict[str, Any]:
    """A z-lab DFlash config with no sample_from_anchor and `nested` added to dflash_config."""
    config = testing.make_config("zlab-dflash", UNDECLARED)
    config["dflash_config"].update(nested)
    return config


def layout_of(config: dict[str, Any]) -> tuple[bool, str, str | None, list[Finding]]:
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is not None
    return (
        geometry.sample_from_anchor,
        geometry.sample_from_anchor_source.value,
        geometry.sample_from_anchor_key,
        findings,
    )


def codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]


def test_query_zero_predicts_next_in_dflash_config_declares_anchor_first() -> None:
    sfa, source, key, findings = layout_of(zlab(query_zero_predicts_next=True))
    assert (sfa, source, key) == (True, "explicit", "dflash_config.query_zero_predicts_next")
    assert codes(findings) == []


@pytest.mark.parametrize(
    ("dialect", "spec"),
    [
        ("speculators-dflash", UNDECLARED),
        ("speculators-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=None, block_size=7)),
    ],
)
def test_query_zero_predicts_next_at_the_top_level_declares_anchor_first(dialect: str, spec: testing.DraftSpec) -> None:
    config = testing.make_config(dialect, spec)
    config["query_zero_predicts_next"] = True
    config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 7
    sfa, source, key, findings = layout_of(config)
    assert (sfa, source, key) == (True, "explicit", "query_zero_predicts_next")
    assert codes(findings) == []


def test_query_zero_predicts_next_false_overrides_the_native_dspark_default() -> None:
    """Native DSpark defaults to anchor-first; a top-level declaration of bonus-anchor is taken as stated."""
    config = testing.make_config("dspark-native", replace(testing.TINY_DSPARK, sample_from_anchor=None, block_size=8))
    config["query_zero_predicts_next"] = False
    sfa, source, key, _ = layout_of(config)
    assert (sfa, source, key) == (False, "explicit", "query_zero_predicts_next")


def test_a_z_lab_top_level_declaration_is_a_mirror_vllm_ignores() -> None:
    """z-lab's top level is a mirror for every spelling, as for sample_from_anchor: inferred, and DFT011 says where vLLM looks."""
    config = zlab()
    config["query_zero_predicts_next"] = True
    sfa, source, key, findings = layout_of(config)
    assert (sfa, source, key) == (True, "inferred", "query_zero_predicts_next")
    (finding,) = findings
    assert finding.code == "DFT011" and "engines read dflash_config.sample_from_anchor" in finding.message


@pytest.mark.parametrize(
    ("config", "first", "second"),
    [
        (
            zlab(sample_from_anchor=False, query_zero_predicts_next=True),
            "sample_from_anchor in dflash_config = false",
            "query_zero_predicts_next in dflash_config = true",
        ),
        (
            zlab(shift_label=True, query_zero_predicts_next=False),
            "query_zero_predicts_next in dflash_config = false",
            "shift_label in dflash_config = true",
        ),
    ],
)
def test_two_declarations_that_disagree_are_an_error_naming_both(
    config: dict[str, Any], first: str, second: str
) -> None:
    _, source, _, findings = layout_of(config)
    (conflict,) = [f for f in findings if f.code == "DFT010"]
    assert first in conflict.message and second in conflict.message
    assert len(conflict.keys) == 2 and all(key.startswith("dflash_config.") for key in conflict.keys)
    # The file says both: the layout is unknown, and no fix line writes either (issue 32).
    assert source == "unknown" and "--compare-layouts" in conflict.hint and "dflash-tools convert" not in conflict.hint


def test_disagreement_across_places_names_where_each_sits() -> None:
    config = testing.make_config("speculators-dflash", replace(testing.TINY, sample_from_anchor=True, block_size=7))
    config["query_zero_predicts_next"] = False
    findings = resolve_geometry(dialects.read(config))[1]
    (conflict,) = [f for f in findings if f.code == "DFT010"]
    assert "sample_from_anchor at the top level = true" in conflict.message
    assert "query_zero_predicts_next at the top level = false" in conflict.message
    assert set(conflict.keys) == {"sample_from_anchor", "query_zero_predicts_next"}


@pytest.mark.parametrize("value", ["true", 1, None])
def test_a_declaration_that_is_not_a_boolean_is_an_error(value: Any) -> None:
    sfa, source, key, findings = layout_of(zlab(query_zero_predicts_next=value))
    (wrong,) = [f for f in findings if f.code == "DFT006"]
    assert wrong.keys == ("dflash_config.query_zero_predicts_next",) and "not true or false" in wrong.message
    # The value declares nothing: the dialect default stands, and DFT011 says so.
    assert (sfa, source, key) == (False, "default", None)
    assert "DFT011" in codes(findings)


def test_inspect_json_names_the_declaring_key(tmp_path: Path) -> None:
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", config=zlab(query_zero_predicts_next=True))
    geometry = inspect_checkpoint(str(folder)).to_dict()["geometry"]
    assert geometry["sample_from_anchor"] is True and geometry["layout"] == "anchor-first"
    assert geometry["sample_from_anchor_source"] == "explicit"
    assert geometry["sample_from_anchor_key"] == "dflash_config.query_zero_predicts_next"
    bundled = inspect_checkpoint("example:zlab-dflash2").to_dict()["geometry"]
    assert bundled["sample_from_anchor_key"] == "dflash_config.sample_from_anchor"
    assert inspect_checkpoint("example:dspark-native").to_dict()["geometry"]["sample_from_anchor_key"] is None


def test_a_declaration_stops_the_deepspec_inference() -> None:
    """DeepSpec's marker-based inference applies only to drafts that declare nothing."""
    config = testing.make_config("dspark-native", replace(testing.TINY_DSPARK, sample_from_anchor=None, markov_rank=0))
    config["query_zero_predicts_next"] = False
    desc = dialects.read(config)
    assert desc.layout_evidence == ()
    assert codes(resolve_geometry(desc)[1]) == []


def test_convert_writes_the_declared_layout_and_round_trips(tmp_path: Path) -> None:
    source = testing.write_checkpoint(tmp_path / "src", "zlab-dflash", config=zlab(query_zero_predicts_next=True))
    convert_checkpoint(str(source), tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["dflash_config"]["sample_from_anchor"] is True and written["sample_from_anchor"] is True
    assert written["dflash_config"]["query_zero_predicts_next"] is True  # kept: only B and SFA are written
    after = inspect_checkpoint(str(tmp_path / "out")).to_dict()
    assert after["geometry"]["sample_from_anchor_key"] == "dflash_config.sample_from_anchor"
    assert [f["code"] for f in after["findings"] if f["code"] in ("DFT010", "DFT011")] == []
    # Across dialects and back: the restore record gives the first output back byte for byte.
    convert_checkpoint(str(tmp_path / "out"), tmp_path / "spec", to="speculators")
    assert json.loads((tmp_path / "spec" / "config.json").read_text())["sample_from_anchor"] is True
    convert_checkpoint(str(tmp_path / "spec"), tmp_path / "back", to="zlab")
    assert (tmp_path / "back" / "config.json").read_bytes() == (tmp_path / "out" / "config.json").read_bytes()


def test_convert_refuses_a_declaration_that_is_not_a_boolean(tmp_path: Path) -> None:
    source = testing.write_checkpoint(tmp_path / "src", "zlab-dflash", config=zlab(query_zero_predicts_next="true"))
    with pytest.raises(OperationError, match="query_zero_predicts_next") as caught:
        convert_checkpoint(str(source), tmp_path / "out")
    assert "--sample-from-anchor" in caught.value.hint
    assert not (tmp_path / "out").exists()
