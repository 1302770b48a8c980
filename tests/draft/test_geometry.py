"""Geometry (docs/rules.md, "Geometry"): K or K+1 query positions, sample_from_anchor provenance, serving-K rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

import dflash_tools_testing as testing
from dflash_tools import dialects
from dflash_tools.draft.description import DraftDescription
from dflash_tools.draft.geometry import (
    block_size_for,
    max_speculative_tokens,
    num_query_tokens,
    resolve_geometry,
)


def codes(findings: list) -> list[str]:
    return [f.code for f in findings]


@pytest.mark.parametrize(
    ("block_size", "sfa", "k_max", "queries_at_k_max"),
    [(8, False, 7, 8), (7, True, 7, 7), (16, False, 15, 16), (16, True, 16, 16)],
)
def test_layout_arithmetic(block_size: int, sfa: bool, k_max: int, queries_at_k_max: int) -> None:
    assert max_speculative_tokens(block_size, sfa) == k_max
    assert num_query_tokens(k_max, sfa) == queries_at_k_max == block_size
    assert block_size_for(k_max, sfa) == block_size


def test_motivating_pr_example() -> None:
    """z-lab DFlash2 (B 8, bonus-anchor) runs 8 queries for 7 drafts; anchor-first B 7 runs 7."""
    zlab = dialects.read(testing.make_config("zlab-dflash2", testing.QWEN38_27B_DFLASH2))
    geometry, _ = resolve_geometry(zlab, 7)
    assert geometry is not None
    assert (geometry.num_speculative_tokens, geometry.num_query_tokens) == (7, 8)
    anchor = dialects.read(testing.make_config("zlab-dflash2", testing.QWEN38_27B_DFLASH2_ANCHOR))
    geometry, findings = resolve_geometry(anchor, 7)
    assert geometry is not None
    assert (geometry.num_speculative_tokens, geometry.num_query_tokens) == (7, 7)
    assert geometry.sample_from_anchor_source.value == "explicit"
    assert codes(findings) == []


def _speculators(sfa: bool | None, proposal: int | None, kind: str = "speculators-dflash") -> DraftDescription:
    config = testing.make_config(kind, replace(testing.TINY, sample_from_anchor=sfa))
    if proposal is not None:
        config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = proposal
    return dialects.read(config)


def test_speculators_without_key_is_inferred_from_proposal_count() -> None:
    geometry, findings = resolve_geometry(_speculators(None, 7))
    assert geometry is not None
    assert geometry.sample_from_anchor is False
    assert geometry.sample_from_anchor_source.value == "inferred"
    assert codes(findings) == ["DFT011"]


def test_speculators_without_key_or_count_is_bonus_by_its_trainers_record() -> None:
    """A speculators save without the flag predates it (PR #760): trained bonus-anchor."""
    config = testing.make_config("speculators-dflash", replace(testing.TINY, sample_from_anchor=None))
    del config["speculators_config"]["proposal_methods"]
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is not None
    assert (geometry.sample_from_anchor, geometry.sample_from_anchor_source.value) == (False, "inferred")
    assert codes(findings) == ["DFT011"]
    assert findings[0].severity.value == "info"


def test_dft011_is_a_note_when_the_evidence_settles_the_layout() -> None:
    """Issue 34: no "find out how it was trained" when the proposal count already says it."""
    _, findings = resolve_geometry(_speculators(None, 7))
    (finding,) = findings
    assert finding.severity.value == "info" and "settles it as bonus-anchor" in finding.message
    assert "dflash-tools convert" not in finding.hint and "--sample-from-anchor" not in finding.hint


def test_proposal_count_equal_to_block_size_is_the_pre_april_mistake() -> None:
    geometry, findings = resolve_geometry(_speculators(None, 8))
    assert geometry is not None
    assert geometry.sample_from_anchor is False  # not evidence of anchor-first
    assert sorted(codes(findings)) == ["DFT011", "DFT012"]
    wrong = next(f for f in findings if f.code == "DFT012")
    assert "before April 2026" in wrong.message and wrong.severity.value == "warning"


def test_explicit_sfa_and_inconsistent_proposal_is_dft012() -> None:
    _, findings = resolve_geometry(_speculators(True, 7))
    assert codes(findings) == ["DFT012"]
    _, findings = resolve_geometry(_speculators(True, 8))
    assert codes(findings) == []


def test_speculators_dspark_without_key_is_not_its_class_default() -> None:
    """speculators' DSpark config class defaults to true, but a save without the flag predates it:
    its proposal count (B - 1) and its trainer's record both say bonus-anchor (issue 32)."""
    config = testing.make_config("speculators-dspark", replace(testing.TINY_DSPARK, sample_from_anchor=None))
    config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 6  # block_size 7
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is not None
    assert (geometry.sample_from_anchor, geometry.sample_from_anchor_source.value) == (False, "inferred")
    assert codes(findings) == ["DFT011"]


def test_zlab_block_size_locations_disagree() -> None:
    config = testing.make_config("zlab-dflash", testing.TINY, block_size_location="both")
    config["block_size"] = 16
    _, findings = resolve_geometry(dialects.read(config))
    assert "DFT010" in codes(findings)
    message = next(f for f in findings if f.code == "DFT010")
    assert set(message.keys) == {"block_size", "dflash_config.block_size"}


@pytest.mark.parametrize("location", ["top", "dflash_config", "both"])
def test_zlab_block_size_in_either_location(location: str) -> None:
    config = testing.make_config("zlab-dflash", testing.TINY, block_size_location=location)
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is not None and geometry.block_size == 8
    assert codes(findings) == []


@pytest.mark.parametrize("bad", [0, -4, "8", 8.0, True, None])
def test_block_size_not_a_positive_int(bad: object) -> None:
    config = testing.make_config("zlab-dflash2", testing.TINY_DFLASH2)
    config["dflash_config"]["block_size"] = bad
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is None
    assert "DFT010" in codes(findings)


def test_block_size_missing() -> None:
    config = testing.make_config("zlab-dflash2", testing.TINY_DFLASH2)
    del config["dflash_config"]["block_size"]
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is None
    assert "DFT010" in codes(findings)


def test_sfa_locations_disagree_is_dft010() -> None:
    config = testing.make_config("zlab-dflash2", testing.TINY_DFLASH2)
    config["sample_from_anchor"] = True
    _, findings = resolve_geometry(dialects.read(config))
    assert "DFT010" in codes(findings)


def test_zlab_top_level_mirror_only_is_not_what_vllm_reads() -> None:
    config = testing.make_config("zlab-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=None))
    config["sample_from_anchor"] = True
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is not None
    assert (geometry.sample_from_anchor, geometry.sample_from_anchor_source.value) == (True, "inferred")
    assert codes(findings) == ["DFT011"]
    assert "dflash_config.sample_from_anchor" in findings[0].message


def test_open_spec_derives_block_size_from_speculative_tokens() -> None:
    for sfa, block in ((False, 8), (True, 7)):
        spec = replace(testing.TINY, block_size=block, sample_from_anchor=sfa)
        geometry, findings = resolve_geometry(dialects.read(testing.make_config("open-spec", spec)))
        assert geometry is not None
        assert geometry.block_size == block
        assert geometry.max_speculative_tokens == 7
        assert codes(findings) == []


def test_dflash2_needs_k_equal_to_k_max() -> None:
    desc = dialects.read(testing.make_config("zlab-dflash2", testing.TINY_DFLASH2))
    for k in (3, 8):
        _, findings = resolve_geometry(desc, k)
        assert codes(findings) == ["DFT013"]
    _, findings = resolve_geometry(desc, 7)
    assert codes(findings) == []


def test_dflash_k_rules() -> None:
    desc = dialects.read(testing.make_config("zlab-dflash", testing.TINY))
    assert codes(resolve_geometry(desc, 9)[1]) == ["DFT014"]
    below = resolve_geometry(desc, 4)
    assert codes(below[1]) == ["DFT016"]
    assert below[0] is not None and below[0].num_query_tokens == 5
    assert codes(resolve_geometry(desc, 7)[1]) == []


def test_dspark_k_rules_are_not_dflash_rules() -> None:
    desc = dialects.read(testing.make_config("dspark-native", testing.TINY_DSPARK))
    assert codes(resolve_geometry(desc, 9)[1]) == []  # no DFT014 for DSpark
    assert codes(resolve_geometry(desc, 3)[1]) == ["DFT016"]


def test_conv_taps() -> None:
    spec = replace(testing.TINY_DFLASH2, conv_kernel_size=9)
    _, findings = resolve_geometry(dialects.read(testing.make_config("zlab-dflash2", spec)))
    assert codes(findings) == ["DFT015"]
    spec = replace(testing.TINY_DFLASH2, conv_group_size=24)
    _, findings = resolve_geometry(dialects.read(testing.make_config("zlab-dflash2", spec)))
    assert codes(findings) == ["DFT015"]


def test_conv_taps_above_query_positions_warns() -> None:
    """A DFlash draft never gets here (no taps); a DFlash2 one errors first on K, so check the rule directly."""
    from dflash_tools.draft.geometry import check_conv_geometry

    desc = dialects.read(testing.make_config("zlab-dflash2", replace(testing.TINY_DFLASH2, conv_kernel_size=4)))
    geometry, _ = resolve_geometry(desc, 2)
    assert geometry is not None and geometry.num_query_tokens == 3
    assert codes(check_conv_geometry(desc, geometry)) == ["DFT017"]
    geometry, _ = resolve_geometry(desc, 7)
    assert geometry is not None
    assert codes(check_conv_geometry(desc, geometry)) == []
