"""The installed vLLM has the last word (docs/inspect.md, "The installed engine has the last word").

`inspect --engine vllm` asks the vLLM installed here what it builds from the draft (its
`get_config`, the engine config with the draft as speculative model, its mask-token and
captured-layer readers, its speculator's layout: `dflash_tools/serving/installed_vllm_child.py`)
and compares that with the release's table. On this tier's real vLLM:

- every bundled draft and every corpus file (tests/corpus/) reads the same through vLLM as
  through the table (a file vLLM's get_config cannot load is `wont-load` in the column), except the files the table still gets wrong (`DISAGREE`, each with vLLM's
  evidence; strict xfails, so each fails the day the table is fixed);
- a table edited to disagree with the release (a copy of its `EngineRules` with one rule changed,
  built here) yields DFT089 and vLLM's reading in the column;
- a release the tool has no table for (this vLLM reported as 0.35.0 by a `dist-info` ahead of
  site-packages, as test_refuse_path does) gets a column read from vLLM, through the CLI.

vLLM is asked once for all drafts (`read_installed_vllm` on a batch: one child process, one
import of vLLM); the tests hand each draft's reading to `inspect_for_engines` as
`installed_reader`, where the CLI would ask vLLM per draft. The CLI test asks it itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dflash_tools.engine_rules import ENGINE_RULES, EngineRules
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.reading.local import examples_dir
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_model import DraftFacts, EngineView
from dflash_tools.serving.engine_view import inspect_for_engines
from dflash_tools.serving.installed_columns import vllm_request
from dflash_tools.serving.installed_reading import EngineReading
from dflash_tools.serving.installed_vllm import DraftRequest, read_installed_vllm
from dflash_tools.serving.vllm_capability import VllmCapability, detect_vllm
from tests.corpus.entries import ENTRIES
from tests.real_vllm.conftest import VLLM_VERSION

pytestmark = pytest.mark.real_vllm

SPEC = f"vllm=={VLLM_VERSION}"
EXAMPLES = (
    "zlab-dflash",
    "zlab-dflash2",
    "zlab-dflash2-anchor-first",
    "speculators-dflash",
    "speculators-dflash-legacy",
    "speculators-dflash2",
    "speculators-dspark",
    "dspark-native",
    "open-spec",
)
# Corpus files on which the table and this vLLM disagree, with vLLM's evidence (strict xfails:
# each fails the day the table is fixed). None at present: the two files without a `model_type`
# that were here are read as vLLM's get_config reads them (wont-load, DFT078) since the load path.
DISAGREE: dict[str, str] = {}
# The speculators DSpark of issue 32: saved before speculators wrote `sample_from_anchor`, its
# proposal count (7 = block_size - 1) says bonus, and vLLM's translation reads the absent flag as false.
FLAGLESS_DSPARK = "speculators-dspark-without-flag"
UNKNOWN_RELEASE = "0.35.0"


def sources(workspace: Path) -> dict[str, str]:
    """Every draft read here, by a name for the test id: bundled examples, corpus files, and the
    flagless speculators DSpark written into the workspace."""
    flagless = workspace / FLAGLESS_DSPARK
    if not flagless.exists():
        config = json.loads((examples_dir() / "speculators-dspark" / "config.json").read_text(encoding="utf-8"))
        del config["sample_from_anchor"]
        config["block_size"] = 8
        flagless.mkdir(parents=True)
        (flagless / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    found = {f"example:{name}": f"example:{name}" for name in EXAMPLES}
    found.update({entry.dir: str(entry.folder) for entry in ENTRIES})
    found[FLAGLESS_DSPARK] = str(flagless)
    return found


@pytest.fixture(scope="module")
def capability(vllm_root: Path) -> VllmCapability:
    found = detect_vllm()
    assert found.installed and found.version == VLLM_VERSION
    return found


@pytest.fixture(scope="module")
def drafts(workspace: Path) -> dict[str, LoadedCheckpoint]:
    return {name: load_checkpoint(source) for name, source in sources(workspace).items()}


@pytest.fixture(scope="module")
def readings(drafts: dict[str, LoadedCheckpoint], capability: VllmCapability) -> dict[str, EngineReading]:
    """vLLM's reading of every draft, asked once. Each request is the one `inspect` itself makes
    (its first pass records it instead of asking)."""
    requests: list[DraftRequest] = []
    for name, loaded in drafts.items():

        def record(view: EngineView, facts: DraftFacts, name: str = name, loaded: LoadedCheckpoint = loaded) -> str:
            requests.append(replace(vllm_request(loaded, view, facts), id=name))
            return "recorded"

        inspect_for_engines(loaded, [], installed_vllm=capability, installed_reader=record)
    run = read_installed_vllm(requests, version=VLLM_VERSION)
    assert run.failure == "", run.failure
    assert run.vllm_version == VLLM_VERSION and not run.unavailable, (run.vllm_version, run.unavailable)
    assert set(run.readings) == set(drafts)
    return run.readings


def column(loaded: LoadedCheckpoint, capability: VllmCapability, reading: EngineReading) -> tuple[dict[str, Any], Any]:
    report = inspect_for_engines(loaded, [], installed_vllm=capability, installed_reader=lambda _view, _facts: reading)
    return report.extra["engines"][SPEC], report


def params() -> list[Any]:
    names = [f"example:{name}" for name in EXAMPLES] + [entry.dir for entry in ENTRIES] + [FLAGLESS_DSPARK]
    return [
        pytest.param(name, marks=[pytest.mark.xfail(strict=True, reason=DISAGREE[name])] if name in DISAGREE else [])
        for name in names
    ]


@pytest.mark.parametrize("name", params())
def test_vllm_reads_every_draft_as_the_table_does(
    name: str, drafts: dict[str, LoadedCheckpoint], readings: dict[str, EngineReading], capability: VllmCapability
) -> None:
    reading = readings[name]
    view, report = column(drafts[name], capability, reading)
    assert view["read_from"] == f"the installed vLLM {VLLM_VERSION}" and view["has_table"] is True
    loaded = reading.step("get_config")
    assert loaded is not None and loaded.status in ("ok", "raised"), reading.steps
    if loaded.status == "raised":  # what vLLM cannot load, the column calls so (DFT078)
        assert view["outcome"] == "wont-load", (view["outcome"], loaded.raised)
    assert view["disagreements"] == [], view["disagreements"]
    assert "DFT089" not in {finding.code for finding in report.findings}
    if reading.built:  # what it built is the column's
        assert view["path"] == reading.method and view["num_speculative_tokens"] == reading.num_speculative_tokens
        assert view["layout"] == ("anchor-first" if reading.sample_from_anchor else "bonus")


def test_the_readings_cover_what_vllm_serves(readings: dict[str, EngineReading]) -> None:
    """A fair test: vLLM built most drafts all the way to its speculator, both methods, both layouts."""
    built = [reading for reading in readings.values() if reading.built]
    assert len(built) >= 25
    assert {reading.method for reading in built} == {"dflash", "dspark"}
    assert {reading.sample_from_anchor for reading in built} == {True, False}
    # The plugin serves the anchor-first DFlash2 example with K query positions (vLLM's own object).
    anchor = readings["example:zlab-dflash2-anchor-first"]
    assert (anchor.sample_from_anchor, anchor.query_positions, anchor.num_speculative_tokens) == (True, 7, 7)
    # The speculators DSpark: vLLM reads it bonus (K + 1 query positions for the K the
    # launch line gives; with none, vLLM 0.34.0 would draft block_size = 8: DSparkSpeculatorConfig).
    flagless = readings[FLAGLESS_DSPARK]
    assert flagless.num_speculative_tokens is not None
    assert (flagless.sample_from_anchor, flagless.query_positions) == (False, flagless.num_speculative_tokens + 1)


# --- a table that is wrong --------------------------------------------------------------------


def flip_layout_default(rules: EngineRules, path: str, family: str | None) -> EngineRules:
    """The release's table with the default of one `sample_from_anchor` read flipped."""
    rule = next(r for r in rules.keys if r.key == "sample_from_anchor" and r.path == path and r.family == family)
    keys = tuple(replace(r, default=not r.default) if r is rule else r for r in rules.keys)
    return replace(rules, keys=keys)


