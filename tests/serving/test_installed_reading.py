"""The installed engine has the last word: the comparison, the column and its rendering, offline.

vLLM is not installed here. Its readings come from `data/installed_vllm_0_34_0.json`: what the
child process (`dflash_tools/serving/installed_vllm_child.py`) reported for the bundled drafts on
the real vLLM 0.34.0 of `.ci/tier-vllm.sh 0.34.0`, captured from that tier (`captured_with` says
how; tests/real_vllm/test_installed_vllm.py asks vLLM itself). The installed vLLM's own state
(version, plugin) is a source tree written by the test, as in test_vllm_view. The child process
itself runs here too, with this Python: where vLLM does not import, and where it does not answer.
"""

from __future__ import annotations

import json
import stat
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from dflash_tools.cli.inspect_run import render_engines
from dflash_tools.engine_rules import ENGINE_RULES, EngineRules, FormatRule, Route
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.reading.local import examples_dir
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from dflash_tools.serving.installed_reading import EngineReading
from dflash_tools.serving.installed_vllm import DraftRequest, read_installed_vllm, reading_of
from dflash_tools.serving.vllm_capability import VllmCapability
from tests.serving.test_vllm_view import capability, vllm_tree

CAPTURED = json.loads((Path(__file__).parent / "data" / "installed_vllm_0_34_0.json").read_text(encoding="utf-8"))
SPEC = "vllm==0.34.0"


def captured(name: str, version: str = "0.34.0") -> EngineReading:
    return reading_of(CAPTURED["readings"][name], version)


@pytest.fixture
def installed(tmp_path: Path) -> VllmCapability:
    """vLLM 0.34.0 installed here, with its own anchor-first serving (as the plugin gives it)."""
    return capability(vllm_tree(tmp_path / "vllm", native=True, v1=False), version="0.34.0")


def inspect(
    source: str, vllm: VllmCapability, reading: EngineReading | str, specs: list[str] | None = None
) -> tuple[dict[str, Any], Any]:
    report = inspect_for_engines(
        load_checkpoint(source), specs or [], installed_vllm=vllm, installed_reader=lambda _view, _facts: reading
    )
    return report.extra["engines"], report


@pytest.mark.parametrize("name", sorted(name for name in CAPTURED["readings"] if name.startswith("example:")))
def test_the_captured_readings_agree_with_the_table(name: str, installed: VllmCapability) -> None:
    engines, report = inspect(name, installed, captured(name))
    view = engines[SPEC]
    assert view["read_from"] == "the installed vLLM 0.34.0" and view["table"] == SPEC and view["has_table"]
    assert view["disagreements"] == [] and "DFT089" not in {f.code for f in report.findings}
    table_only, _ = inspect(name, installed, "not asked", specs=[SPEC])
    for key in (
        "outcome",
        "layout",
        "num_speculative_tokens",
        "block_size",
        "target_layer_ids",
        "mask_token_id",
        "launch",
    ):
        assert view[key] == table_only[SPEC][key], key


def flipped(rules: EngineRules, path: str, family: str | None) -> EngineRules:
    keys = tuple(
        replace(r, default=not r.default) if (r.key, r.path, r.family) == ("sample_from_anchor", path, family) else r
        for r in rules.keys
    )
    return replace(rules, keys=keys)


def test_a_wrong_layout_default_is_a_disagreement_and_vllm_wins(
    installed: VllmCapability, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bundled z-lab draft without its flag: vLLM's speculator reads the absent flag as false.
    draft = tmp_path / "draft"
    config = json.loads((examples_dir() / "zlab-dflash" / "config.json").read_text())
    del config["dflash_config"]["sample_from_anchor"]
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(config))
    reading = captured("example:zlab-dflash")  # the same reads: the flag there is false
    right, _ = inspect(str(draft), installed, reading)
    monkeypatch.setitem(ENGINE_RULES, SPEC, flipped(ENGINE_RULES[SPEC], "dflash", None))
    table_only, _ = inspect(str(draft), installed, "not asked", specs=[SPEC])
    assert table_only[SPEC]["layout"] == "anchor-first"  # the wrong table alone
    engines, report = inspect(str(draft), installed, reading)
    view = engines[SPEC]
    assert [d["field"] for d in view["disagreements"]] == ["layout"]
    (finding,) = [f for f in report.findings if f.code == "DFT089"]
    assert "layout: the table says anchor-first, the engine bonus" in finding.message
    assert finding.values["disagreements"][0]["evidence"].startswith("vLLM 0.34.0: speculator (vllm/v1/worker/gpu/")
    for key in ("outcome", "layout", "num_speculative_tokens", "block_size", "launch", "matches_training"):
        assert view[key] == right[SPEC][key], key


