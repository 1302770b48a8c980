"""`dflash-tools smoke-test` as a user runs it: dry runs, full runs through the process boundary
(tests/fake_child.py standing in for the GPU engine), verdicts, output and exit codes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import dflash_tools_testing as testing
from dflash_tools.cli import app
from dflash_tools.plan.presets import list_presets, load_preset
from dflash_tools.smoke.runner import CHILD_COMMAND_ENV
from tests.hub_server import HubServer

runner = CliRunner()
FAKE_CHILD = Path(__file__).parents[1] / "fake_child.py"
ANCHOR_DFLASH2 = replace(testing.TINY_DFLASH2, block_size=7, sample_from_anchor=True)


@pytest.fixture(autouse=True)
def system_temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Without --output-dir, smoke-test keeps each run's requests and logs in a new folder under the
    system temp dir, on purpose (it prints where); in these runs that folder lives under tmp_path."""
    folder = tmp_path / "system-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture(autouse=True)
def without_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """These runs stand for a machine without vLLM (tests/fake_child.py plays the engine). Where vLLM
    is installed it is made unimportable, so that they hold either way; the installed vLLM 0.33.0
    itself is covered by tests/real_vllm."""
    monkeypatch.setitem(sys.modules, "vllm", None)


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["smoke-test", *args], env=env)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, str]:
    """A target and two DFlash2 drafts (bonus-anchor B 8, anchor-first B 7), as on the GPU plan."""
    target = tmp_path / "target"
    testing.write_target(target, testing.TINY_DFLASH2)
    bonus = testing.write_checkpoint(tmp_path / "zlab-dflash2", "zlab-dflash2", testing.TINY_DFLASH2)
    anchor = testing.write_checkpoint(tmp_path / "anchor-dflash2", "zlab-dflash2", ANCHOR_DFLASH2)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "one"}\n"two"\n\n{"prompt": "three"}\n', encoding="utf-8")
    return {
        "target": str(target),
        "bonus": str(bonus),
        "anchor": str(anchor),
        "prompts": str(prompts),
        "dir": str(tmp_path),
    }


@pytest.fixture
def fake_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHILD_COMMAND_ENV, f"{sys.executable} {FAKE_CHILD}")


def base_args(setup: dict[str, str], *extra: str) -> list[str]:
    return ["-t", setup["target"], "-d", setup["bonus"], "-d", setup["anchor"], "--prompts", setup["prompts"], *extra]


# --- dry run ---------------------------------------------------------------------------------


def test_dry_run_json_plan(setup: dict[str, str]) -> None:
    code, out, err = invoke(
        *base_args(setup, "--runtime", "vllm", "--dry-run", "--format", "json", "--max-tokens", "16")
    )
    assert code == 0, err
    document = json.loads(out)
    assert (document["schema_version"], document["command"], document["mode"]) == (1, "smoke-test", "dry-run")
    assert document["engine"] == "vllm" and document["vllm"]["support"] == "absent"
    assert document["prompts"]["count"] == 3
    summary = [
        (
            d["geometry"]["layout"],
            r["num_speculative_tokens"],
            r["num_query_tokens"],
            r["runner"],
            r["request"]["baseline"],
        )
        for d in document["drafts"]
        for r in d["runs"]
    ]
    assert summary == [("bonus-anchor", 7, 8, "v2", True), ("anchor-first", 7, 7, "v2", False)]
    assert [d["verdict"]["status"] for d in document["drafts"]] == ["planned", "planned"]
    request = document["drafts"][1]["runs"][0]["request"]
    assert request["speculative_config"]["method"] == "dflash"
    assert request["prompts"] == ["one", "two", "three"] and request["max_tokens"] == 16


def test_dry_run_without_vllm_or_torch_installed(setup: dict[str, str]) -> None:
    """Neither engine importable, and neither imported by the dry run."""
    script = (
        "import sys\n"
        "sys.modules['torch'] = None; sys.modules['vllm'] = None\n"
        "from dflash_tools.cli import app\n"
        "try:\n"
        "    app(sys.argv[1:])\n"
        "except SystemExit as exit:\n"
        "    print('EXIT', exit.code, sys.modules.get('torch'), sys.modules.get('vllm'), file=sys.stderr)\n"
        "    raise\n"
    )
    args = ["smoke-test", *base_args(setup, "--dry-run", "--format", "json")]
    completed = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert "EXIT 0 None None" in completed.stderr
    document = json.loads(completed.stdout)
    assert (document["engine_requested"], document["engine"], document["engine_available"]) == ("auto", "torch", False)
    assert [r["request"]["engine"] for d in document["drafts"] for r in d["runs"]] == ["torch", "torch"]


