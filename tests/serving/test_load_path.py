"""Each engine column follows its release's load path: config resolution, the defaults the config
class fills, then the dialect, registry and model steps (docs/inspect.md, "Engines").

What each release does comes from its source (engine_rules/config_loading.py cites the functions)
and from the tables generated from its wheel and its transformers (engine_rules/generated/); the
tiers run the same configs (tests/serving/load_path_cases.py) through vLLM's config parser and
the pinned transformers' AutoConfig and compare (tests/real_vllm/test_generated_tables.py,
tests/real_sglang/test_sglang_config_loading.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from tests.engine_cases import write_config
from tests.serving.load_path_cases import cases

ALL = list(ENGINE_RULES)
SGLANG, VLLM33, VLLM34 = "sglang==0.5.23", "vllm==0.33.0", "vllm==0.34.0"


def columns(tmp_path: Path, name: str) -> tuple[dict[str, Any], list[Any]]:
    folder = write_config(tmp_path / name, cases()[name])
    report = inspect_for_engines(load_checkpoint(str(folder)), ALL)
    engines = {f"{view['engine']}=={view['version']}": view for view in report.extra["engines"].values()}
    return engines, report.findings


def findings_of(findings: list[Any], code: str) -> dict[str, Any]:
    return {f.values["engine"]: f for f in findings if f.code == code}


# --- (a) config resolution -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model_type"),
    [("torchspec-dflash", "dflash"), ("torchspec-dspark", "dspark"), ("torchspec-domino", "domino")],
)
def test_a_model_type_transformers_does_not_know_wont_load_anywhere(tmp_path: Path, name: str, model_type: str) -> None:
    engines, findings = columns(tmp_path, name)
    assert {spec: view["outcome"] for spec, view in engines.items()} == dict.fromkeys(ALL, "wont-load")
    assert {spec: view["stopped_at"] for spec, view in engines.items()} == dict.fromkeys(ALL, "config")
    errors = findings_of(findings, "DFT078")
    assert set(errors) == set(ALL)
    for spec, finding in errors.items():
        assert finding.severity.value == "error" and finding.keys == ("model_type",)
        assert f"`{model_type}`" in finding.message and "does not recognize" in finding.message
        table = ENGINE_RULES[spec].config_loading
        assert table is not None and f"transformers {table.table}" in finding.message
    # Nothing after config load runs: no launch line, no later steps, no findings of theirs.
    for view in engines.values():
        assert view["launch"] is None
        assert [step["status"] for step in view["load_path"]] == [
            "stopped",
            "not reached",
            "not reached",
            "not reached",
        ]
    assert not [f for f in findings if f.code in ("DFT070", "DFT071", "DFT072", "DFT074") and "engine" in f.values]


def test_no_model_type_wont_load_anywhere(tmp_path: Path) -> None:
    engines, findings = columns(tmp_path, "zlab-no-model-type")
    assert {spec: view["outcome"] for spec, view in engines.items()} == dict.fromkeys(ALL, "wont-load")
    for finding in findings_of(findings, "DFT078").values():
        assert "`model_type` key" in finding.message and finding.keys == ("model_type",)
        assert '"qwen3"' in finding.hint


def test_a_speculators_config_without_model_type_loads_in_vllm_only(tmp_path: Path) -> None:
    engines, findings = columns(tmp_path, "speculators-no-model-type")
    for spec in (VLLM33, VLLM34):
        view = engines[spec]
        assert view["outcome"] == "served" and view["stopped_at"] is None
        config_step = view["load_path"][0]
        assert config_step["read"]["model_type"] == "speculators"
        assert config_step["read"]["model_type_from"] == "speculators_config"
        assert view["config_class"] == "vLLM's SpeculatorsConfig"
        assert view["filled_defaults"]["values"] == {}
    assert engines[SGLANG]["outcome"] == "wont-load"
    # SGLang reads no speculators format: converting it is the fix.
    assert "--to zlab" in findings_of(findings, "DFT078")[SGLANG].hint


def test_a_config_class_from_the_repository_needs_trust_remote_code(tmp_path: Path) -> None:
    engines, findings = columns(tmp_path, "torchspec-dflash-auto-map")
    assert {view["outcome"] for view in engines.values()} == {"wont-load"}
    assert all("--trust-remote-code" in f.hint for f in findings_of(findings, "DFT078").values())


def test_mistral_with_layer_types_is_read_as_ministral(tmp_path: Path) -> None:
    engines, _ = columns(tmp_path, "zlab-mistral-layer-types")
    assert {view["config_class"] for view in engines.values()} == {"transformers' MinistralConfig"}
    assert {view["outcome"] for view in engines.values()} == {"served"}


# --- (b) defaults the config class fills -------------------------------------------------------


def test_gpt_oss_without_layer_types_gets_sliding_layers_named_and_a_finding(tmp_path: Path) -> None:
    engines, findings = columns(tmp_path, "zlab-gpt-oss-dflash")
    warnings = findings_of(findings, "DFT079")
    assert set(warnings) == set(ALL)
    for spec, view in engines.items():
        filled = view["filled_defaults"]
        assert filled["by"] == "transformers' GptOssConfig" and filled["source"] == "table"
        table = ENGINE_RULES[spec].config_loading
        assert table is not None and filled["transformers"] == table.table
        assert filled["values"]["layer_types"] == ["sliding_attention", "full_attention"] * 4
        assert filled["values"]["sliding_window"] == 128
        assert filled["values"]["rope_parameters"]["rope_type"] == "yarn"
        defaults = view["load_path"][1]
        assert defaults["step"] == "defaults" and "filled by transformers' GptOssConfig" in defaults["decided"]["by"]
        assert defaults["source"] == "transformers/models/gpt_oss/configuration_gpt_oss.py"
        warning = warnings[spec]
        assert warning.severity.value == "warning"
        assert (
            "transformers' GptOssConfig" in warning.message and "layers 0, 2, 4, 6 of 8 (window 128" in warning.message
        )
        assert set(warning.keys) >= {"layer_types", "rope_parameters"}
    # vLLM 0.33.0 serves mixed sliding / full draft layers on its V2 runner only: the launch line says so.
    assert engines[VLLM33]["launch_environment"] == {"VLLM_USE_V2_MODEL_RUNNER": "1"}


def test_gpt_oss_that_states_its_attention_and_rope_gets_no_finding(tmp_path: Path) -> None:
    engines, findings = columns(tmp_path, "zlab-gpt-oss-dflash-stated")
    assert not findings_of(findings, "DFT079")
    assert {tuple(view["filled_defaults"]["values"]) for view in engines.values()} == {("tie_word_embeddings",)}


def test_a_fill_computed_from_keys_the_file_sets_is_not_guessed(tmp_path: Path) -> None:
    engines, findings = columns(tmp_path, "zlab-qwen3-sliding-no-layer-types")
    for view in engines.values():
        assert "layer_types" not in view["filled_defaults"]["values"]
        assert "layer_types" in view["filled_defaults"]["not_tabulated"]
    assert not findings_of(findings, "DFT079")


def test_the_installed_transformers_answers_when_the_release_runs_with_it(tmp_path: Path) -> None:
    """A transformers installed here that the release would run with (here: a table widened to
    admit the one installed) is asked directly, in a process of its own."""
    from dflash_tools.serving.load_path import installed_transformers

    installed = installed_transformers()
    if installed is None:
        pytest.skip("no transformers installed")
    rules = ENGINE_RULES[VLLM34]
    assert rules.config_loading is not None
    if installed == rules.config_loading.table:
        pytest.skip("the installed transformers is the table's: the table answers")
    widened = dataclasses.replace(
        rules, config_loading=dataclasses.replace(rules.config_loading, transformers=f">={installed}")
    )
    from dflash_tools.serving.engine_model import DraftFacts
    from dflash_tools.serving.engine_view import engine_view

    config = cases()["zlab-gpt-oss-dflash"]
    facts = DraftFacts.of(config, None, None, source="gpt-oss", draft="gpt-oss")
    view = engine_view(widened, facts)
    filled = view.to_dict()["filled_defaults"]
    assert filled["source"] == "installed" and filled["transformers"] == installed
    assert filled["values"]["layer_types"][:2] == ["sliding_attention", "full_attention"]
    assert any(f.code == "DFT079" for f in view.findings)


def test_plain_inspect_and_the_table_path_do_not_import_transformers(tmp_path: Path) -> None:
    import subprocess
    import sys

    folder = write_config(tmp_path / "gpt-oss", cases()["zlab-gpt-oss-dflash"])
    code = (
        "import sys; from dflash_tools.cli import app; from typer.testing import CliRunner; "
        f"r = CliRunner().invoke(app, ['inspect', {str(folder)!r}, '--engine', 'all', '--json']); "
        "assert r.exit_code == 0, r.output; print(sorted(m for m in ('transformers', 'torch') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# --- the generated data -------------------------------------------------------------------------


def test_every_release_names_generated_data_of_its_own() -> None:
    from dflash_tools.engine_rules.config_loading import GENERATED
    from dflash_tools.engine_rules.generate_defaults import dump

    for spec, rules in ENGINE_RULES.items():
        loading = rules.config_loading
        assert loading is not None, spec
        assert loading.release_data["engine"] == rules.engine and loading.release_data["version"] == rules.version
        assert loading.transformers_data["transformers"] == loading.table
        # Written by the generator's one layout, so that a regenerated file compares byte for byte.
        for name in (loading.generated, f"transformers-{loading.table}.json"):
            text = (GENERATED / name).read_text(encoding="utf-8")
            assert dump(json.loads(text)) == text


# --- the human output ---------------------------------------------------------------------------


def engine_table(output: str) -> list[str]:
    """The lines of the engines table (the rest holds the draft's path, which is never split)."""
    lines = output.splitlines()
    start = lines.index("engines")
    return lines[start : next(i for i, line in enumerate(lines) if line.startswith("as trained")) + 1]


def test_inspect_shows_wont_load_and_where_it_stopped_within_80_columns(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "torchspec", cases()["torchspec-dspark"])
    result = CliRunner().invoke(app, ["inspect", str(folder), "--engine", "all"], env={"COLUMNS": "80"})
    assert result.exit_code == 1, result.output
    lines = engine_table(result.output)
    assert max(len(line) for line in lines) <= 80
    serves = next(line for line in lines if line.startswith("outcome"))
    assert serves.split()[1:] == ["wont-load"] * 3
    stops = next(line for line in lines if line.startswith("stops at"))
    assert stops.split()[2:] == ["config"] * 3


def test_inspect_names_the_filled_defaults(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "gpt-oss", cases()["zlab-gpt-oss-dflash"])
    result = CliRunner().invoke(app, ["inspect", str(folder), "--engine", "all"], env={"COLUMNS": "80"})
    lines = engine_table(result.output)
    assert max(len(line) for line in lines) <= 80
    defaults = next(line for line in lines if line.startswith("defaults"))
    assert defaults.split()[1:] == ["4", "by", "GptOss"] * 3
    assert "DFT079" in result.output