NO_MODEL_TYPE = "tests/corpus/edited/PixelML__Qwen3.8-Flash-Next-NVFP4-DFlash__partial"


def test_a_draft_vllm_cannot_load_is_not_served(installed: VllmCapability) -> None:
    """A copy without `model_type`: vLLM 0.34.0's get_config raised. The column stops with vLLM's
    own words; where the table alone serves it (it has no config-loading step: issue 32 item 1),
    that is a disagreement."""
    source = str(Path(__file__).parents[2] / NO_MODEL_TYPE)
    table_only, _ = inspect(source, installed, "not asked", specs=[SPEC])
    engines, report = inspect(source, installed, captured(NO_MODEL_TYPE))
    view = engines[SPEC]
    assert view["outcome"] in ("refused", "wont-load") and view["launch"] is None
    assert view["refusal"].startswith("vLLM 0.34.0 raises when it loads the draft, at get_config: ValueError: ")
    assert "Should have a `model_type` key" in view["refusal"]
    table_serves = table_only[SPEC]["outcome"] not in ("refused", "unsupported", "wont-load")
    assert ("DFT089" in {f.code for f in report.findings}) is table_serves
    assert [d["field"] for d in view["disagreements"]] == (["outcome"] if table_serves else [])


def test_a_table_claiming_a_loader_vllm_lacks_still_refuses(
    installed: VllmCapability, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Open Spec's DflashDraftModel: vLLM 0.34.0 raised building the engine config. A table that
    claims a loader for it refuses it too (no mask token): they agree, and the column carries
    vLLM's words."""
    rules = ENGINE_RULES[SPEC]
    route = rules.route("dflash")
    assert route is not None
    wrong = replace(
        rules,
        formats=(FormatRule("open-spec", True, "a wrong table"), *(f for f in rules.formats if f.family != "open-spec")),
        routes=tuple(replace(r, architectures=(*r.architectures, "DflashDraftModel")) if r is route else r for r in rules.routes),
    )  # fmt: skip
    monkeypatch.setitem(ENGINE_RULES, SPEC, wrong)
    engines, _ = inspect("example:open-spec", installed, captured("example:open-spec"))
    view = engines[SPEC]
    assert view["outcome"] == "refused" and view["launch"] is None and view["disagreements"] == []
    assert view["refusal"].startswith("vLLM 0.34.0 raises when it loads the draft, at engine_config: ValidationError")


def test_a_release_without_a_table_gets_a_column_read_from_it(tmp_path: Path) -> None:
    unknown = capability(vllm_tree(tmp_path / "vllm", v1=False), version="0.35.0")
    engines, report = inspect("example:zlab-dflash2", unknown, captured("example:zlab-dflash2", "0.35.0"))
    assert list(engines) == ["vllm==0.35.0"]
    view = engines["vllm==0.35.0"]
    assert (view["version"], view["has_table"], view["table"]) == ("0.35.0", False, SPEC)
    assert (view["outcome"], view["layout"], view["num_speculative_tokens"], view["block_size"]) == (
        "served",
        "bonus",
        7,
        8,
    )
    assert "DFT089" not in {f.code for f in report.findings}  # no table of its own to be wrong
    assert all(f.message.startswith("vllm==0.35.0: ") for f in report.findings if f.values.get("engine"))


def test_without_an_answer_the_table_stands_or_there_is_no_column(tmp_path: Path, installed: VllmCapability) -> None:
    engines, report = inspect("example:zlab-dflash", installed, "it did not answer within 300 s")
    assert "read_from" not in engines[SPEC] and engines[SPEC]["outcome"] == "served"
    (finding,) = [f for f in report.findings if f.code == "DFT077"]
    assert "it did not answer within 300 s; its table's column stands" in finding.message
    unknown = capability(vllm_tree(tmp_path / "other", v1=False), version="0.35.0")
    engines, report = inspect("example:zlab-dflash", unknown, "it did not answer within 300 s")
    assert (
        engines == {} and "there is no column for it" in next(f for f in report.findings if f.code == "DFT077").message
    )


def test_the_reading_can_be_switched_off(installed: VllmCapability, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DFLASH_TOOLS_ENGINE_READING", "0")
    report = inspect_for_engines(load_checkpoint("example:zlab-dflash"), [], installed_vllm=installed)
    view = report.extra["engines"][SPEC]
    assert "read_from" not in view and "DFT077" not in {f.code for f in report.findings}


def test_the_column_says_where_it_was_read(installed: VllmCapability, tmp_path: Path) -> None:
    engines, _ = inspect("example:zlab-dflash", installed, captured("example:zlab-dflash"), specs=["sglang==0.5.23"])
    unknown = capability(vllm_tree(tmp_path / "other", v1=False), version="0.35.0")
    other, _ = inspect("example:zlab-dflash", unknown, captured("example:zlab-dflash", "0.35.0"))
    console = Console(width=80, record=True, color_system=None)
    render_engines(console, {**engines, **other})
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "read from" in text and "installed" in text and "table" in text
    notes = " ".join(text.split())
    assert (
        "vllm==0.34.0: read from the installed vLLM 0.34.0 (get_config, engine_config, draft_reads, speculator)"
        in notes
    )
    assert "it agrees with the table" in notes
    assert "vllm==0.35.0: read from the installed vLLM 0.35.0" in notes and "no table for this release" in notes


# --- the child process ---------------------------------------------------------------------------


def test_where_vllm_does_not_import_the_child_says_so() -> None:
    """The real child, with this Python, which has no vLLM."""
    run = read_installed_vllm([DraftRequest("draft", folder=examples_dir() / "zlab-dflash", method="dflash",
                                            num_speculative_tokens=7)], version="0.34.0")  # fmt: skip
    assert run.readings == {} and run.failure.startswith("vLLM does not import here: ModuleNotFoundError")


def test_a_child_that_does_not_answer_is_bounded() -> None:
    run = read_installed_vllm([DraftRequest("draft", config_text="{}")], version="0.34.0", timeout_s=0.01)
    assert run.readings == {} and run.failure == "it did not answer within 0 s"


def test_a_hub_config_goes_to_a_private_folder_that_is_removed(tmp_path: Path) -> None:
    """A stand-in interpreter in the child's place records what it was given."""
    seen = tmp_path / "seen.json"
    interpreter = tmp_path / "python"
    interpreter.write_text(
        f"#!{sys.executable}\n"
        "import json, os, stat, sys\n"
        "request = json.load(open(sys.argv[2]))\n"
        "draft = request['drafts'][0]['model']\n"
        f"json.dump({{'mode': stat.S_IMODE(os.stat(request['folder']).st_mode), 'draft': draft,\n"
        "           'config': open(os.path.join(draft, 'config.json')).read(), 'folder': request['folder'],\n"
        f"           'offline': os.environ.get('HF_HUB_OFFLINE')}}, open({str(seen)!r}, 'w'))\n",
        encoding="utf-8",
    )
    interpreter.chmod(interpreter.stat().st_mode | stat.S_IXUSR)
    text = (examples_dir() / "zlab-dflash" / "config.json").read_text()
    run = read_installed_vllm([DraftRequest("draft", config_text=text)], version="0.34.0", python=str(interpreter))
    record = json.loads(seen.read_text())
    assert record["mode"] == 0o700 and record["config"] == text and record["offline"] == "1"
    assert record["draft"].startswith(record["folder"]) and not Path(record["folder"]).exists()
    assert run.failure == "it wrote no result"


def test_a_local_folder_is_given_as_it_is(tmp_path: Path) -> None:
    from dflash_tools.serving.installed_columns import vllm_request

    loaded = load_checkpoint("example:zlab-dflash")
    report = inspect_for_engines(loaded, [SPEC])
    view_doc = report.extra["engines"][SPEC]
    assert view_doc["num_speculative_tokens"] == 7
    requests: list[DraftRequest] = []

    def record(view: Any, facts: Any) -> str:
        requests.append(vllm_request(loaded, view, facts))
        return "recorded"

    inspect_for_engines(loaded, [], installed_vllm=capability(vllm_tree(tmp_path / "v"), version="0.34.0"),
                        installed_reader=record)  # fmt: skip
    (request,) = requests
    assert request.folder == examples_dir() / "zlab-dflash" and request.config_text is None
    assert (request.method, request.num_speculative_tokens, request.skip_engine) == ("dflash", 7, "")


def test_a_relative_folder_is_given_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child runs in its own folder: a relative path would name nothing there."""
    from dflash_tools.serving.installed_columns import vllm_request

    monkeypatch.chdir(examples_dir())
    loaded = load_checkpoint("zlab-dflash")
    requests: list[DraftRequest] = []

    def record(view: Any, facts: Any) -> str:
        requests.append(vllm_request(loaded, view, facts))
        return "recorded"

    inspect_for_engines(loaded, [], installed_vllm=capability(vllm_tree(tmp_path / "v"), version="0.34.0"),
                        installed_reader=record)  # fmt: skip
    assert requests[0].folder == (examples_dir() / "zlab-dflash").resolve()


def _hub_like(loaded: LoadedCheckpoint) -> LoadedCheckpoint:
    return replace(loaded, kind="hub", local_dir=None)


def test_a_hub_draft_is_given_as_the_config_inspect_read(tmp_path: Path) -> None:
    from dflash_tools.serving.installed_columns import vllm_request

    loaded = _hub_like(load_checkpoint("example:zlab-dflash2"))
    requests: list[DraftRequest] = []

    def record(view: Any, facts: Any) -> str:
        requests.append(vllm_request(loaded, view, facts))
        return "recorded"

    inspect_for_engines(loaded, [], installed_vllm=capability(vllm_tree(tmp_path / "v"), version="0.34.0"),
                        installed_reader=record)  # fmt: skip
    (request,) = requests
    assert request.folder is None and request.config_text == loaded.config_text


def test_route_a_table_without_the_loader(installed: VllmCapability, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table that lost DFlash2DraftModel's loader calls the draft unsupported; vLLM built it."""
    rules = ENGINE_RULES[SPEC]
    routes = tuple(
        Route(r.algorithm, r.path, tuple(a for a in r.architectures if a != "DFlash2DraftModel"), r.cite)
        for r in rules.routes
    )
    right, _ = inspect("example:zlab-dflash2", installed, captured("example:zlab-dflash2"))
    monkeypatch.setitem(ENGINE_RULES, SPEC, replace(rules, routes=routes))
    engines, report = inspect("example:zlab-dflash2", installed, captured("example:zlab-dflash2"))
    view = engines[SPEC]
    assert view["disagreements"][0]["field"] == "outcome" and view["disagreements"][0]["table"] == "unsupported"
    for key in ("outcome", "layout", "num_speculative_tokens", "block_size", "launch"):
        assert view[key] == right[SPEC][key], key


# --- SGLang ----------------------------------------------------------------------------------------


def test_sglang_is_asked_only_by_its_bare_name_and_only_where_installed() -> None:
    from dflash_tools.serving.engine_view import asks_installed_sglang
    from dflash_tools.serving.installed_sglang import detect_sglang

    assert asks_installed_sglang(["sglang"]) and asks_installed_sglang(["vllm, sglang"])
    assert not asks_installed_sglang(["sglang==0.5.23", "all", "vllm"])
    assert detect_sglang() is None  # SGLang cannot be installed here


def test_where_sglang_does_not_import_its_child_says_so() -> None:
    from dflash_tools.serving.installed_sglang import read_installed_sglang

    readings, failure = read_installed_sglang(
        [DraftRequest("draft", folder=examples_dir() / "dspark-native", method="DSPARK")], version="0.5.23"
    )
    assert readings == {} and failure.startswith("SGLang does not import here: ModuleNotFoundError")