def test_dry_run_human_plan(setup: dict[str, str]) -> None:
    code, out, _ = invoke(*base_args(setup, "--runtime", "vllm", "--dry-run", "--compare-layouts"))
    assert code == 0
    assert "launch plan" in out and "VLLM_USE_V2_MODEL_RUNNER=1" in out
    assert "[flipped: anchor-first]" in out and "[flipped: bonus-anchor]" in out
    assert "PLANNED" in out and "\x1b[" not in out


def test_dry_run_exit_codes_for_refusals(setup: dict[str, str], tmp_path: Path) -> None:
    code, out, _ = invoke(*base_args(setup, "--runtime", "vllm", "--dry-run", "-k", "5", "--json"))
    assert code == 1  # DFT013: a DFlash2 draft at K != K_max is the checkpoint's error
    assert {d["verdict"]["status"] for d in json.loads(out)["drafts"]} == {"refused"}
    code, _, _ = invoke(*base_args(setup, "--runtime", "vllm", "--dry-run", "-k", "5", "--force"))
    assert code == 0
    code, out, _ = invoke(
        *base_args(setup, "--runtime", "vllm", "--dry-run", "--env", "VLLM_USE_V2_MODEL_RUNNER=0", "--json")
    )
    assert code == 2  # a setup that cannot serve DFlash2 at all
    assert json.loads(out)["drafts"][0]["refusal"]["kind"] == "setup"


# --- bundled presets -------------------------------------------------------------------------


def test_bundled_presets_are_valid() -> None:
    assert list_presets() == ["qwen3-8b-dflash-b16", "qwen3.8-27b-dflash2"]
    preset = load_preset("qwen3.8-27b-dflash2")
    assert preset.target == "Qwen/Qwen3.8-27B" and preset.num_speculative_tokens == 7
    assert [d.draft for d in preset.drafts] == ["z-lab/Qwen3.8-27B-DFlash2", "DaoCloud/Qwen3.8-27B-DFlash2-Exp"]
    assert [d.expect["num_query_tokens"] for d in preset.drafts] == [8, 7]
    for draft in preset.drafts:
        assert draft.floor is not None and draft.floor.mean_acceptance_length == 4.0
        # Provenance names the published figure the floor derives from, not a file outside the project.
        assert re.search(r"\b5\.(34|55)\b", draft.floor.provenance)
        assert "SPEC" not in draft.floor.provenance and "research/" not in draft.floor.provenance
    assert [r["mean_acceptance_length"] for r in preset.drafts[0].references] == [5.34, 5.37]
    small = load_preset("qwen3-8b-dflash-b16")
    assert small.drafts[0].floor is not None and small.drafts[0].floor.mean_acceptance_length == 5.59


def test_the_motivating_preset_resolves(hub: HubServer) -> None:
    """The vLLM PR's plan, with the published configs served by a local Hub: 8 and 7 queries."""

    def config(dialect: str, spec: testing.DraftSpec) -> bytes:
        return json.dumps(testing.make_config(dialect, spec)).encode()

    hub.add_repo(
        "Qwen/Qwen3.8-27B", {"config.json": json.dumps(testing.make_target_config(testing.QWEN38_27B_DFLASH2)).encode()}
    )
    hub.add_repo("z-lab/Qwen3.8-27B-DFlash2", {"config.json": config("zlab-dflash2", testing.QWEN38_27B_DFLASH2)})
    hub.add_repo(
        "DaoCloud/Qwen3.8-27B-DFlash2-Exp", {"config.json": config("zlab-dflash2", testing.QWEN38_27B_DFLASH2_ANCHOR)}
    )
    code, out, err = invoke("--preset", "qwen3.8-27b-dflash2", "--runtime", "vllm", "--dry-run", "--json")
    assert code == 0, err
    document = json.loads(out)
    runs = [
        (d["draft"], r["num_query_tokens"], r["runner"], r["request"]["speculative_config"])
        for d in document["drafts"]
        for r in d["runs"]
    ]
    assert runs == [
        (
            "z-lab/Qwen3.8-27B-DFlash2",
            8,
            "v2",
            {"method": "dflash", "model": "z-lab/Qwen3.8-27B-DFlash2", "num_speculative_tokens": 7},
        ),
        (
            "DaoCloud/Qwen3.8-27B-DFlash2-Exp",
            7,
            "v2",
            {"method": "dflash", "model": "DaoCloud/Qwen3.8-27B-DFlash2-Exp", "num_speculative_tokens": 7},
        ),
    ]
    assert all(d["verdict"]["warnings"] == [] for d in document["drafts"])  # both match the preset's expectations
    request = document["drafts"][0]["runs"][0]["request"]
    assert (request["chat"], request["enable_thinking"], request["max_tokens"]) == (True, False, 256)
    assert request["engine_args"]["max_model_len"] == 4096 and request["target"] == "Qwen/Qwen3.8-27B"
    assert document["drafts"][0]["floor"]["mean_acceptance_length"] == 4.0


