"""The finding catalogue is public contract: documented, stable, and every code reachable."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

import dflash_tools_testing as testing
from dflash_tools.findings import CATALOGUE, render_markdown
from dflash_tools.inspect import inspect_checkpoint
from tests.conftest import CheckpointFactory

ROOT = Path(__file__).parents[2]
SPEC_CODES = {
    "DFT001", "DFT002", "DFT003", "DFT004", "DFT010", "DFT011", "DFT012", "DFT013", "DFT014", "DFT015",
    "DFT020", "DFT021", "DFT022", "DFT023", "DFT030", "DFT031", "DFT032", "DFT033", "DFT040", "DFT041",
}  # fmt: skip


def test_spec_codes_keep_their_severity() -> None:
    assert set(CATALOGUE) >= SPEC_CODES
    warnings = {"DFT011", "DFT014", "DFT021", "DFT023", "DFT033", "DFT040", "DFT041"}
    for code in SPEC_CODES:
        assert CATALOGUE[code].severity.value == ("warning" if code in warnings else "error"), code


def test_every_code_is_documented_in_the_findings_catalogue() -> None:
    catalogue = (ROOT / "docs" / "findings.md").read_text()
    documented = set(re.findall(r"^\| (DFT\d{3}) \|", catalogue, flags=re.M))
    assert set(CATALOGUE) <= documented
    used = set(re.findall(r"DFT\d{3}", "".join(p.read_text() for p in (ROOT / "dflash_tools").rglob("*.py"))))
    assert used <= set(CATALOGUE)


def test_docs_findings_md_is_rendered_from_the_catalogue() -> None:
    """One source: the page is the catalogue's (`python -m dflash_tools.findings > docs/findings.md`),
    which `dflash-tools explain` prints; every code has a condition and something to do."""
    assert (ROOT / "docs" / "findings.md").read_text() == render_markdown()
    assert all(info.condition and info.action for info in CATALOGUE.values())


def codes(folder: Path) -> list[str]:
    return [f.code for f in inspect_checkpoint(str(folder)).findings]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("hidden_size",), "64"),
        (("num_attention_heads",), 0),
        (("dflash_config", "target_layer_ids"), "1,3"),
        (("dflash_config", "conv_kernel_size"), 2.5),
        (("dflash_config", "output_multiplier"), "big"),
        (("dflash_config",), ["not", "an", "object"]),
        (("dflash_config", "sample_from_anchor"), "true"),
    ],
)
def test_wrong_types_are_dft006_not_crashes(
    make_checkpoint: CheckpointFactory, path: tuple[str, ...], value: object
) -> None:
    config = testing.make_config("zlab-dflash2", testing.TINY_DFLASH2)
    holder = config
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    report = inspect_checkpoint(str(make_checkpoint("zlab-dflash2", config=config)))
    found = [f.code for f in report.findings]
    assert "DFT006" in found, found
    assert report.to_dict()["dialect"] == "zlab-dflash2"
    json.dumps(report.to_dict(), allow_nan=False)


def test_speculators_draft_vocab_size_absent(make_checkpoint: CheckpointFactory) -> None:
    config = testing.make_config("speculators-dflash", testing.TINY)
    del config["draft_vocab_size"]
    found = codes(make_checkpoint("speculators-dflash", config=config))
    assert "DFT006" in found and "DFT020" in found  # read as 32000: lm_head and d2t become required


def test_profile_departure_is_dft050(make_checkpoint: CheckpointFactory) -> None:
    spec = replace(testing.QWEN38_27B_DFLASH2, target_layer_ids=(4, 19, 33, 47, 61), sample_from_anchor=False)
    report = inspect_checkpoint(str(make_checkpoint("zlab-dflash2", spec)))
    assert [f.code for f in report.findings] == ["DFT050"]
    assert report.profile is not None and not report.profile.matches
    assert report.profile.differences == [
        {"key": "model.target_layer_ids", "published": [5, 19, 33, 47, 61], "actual": [4, 19, 33, 47, 61]}
    ]


def test_unknown_dimensions_match_no_profile() -> None:
    report = inspect_checkpoint("example:zlab-dflash2")
    assert report.profile is None and report.findings == []
