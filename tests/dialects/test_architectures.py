"""Every DFlash-family architecture an engine table lists is read by a dialect or refused by name
(DFT008: the architecture, the releases that serve it, what goes unchecked), never "not a draft".

`tests/data/published/laguna-s-2.1-dflash.json`: poolside/Laguna-S-2.1-DFlash's config as
shisa-ai/hipEngine's loader test states it (revision b0486d15; reconstructed, sha256 6195643943...).
The real-engine tiers compare each table with its release's registry (tests/real_vllm/test_vllm_registry.py,
tests/real_sglang/test_sglang_registry.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import dflash_tools_testing as testing
from dflash_tools import dialects
from dflash_tools.engine_rules import ENGINE_RULES, Architecture
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines

LAGUNA = Path(__file__).parents[1] / "data" / "published" / "laguna-s-2.1-dflash.json"
ROWS = {row.name: row for rules in ENGINE_RULES.values() for row in rules.architectures}


def rows_of(name: str) -> list[tuple[str, Architecture]]:
    return [(spec, row) for spec, rules in ENGINE_RULES.items() if (row := rules.architecture(name)) is not None]


NOT_READ = sorted(name for name in ROWS if all(row.family is None for _, row in rows_of(name)))
READ = sorted(set(ROWS) - set(NOT_READ))
# A config of each family, with the architecture swapped in.
FAMILY_FIXTURE = {
    ("zlab", "dflash"): "zlab-dflash",
    ("zlab", "dflash2"): "zlab-dflash2",
    ("muse-glimmer", "dflash"): "muse-glimmer-assistant",
    ("dspark-native", "dspark"): "dspark-native",
}


def test_the_tables_list_the_architectures_of_every_release() -> None:
    assert {"DFlashLagunaForCausalLM", "MiniMaxDFlash2DraftModel", "DFlash2RicursiveDraftModel"} <= set(ROWS)
    assert "MuseGlimmerAssistantModel" in READ and "DFlashLagunaForCausalLM" in NOT_READ
    for rules in ENGINE_RULES.values():
        for row in rules.architectures:
            # A row a dialect reads names a registered dialect; one no dialect reads says what goes unchecked.
            assert dialects.spec_for_family(row.family) is not None if row.family else row.note, row.name


@pytest.mark.parametrize("name", NOT_READ)
def test_an_architecture_no_dialect_reads_is_refused_by_name(name: str) -> None:
    with pytest.raises(dialects.UnreadArchitecture) as caught:
        dialects.read({"architectures": [name], "hidden_size": 64})
    (finding,) = caught.value.findings
    assert finding.code == "DFT008" and name in finding.message
    assert finding.values["releases"] == [spec for spec, _ in rows_of(name)]


@pytest.mark.parametrize("name", READ)
def test_an_architecture_a_dialect_reads_is_read(name: str) -> None:
    families = {(row.family, row.algorithm) for _, row in rows_of(name)}
    (family,) = families
    config = testing.make_config(FAMILY_FIXTURE[family], testing.TINY)
    config["architectures"] = [name]
    desc = dialects.read(config)
    assert (desc.dialect.family, desc.algorithm.value) == family


def test_a_published_laguna_draft_is_named_in_every_column() -> None:
    report = inspect_checkpoint(str(LAGUNA)).to_dict()
    codes = [f["code"] for f in report["findings"]]
    assert codes == ["DFT008", "DFT005"]  # DFT005: a config alone, no weights
    top = report["findings"][0]
    assert "DFlashLagunaForCausalLM" in top["message"] and "not checked" in top["message"]
    assert top["values"]["releases"] == list(ENGINE_RULES)
    columns = inspect_for_engines(load_checkpoint(str(LAGUNA)), list(ENGINE_RULES))
    assert {view["outcome"] for view in columns.extra["engines"].values()} == {"unchecked"}
    named = [f for f in columns.findings if f.code == "DFT008" and "engine" in f.values]
    assert sorted(f.values["engine"] for f in named) == sorted(ENGINE_RULES)


def test_a_config_of_a_read_architecture_that_no_dialect_detects_stays_dft002() -> None:
    # A z-lab DFlash architecture with nothing else: malformed, not an unread architecture.
    with pytest.raises(dialects.UnknownDialect):
        dialects.read({"architectures": ["DFlashDraftModel"], "speculators_model_type": 3})