# --- full runs through the process boundary --------------------------------------------------


def run_json(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    code, out, err = invoke(*args, "--json", env=env)
    return code, json.loads(out), err


def test_full_run_passes(setup: dict[str, str], fake_child: None, tmp_path: Path) -> None:
    work = tmp_path / "work"
    code, document, err = run_json(
        *base_args(setup, "--runtime", "vllm", "--output-dir", str(work)), env={"FAKE_CHILD_ACCEPTED": "1,1,1,1,1,0,0"}
    )
    assert code == 0, err
    assert document["mode"] == "offline" and document["work_dir"] == str(work)
    assert document["baseline"]["tokens_per_second"] == pytest.approx(3 * 128 / 5.0)
    for draft in document["drafts"]:
        (run,) = draft["runs"]
        result = run["result"]
        assert result["ok"] and result["mean_acceptance_length"] == 6.0
        assert run["token_identity"] == {
            "token_identical": True,
            "identical_prompts": 3,
            "prompts": 3,
            "first_mismatch": None,
        }
        assert run["speedup"] == pytest.approx(2.5)
        assert run["verdict"] == {"status": "pass", "reasons": [], "warnings": []}
        assert Path(result["log_path"]).is_file() and Path(result["log_path"]).parent == work
        assert result["log_path"] in err  # printed as it starts
    # Only the first run measured the target alone; the second used its baseline.
    requests = sorted(work.glob("*.request.json"))
    assert [json.loads(p.read_text(encoding="utf-8"))["baseline"] for p in requests] == [True, False]
    anchor_run = document["drafts"][1]["runs"][0]
    assert anchor_run["result"]["query_positions_per_step"] == [7]


def test_full_run_human_output(setup: dict[str, str], fake_child: None) -> None:
    code, out, err = invoke(*base_args(setup, "--runtime", "vllm"), env={"FAKE_CHILD_ACCEPTED": "1,1,1,1,0,0,0"})
    assert code == 0, err
    assert "results" in out and "mean acceptance length" in out and "5.00" in out
    assert "acceptance per draft position" in out
    assert "  0 ██████████████████████████████ 1.00" in out and "  6                                " in out
    assert out.count("PASS") == 4  # each verdict first and last
    assert out.splitlines()[0].split()[0] == "PASS"  # the path may follow on the next line
    assert "logs and results:" in out
    assert "running " in err and "  log:" in err  # progress lines on stderr, no spinner off a TTY


def test_failures(setup: dict[str, str], fake_child: None) -> None:
    code, document, _ = run_json(
        *base_args(setup, "--runtime", "vllm", "--floor", "3"), env={"FAKE_CHILD_ACCEPTED": "1,0,0,0,0,0,0"}
    )
    assert code == 1
    assert document["drafts"][0]["verdict"]["reasons"] == ["mean acceptance length 2.00 is below the floor 3.00"]
    # Positions 1 and 2 accepted in steps that rejected position 0: counts no engine can report
    # (a chain), so no verdict is judged from them (smoke.counter_relations).
    code, document, _ = run_json(*base_args(setup, "--runtime", "vllm"), env={"FAKE_CHILD_ACCEPTED": "0,1,1,0,0,0,0"})
    assert code == 1
    assert document["drafts"][0]["verdict"]["status"] == "error"
    assert document["drafts"][0]["verdict"]["reasons"] == [
        "the vllm engine reported impossible counters: position 1 accepted 10 times, position 0 only 0 "
        "(per-position counts do not rise)"
    ]
    code, document, _ = run_json(*base_args(setup, "--runtime", "vllm"), env={"FAKE_CHILD_MODE": "crash"})
    assert code == 1
    assert [d["verdict"]["status"] for d in document["drafts"]] == ["error", "error"]
    assert "exited with code 3" in document["drafts"][0]["verdict"]["reasons"][0]
    code, document, _ = run_json(*base_args(setup, "--runtime", "vllm"), env={"FAKE_CHILD_MODE": "wrong-q"})
    assert code == 1
    assert document["drafts"][1]["verdict"]["reasons"] == [
        "the engine ran 8 query positions per request, the anchor-first layout needs 7"
    ]


def test_an_engine_error_is_printed_once(setup: dict[str, str], fake_child: None) -> None:
    """The verdict carries the engine's error (at the end); the first verdict line and the progress
    line on stderr only point to it. JSON: the progress line is the only human-readable copy."""
    args = ["-t", setup["target"], "-d", setup["bonus"], "--prompts", setup["prompts"], "--runtime", "vllm"]
    message = "sample_from_anchor=True is not supported for DFlash"
    code, out, err = invoke(*args, env={"FAKE_CHILD_MODE": "error"})
    assert code == 1
    # Whitespace joined: at 80 columns a long path (a long TMPDIR) wraps the message between words.
    assert " ".join((out + err).split()).count(message) == 1, out + err
    assert out.splitlines()[0].split()[0] == "ERROR" and out.count("ERROR ") >= 2  # first and last
    code, out, err = invoke(*args, "--json", env={"FAKE_CHILD_MODE": "error"})
    assert code == 1 and message in json.loads(out)["drafts"][0]["verdict"]["reasons"][0]
    assert " ".join(err.split()).count(message) == 1


@pytest.mark.parametrize("mode", ["--dry-run", "--no-baseline"])
def test_a_target_without_weights_is_refused_at_plan_time(mode: str, setup: dict[str, str]) -> None:
    """example:tiny-target is config only: the dry run used to say PLANNED and the real run fail in
    transformers. Both are refused before any engine starts, naming a bundled target that runs."""
    args = ["-t", "example:tiny-target", "-d", "example:zlab-dflash2", "--runtime", "torch", mode]
    code, out, err = invoke(*args)
    assert code == 2 and out == ""
    assert err.count("config only, no weights") == 1
    assert "example:engine-demo/target" in err and "PLANNED" not in out + err
    code, out, err = invoke(*args, "--json")
    assert code == 2 and json.loads(out)["error"]["kind"] == "source"
    # A folder with a config only, the same.
    config_only = Path(setup["dir"]) / "config-only"
    config_only.mkdir()
    shutil.copy(Path(setup["target"]) / "config.json", config_only / "config.json")
    code, _, err = invoke("-t", str(config_only), "-d", setup["bonus"], "--runtime", "torch", mode)
    assert code == 2 and "config only, no weights" in err


def test_token_mismatch_is_a_warning_unless_required(setup: dict[str, str], fake_child: None) -> None:
    code, document, _ = run_json(*base_args(setup, "--runtime", "vllm"), env={"FAKE_CHILD_MISMATCH": "1"})
    assert code == 0
    run = document["drafts"][0]["runs"][0]
    assert run["token_identity"]["first_mismatch"] == {"prompt": 0, "position": 3}
    assert run["verdict"]["warnings"] == ["greedy output differs from the target alone in 1 of 3 prompt(s)"]
    code, _, _ = run_json(
        *base_args(setup, "--runtime", "vllm", "--require-identical"), env={"FAKE_CHILD_MISMATCH": "1"}
    )
    assert code == 1


def test_compare_layouts(setup: dict[str, str], fake_child: None) -> None:
    args = [
        "-t",
        setup["target"],
        "-d",
        setup["bonus"],
        "--prompts",
        setup["prompts"],
        "--runtime",
        "vllm",
        "--compare-layouts",
    ]
    code, document, _ = run_json(*args, env={"FAKE_CHILD_DECLARED": "false"})
    assert code == 0
    (draft,) = document["drafts"]
    assert draft["layout_comparison"]["outcome"] == "declared"
    assert [r["layout_role"] for r in draft["runs"]] == ["declared", "flipped"]
    flipped = draft["runs"][1]
    assert flipped["request"]["draft_config_overrides"] == {"dflash_config.sample_from_anchor": True}
    assert flipped["verdict"]["status"] == "fail"  # the wrong layout collapses, as it should
    env = {"FAKE_CHILD_DECLARED": "false", "FAKE_CHILD_MODE": "flipped-better", "FAKE_CHILD_ACCEPTED": "1,1,0,0,0,0,0"}
    code, document, _ = run_json(*args, env=env)
    assert code == 1
    verdict = document["drafts"][0]["verdict"]
    assert verdict["status"] == "fail"
    assert "sample_from_anchor looks mislabeled" in verdict["reasons"][-1]


def test_plugin_required_run_records_the_marker(setup: dict[str, str], fake_child: None, tmp_path: Path) -> None:
    """Anchor-first on a patchable vLLM: the child must find the plugin active (markers)."""
    args = [
        "-t",
        setup["target"],
        "-d",
        setup["anchor"],
        "--prompts",
        setup["prompts"],
        "--runtime",
        "vllm",
        "--output-dir",
        str(tmp_path / "w"),
    ]
    code, document, _ = run_json(*args)
    assert code == 0
    run = document["drafts"][0]["runs"][0]
    assert run["serving"] == "unknown"  # no vLLM here to classify; the child decides
    markers = sorted((tmp_path / "w").glob("*.markers"))
    assert len(markers) == 1 and markers[0].is_dir()


def test_engine_not_installed_is_a_setup_error(setup: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CHILD_COMMAND_ENV, raising=False)
    code, _, err = invoke(*base_args(setup, "--runtime", "vllm"))
    assert code == 2
    assert "the vllm engine is not installed" in err and "pip install '.[vllm]'" in err


def test_usage_errors(setup: dict[str, str], tmp_path: Path) -> None:
    code, _, err = invoke(*base_args(setup, "--runtime", "tensorrt"))
    # The parser refuses it and names the choices (they are also in --help).
    assert code == 2 and "'--runtime'" in err and "'tensorrt' is not one of 'auto', 'vllm', 'torch'" in err
    code, _, err = invoke(*base_args(setup, "--engine-arg", "novalue", "--dry-run"))
    assert code == 2 and "expected KEY=VALUE" in err
    code, _, err = invoke("--preset", "no-such-preset", "--dry-run")
    assert code == 2 and "preset 'no-such-preset': no such preset" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": 3}\n', encoding="utf-8")
    code, _, err = invoke("-t", setup["target"], "-d", setup["bonus"], "--prompts", str(bad), "--dry-run")
    assert code == 2 and "line 2: prompt is missing or empty" in err
    code, _, err = invoke("-d", setup["bonus"], "--dry-run")
    assert code == 2 and "no target given" in err
    code, _, err = invoke("-t", setup["target"], "--dry-run")
    assert code == 2 and "no draft given" in err
    code, _, err = invoke(
        "-t", setup["target"], "-d", setup["bonus"], "-d", setup["anchor"], "--server", "http://127.0.0.1:9"
    )
    assert code == 2 and "--server measures one draft" in err
    broken = tmp_path / "broken.json"
    broken.write_text(
        '{"schema_version": 1, "drafts": [{"draft": "x", "floor": {"mean_acceptance_length": 4}}]}', encoding="utf-8"
    )
    code, _, err = invoke("--preset", str(broken), "--dry-run")
    assert code == 2 and "drafts[0].floor.provenance is missing" in err
    assert "Traceback" not in err


def test_preset_values_and_cli_overrides(setup: dict[str, str], tmp_path: Path) -> None:
    preset = tmp_path / "mine.json"
    preset.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "target": setup["target"],
                "prompts": setup["prompts"],
                "max_tokens": 32,
                "num_prompts": 2,
                "engine_args": {"max_model_len": 2048},
                "env": {"VLLM_LOGGING_LEVEL": "DEBUG"},
                "drafts": [
                    {"draft": setup["anchor"], "floor": {"mean_acceptance_length": 3.5, "provenance": "local run"}}
                ],
            }
        ),
        encoding="utf-8",
    )
    code, out, err = invoke(
        "--preset",
        str(preset),
        "--runtime",
        "vllm",
        "--dry-run",
        "--json",
        "--max-model-len",
        "1024",
        "--engine-arg",
        "enforce_eager=true",
    )
    assert code == 0, err
    document = json.loads(out)
    (draft,) = document["drafts"]
    request = draft["runs"][0]["request"]
    assert (request["max_tokens"], len(request["prompts"])) == (32, 2)
    assert request["engine_args"]["max_model_len"] == 1024 and request["engine_args"]["enforce_eager"] is True
    assert request["env"]["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert draft["floor"] == {"mean_acceptance_length": 3.5, "first_position_rate": None, "provenance": "local run"}
    # Where each value comes from, resolved once (`smoke.options.resolve_options`).
    sources = document["option_sources"]
    assert {key: sources[key] for key in ("target", "drafts", "prompts", "max_tokens", "num_prompts")} == dict.fromkeys(
        ("target", "drafts", "prompts", "max_tokens", "num_prompts"), "preset"
    )
    assert sources["engine_args.max_model_len"] == sources["engine_args.enforce_eager"] == "argument"
    assert sources["env.VLLM_LOGGING_LEVEL"] == "preset" and sources["engine"] == "argument"
    assert sources["chat"] == sources["num_speculative_tokens"] == "default"