def drop_architecture(rules: EngineRules, algorithm: str, architecture: str) -> EngineRules:
    """The release's table without the loader for one architecture."""
    routes = tuple(
        replace(r, architectures=tuple(a for a in r.architectures if a != architecture))
        if r.algorithm == algorithm
        else r
        for r in rules.routes
    )
    return replace(rules, routes=routes)


WRONG_TABLES = {
    # speculators' own DSpark class defaults the flag to true; vLLM's translation to false.
    "dspark-speculators-default": (
        FLAGLESS_DSPARK,
        lambda r: flip_layout_default(r, "dspark", "speculators"),
        "layout",
    ),
    # z-lab's DFlash: vLLM's speculator reads dflash_config.sample_from_anchor, absent: false.
    "dflash-default": (
        "published/z-lab__Qwen3-8B-DFlash-b16__9b41424b",
        lambda r: flip_layout_default(r, "dflash", None),
        "layout",
    ),
    # A loader the table forgot: vLLM builds the draft all the same.
    "lost-loader": ("example:zlab-dflash2", lambda r: drop_architecture(r, "dflash2", "DFlash2DraftModel"), "outcome"),
}


@pytest.mark.parametrize("case", list(WRONG_TABLES))
def test_a_wrong_table_is_caught_and_vllm_wins(
    case: str,
    drafts: dict[str, LoadedCheckpoint],
    readings: dict[str, EngineReading],
    capability: VllmCapability,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, edit, field = WRONG_TABLES[case]
    right, _ = column(drafts[name], capability, readings[name])
    assert right["disagreements"] == []
    monkeypatch.setitem(ENGINE_RULES, SPEC, edit(ENGINE_RULES[SPEC]))
    wrong, report = column(drafts[name], capability, readings[name])
    assert field in [d["field"] for d in wrong["disagreements"]], wrong["disagreements"]
    (finding,) = [f for f in report.findings if f.code == "DFT089"]
    assert finding.values["engine"] == SPEC and field in finding.keys
    assert "vLLM" in finding.to_dict()["values"]["disagreements"][0]["evidence"]
    # vLLM's reading wins: the column is what it was with the right table.
    for key in (
        "outcome",
        "layout",
        "num_speculative_tokens",
        "block_size",
        "mask_token_id",
        "target_layer_ids",
        "launch",
    ):
        assert wrong[key] == right[key], key


# --- a release without a table ----------------------------------------------------------------


@pytest.fixture(scope="module")
def unknown_release(workspace: Path) -> Path:
    """`importlib.metadata.version("vllm")` answers a release the tool has no table for."""
    folder = workspace / f"vllm-{UNKNOWN_RELEASE}-metadata"
    info = folder / f"vllm-{UNKNOWN_RELEASE}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {UNKNOWN_RELEASE}\n", encoding="utf-8")
    assert f"vllm=={UNKNOWN_RELEASE}" not in ENGINE_RULES
    return folder


