"""The trained layout is weighed from its evidence (docs/rules.md, "How sample_from_anchor is decided").

Strongest first: a declaration; the proposal count against the block size; the published release
the config is; what the format's trainer wrote at the time (or a trainer's markers); the
dialect's default. The strongest rank that says anything decides; two pieces of one rank that
disagree leave the layout unknown; a layout only inferred never raises an error.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import dflash_tools_testing as testing
from dflash_tools import dialects
from dflash_tools.cli._layout import hint_commands
from dflash_tools.draft.description import EvidenceKind
from dflash_tools.draft.geometry import decide_layout, resolve_geometry
from dflash_tools.findings import Severity


def speculators(kind: str, spec: testing.DraftSpec, counts: list[int] | None = None) -> dict[str, Any]:
    config = testing.make_config(kind, replace(spec, sample_from_anchor=None))
    if counts is None:
        del config["speculators_config"]["proposal_methods"]
    else:
        method = config["speculators_config"]["proposal_methods"][0]
        config["speculators_config"]["proposal_methods"] = [{**method, "speculative_tokens": c} for c in counts]
    return config


def by_code(findings: list[Any], code: str) -> list[Any]:
    return [f for f in findings if f.code == code]


def test_a_speculators_save_without_the_flag_is_bonus_by_its_trainers_record() -> None:
    """speculators writes the flag into every save since PR #760; one without it is older, and
    speculators trained bonus-anchor then, whatever its DSpark config class now defaults to."""
    for kind, spec in (("speculators-dspark", testing.TINY_DSPARK), ("speculators-dflash", testing.TINY)):
        geometry, findings = resolve_geometry(dialects.read(speculators(kind, spec)))
        assert geometry is not None
        assert (geometry.sample_from_anchor, geometry.sample_from_anchor_source.value) == (False, "inferred"), kind
        assert geometry.layout_decided_by is EvidenceKind.TRAINER_RECORD
        assert geometry.sample_from_anchor_key == "sample_from_anchor (absent)"
        (note,) = by_code(findings, "DFT011")
        assert note.severity is Severity.INFO


def test_a_dspark_proposal_count_equal_to_the_block_size_says_anchor_first() -> None:
    """speculators never stored B by mistake for DSpark (only DFlash, before April 2026): a count of
    B outweighs the trainer's record, which DFT019 names."""
    config = speculators("speculators-dspark", testing.TINY_DSPARK, [7])  # block_size 7
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is not None
    assert (geometry.layout, geometry.layout_decided_by) == ("anchor-first", EvidenceKind.PROPOSAL_COUNT)
    (dissent,) = by_code(findings, "DFT019")
    assert dissent.severity is Severity.WARNING and "PR #760" in dissent.message
    assert "DFT012" not in [f.code for f in findings]


def test_a_dflash_count_equal_to_the_block_size_reads_either_way_and_the_trainers_record_decides() -> None:
    config = speculators("speculators-dflash", testing.TINY, [8])  # block_size 8
    layout = decide_layout(dialects.read(config))
    count = next(f for f in layout.evidence if f.kind is EvidenceKind.PROPOSAL_COUNT)
    assert count.sample_from_anchor is None and "before April 2026" in count.why
    assert (layout.sample_from_anchor, layout.deciding[0].kind) == (False, EvidenceKind.TRAINER_RECORD)
    geometry, findings = resolve_geometry(dialects.read(config))
    (wrong,) = by_code(findings, "DFT012")
    # Only the inferred layout makes the count wrong: a warning, and convert (no layout flag) fixes it.
    assert wrong.severity is Severity.WARNING
    assert hint_commands(wrong.hint) == ["dflash-tools convert SRC -o OUT"]


def test_a_count_that_fits_no_layout_is_still_an_error() -> None:
    _, findings = resolve_geometry(dialects.read(speculators("speculators-dflash", testing.TINY, [5])))
    (wrong,) = by_code(findings, "DFT012")
    assert wrong.severity is Severity.ERROR and "neither layout" in wrong.message


def test_a_count_that_contradicts_a_declaration_is_an_error() -> None:
    config = testing.make_config("speculators-dspark", replace(testing.TINY_DSPARK, block_size=8))
    config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 7
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is not None and geometry.layout == "anchor-first"  # the declaration wins
    (wrong,) = by_code(findings, "DFT012")
    assert wrong.severity is Severity.ERROR and "contradicts the declared anchor-first layout" in wrong.message


def test_counts_that_disagree_leave_the_layout_unknown() -> None:
    config = speculators("speculators-dspark", replace(testing.TINY_DSPARK, block_size=8), [7, 8])
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is not None and not geometry.layout_known
    document = geometry.to_dict()
    assert (document["layout"], document["sample_from_anchor"], document["num_query_tokens"]) == ("unknown", None, None)
    assert [r["max_speculative_tokens"] for r in document["readings"]] == [7, 8]
    (unknown,) = by_code(findings, "DFT018")
    assert unknown.severity is Severity.WARNING
    assert "--compare-layouts" in unknown.hint and hint_commands(unknown.hint) == []
    assert not by_code(findings, "DFT011") and not by_code(findings, "DFT012")


def test_declarations_that_disagree_leave_the_layout_unknown_and_no_fix_writes_one() -> None:
    config = testing.make_config("zlab-dflash", replace(testing.TINY, sample_from_anchor=False))
    config["dflash_config"]["query_zero_predicts_next"] = True
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is not None and geometry.layout == "unknown"
    (conflict,) = by_code(findings, "DFT010")
    assert conflict.severity is Severity.ERROR  # the file says both: that is stated, not inferred
    assert not any("convert" in c for c in hint_commands(conflict.hint))
    assert "--compare-layouts" in conflict.hint


def test_a_k_rule_resting_on_an_inferred_layout_is_not_an_error() -> None:
    """DFT013 (DFlash2 K != K_max) for K = 8 on block_size 8: an error when the draft declares
    bonus-anchor, a warning when bonus-anchor is only its dialect's default (anchor-first takes 8)."""
    declared = testing.make_config("zlab-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=False))
    assumed = testing.make_config("zlab-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=None))
    (stated,) = by_code(resolve_geometry(dialects.read(declared), 8)[1], "DFT013")
    (inferred,) = by_code(resolve_geometry(dialects.read(assumed), 8)[1], "DFT013")
    assert (stated.severity, inferred.severity) == (Severity.ERROR, Severity.WARNING)


def test_dft011_without_evidence_says_how_to_settle_and_writes_no_layout() -> None:
    config = testing.make_config("zlab-dflash", replace(testing.TINY, sample_from_anchor=None))
    geometry, findings = resolve_geometry(dialects.read(config))
    assert geometry is not None and geometry.sample_from_anchor_source.value == "default"
    (finding,) = by_code(findings, "DFT011")
    assert finding.severity is Severity.WARNING
    assert "model card" in finding.hint and "--compare-layouts" in finding.hint
    assert hint_commands(finding.hint) == []  # no fix line writes a layout only the default says
