"""The installed SGLang has the last word too: its parse step, run from SGLang 0.5.23's released source.

Where SGLang is installed, `inspect --engine sglang` runs `installed_sglang_child.py`, whose
`parse` step (`read_parsed`) calls SGLang's `parse_dflash_draft_config`,
`get_dflash_attention_sliding_window_size`, `parse_dspark_draft_config` and
`get_dspark_sample_from_anchor`. SGLang cannot be installed here, so these tests pass
`read_parsed` the same functions executed from the released wheel (the `parsers` fixture of
test_sglang_source.py, with its msgspec stand-in) and give the reading to `inspect_for_engines`.

Checked: on every bundled draft, every edge case of tests/engine_cases.py and every corpus file,
SGLang's own reading agrees with the SGLang table's column; a table edited to disagree with the
release is caught (DFT089) and SGLang's reading wins. Not checked here (no SGLang can run): the
child's `get_config` (transformers' AutoConfig through SGLang) and `registry` steps, and the child
process with a real SGLang.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dflash_tools.engine_rules import ENGINE_RULES, EngineRules
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving import installed_sglang_child
from dflash_tools.serving.engine_model import DraftFacts, EngineView
from dflash_tools.serving.engine_view import inspect_for_engines
from dflash_tools.serving.installed_sglang import InstalledSglang, sglang_reading
from tests.corpus.entries import ENTRIES
from tests.engine_cases import case_folders
from tests.engine_sources import Sources
from tests.real_sglang.test_sglang_registry import entry_classes
from tests.real_sglang.test_sglang_source import parsers

pytestmark = pytest.mark.real_sglang

__all__ = ["parsers"]  # the fixture, shared with test_sglang_source

SPEC = "sglang==0.5.23"
INSTALLED = InstalledSglang("0.5.23")


@pytest.fixture(scope="module")
def api(parsers: dict[str, Any]) -> dict[str, Any]:
    """SGLang's functions as the child takes them from the installed package."""
    dflash, dspark = parsers["dflash"], parsers["dspark"]
    return {
        "parse_dflash_draft_config": dflash["parse_dflash_draft_config"],
        "get_dflash_attention_sliding_window_size": dflash["get_dflash_attention_sliding_window_size"],
        "parse_dspark_draft_config": dspark["parse_dspark_draft_config"],
        "get_dspark_sample_from_anchor": dspark["get_dspark_sample_from_anchor"],
        "DEFAULT_DSPARK_GAMMA": dspark["DEFAULT_DSPARK_GAMMA"],
        "DEFAULT_BLOCK_SIZE": dflash["DEFAULT_BLOCK_SIZE"],
    }


@pytest.fixture(scope="module")
def registered(sglang: Sources) -> set[str]:
    """What `ModelRegistry` loads: every `EntryClass` of sglang/srt/models/ (read from the wheel)."""
    return {name for path in sglang.names(r"sglang/srt/models/[^/]+\.py") for name in entry_classes(sglang, path)}


def column(folder: Path, api: dict[str, Any], registered: set[str]) -> tuple[dict[str, Any], Any]:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    architecture = (config.get("architectures") or [""])[0]
    registry = {
        "step": "registry",
        "from": "sglang/srt/models/*.py: EntryClass (read from the released wheel, not imported)",
        "status": "ok",
        "read": {"architecture": architecture, "registered": architecture in registered},
    }

    def reader(view: EngineView, facts: DraftFacts) -> Any:
        route = view.rules.route(facts.algorithm or "")
        path = view.path or (route.path if route is not None else "DFLASH")
        steps = [registry, installed_sglang_child.read_parsed(config, path, api)]
        return sglang_reading({"steps": steps}, INSTALLED.version)

    report = inspect_for_engines(load_checkpoint(str(folder)), [], installed_sglang=INSTALLED, sglang_reader=reader)
    engines = report.extra["engines"]
    return engines["sglang"], report


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    found = case_folders(tmp_path_factory.mktemp("cases"))
    found.update({entry.dir: entry.folder for entry in ENTRIES})
    return found


def test_sglangs_own_parser_reads_every_draft_as_the_table_does(
    folders: dict[str, Path], api: dict[str, Any], registered: set[str]
) -> None:
    assert len(folders) > 50
    read = 0
    for name, folder in folders.items():
        view, report = column(folder, api, registered)
        assert view["read_from"] == "the installed SGLang 0.5.23" and view["has_table"], name
        assert view["disagreements"] == [], (name, view["disagreements"])
        assert "DFT089" not in {f.code for f in report.findings}, name
        read += view["installed_reading"]["steps"][1]["status"] == "ok"
    assert read > 40  # most drafts parse (the rest are refused by the parser and the table alike)


def flip_dspark_default(rules: EngineRules) -> EngineRules:
    keys = tuple(
        replace(r, default=not r.default) if (r.key, r.path) == ("sample_from_anchor", "DSPARK") else r
        for r in rules.keys
    )
    return replace(rules, keys=keys)


def test_a_wrong_table_is_caught_and_sglang_wins(
    folders: dict[str, Path], api: dict[str, Any], registered: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "example:dspark-native"  # no sample_from_anchor: DSPARK reads it as true
    right, _ = column(folders[name], api, registered)
    assert right["layout"] == "anchor-first"
    monkeypatch.setitem(ENGINE_RULES, SPEC, flip_dspark_default(ENGINE_RULES[SPEC]))
    wrong, report = column(folders[name], api, registered)
    assert [d["field"] for d in wrong["disagreements"]] == ["layout"]
    (finding,) = [f for f in report.findings if f.code == "DFT089"]
    assert (
        "SGLang 0.5.23: parse (sglang/srt/speculative/dflash_utils.py" in finding.values["disagreements"][0]["evidence"]
    )
    for key in (
        "outcome",
        "layout",
        "block_size",
        "num_speculative_tokens",
        "target_layer_ids",
        "mask_token_id",
        "launch",
    ):
        assert wrong[key] == right[key], key