def test_a_release_without_a_table_gets_a_column_read_from_vllm(unknown_release: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH_TOOLS_")}
    environment["PYTHONPATH"] = os.pathsep.join([str(unknown_release), environment.get("PYTHONPATH", "")])
    completed = subprocess.run(
        [sys.executable, "-m", "dflash_tools", "inspect", "example:zlab-dflash2", "--engine", "vllm", "--json"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    document = json.loads(completed.stdout)
    assert document["vllm"]["version"] == UNKNOWN_RELEASE
    (key,) = document["engines"]
    view = document["engines"][key]
    assert key == f"vllm=={UNKNOWN_RELEASE}" and view["version"] == UNKNOWN_RELEASE
    assert view["read_from"] == f"the installed vLLM {UNKNOWN_RELEASE}" and view["has_table"] is False
    newest = [rules for rules in ENGINE_RULES.values() if rules.engine == "vllm"][-1]
    assert view["table"] == newest.spec
    reading = view["installed_reading"]
    assert [step["status"] for step in reading["steps"]] == ["ok"] * 4, reading["steps"]
    assert reading["vllm_module_version"] == VLLM_VERSION  # the code that answered
    # The column is vLLM's: the bonus DFlash2 draft, 7 drafts on 8 query positions, served.
    assert (view["outcome"], view["layout"], view["num_speculative_tokens"], view["block_size"]) == (
        "served",
        "bonus",
        7,
        8,
    )
    assert (reading["sample_from_anchor"], reading["query_positions"]) == (False, 8)
    assert view["launch"] is not None
