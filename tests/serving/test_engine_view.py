"""`inspect --engine sglang / vllm==X / all`: each engine release's rules applied to one draft.

The expectations below are what each release does by its own rules (docs/engines.md, with the
file each comes from); `tests/real_sglang` runs SGLang's parser from its released wheel on the
same configs (`tests/engine_cases.py`) and checks that the SGLang column agrees with it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.convert import convert_checkpoint
from dflash_tools.draft.target import TargetDescription, load_target
from dflash_tools.engine_rules import ENGINE_RULES, Layout, Outcome, WhenMissing, json_key
from dflash_tools.inspect import inspect_loaded
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_checks import CHECKERS
from dflash_tools.serving.engine_model import DraftFacts
from dflash_tools.serving.engine_view import engine_view, inspect_for_engines, resolve_engine_specs
from tests.engine_cases import edge_configs, example_drafts, write_config

# Every release the registry has (tests/engine_rules/test_release_list.py pins the list); the
# three below are the releases whose own facts a test states.
ALL = list(ENGINE_RULES)
SGLANG, VLLM33, VLLM34 = "sglang==0.5.23", "vllm==0.33.0", "vllm==0.34.0"
# JSON keys: the engine's name while it has one table (`sglang`), else `engine==version`.
KEY = {spec: json_key(rules) for spec, rules in ENGINE_RULES.items()}


def views(
    source: str | Path, *, target: str | None = None, target_spec: TargetDescription | None = None
) -> tuple[dict[str, Any], list[Any]]:
    report = inspect_for_engines(load_checkpoint(str(source)), ALL, target_name=target, target=target_spec)
    # Re-keyed by `engine==version` for the tests; test_json_engines_object checks the JSON keys.
    engines = {f"{view['engine']}=={view['version']}": view for view in report.extra["engines"].values()}
    return engines, report.findings


def edge(tmp_path: Path, name: str) -> Path:
    return write_config(tmp_path / name, edge_configs()[name])


def codes_for(findings: list[Any], spec: str) -> list[str]:
    return [f.code for f in findings if f.values.get("engine") == spec]


# --- every bundled example --------------------------------------------------------------------

EXPECTED_OUTCOMES = {
    # example: (every SGLang release, every vLLM release)
    "zlab-dflash": ("served", "served"),
    "zlab-dflash2": ("served", "served"),
    "zlab-dflash2-anchor-first": ("misaligned", "served-with-plugin"),
    # SGLang loads the draft's config with AutoConfig, which raises on a config without a top-level
    # model_type (sglang/srt/utils/hf_transformers/config.py: HfModelConfigParser.parse).
    "speculators-dflash": ("wont-load", "served"),
    "speculators-dflash-legacy": ("wont-load", "served"),
    "speculators-dflash2": ("wont-load", "served"),
    "speculators-dspark": ("wont-load", "served"),
    "dspark-native": ("served", "served"),
    "open-spec": ("unsupported", "unsupported"),
    "engine-demo/zlab-dflash": ("served", "served"),
    "engine-demo/zlab-dflash-anchor-first": ("misaligned", "served-with-plugin"),
    "engine-demo/zlab-dflash2": ("served", "served"),
    "engine-demo/zlab-dflash2-anchor-first": ("misaligned", "served-with-plugin"),
    "vllm-cpu-demo/zlab-dflash": ("served", "served"),
    "vllm-cpu-demo/zlab-dflash-anchor-first": ("misaligned", "served-with-plugin"),
}


def test_every_bundled_example_has_an_expectation() -> None:
    assert set(example_drafts()) == set(EXPECTED_OUTCOMES)


@pytest.mark.parametrize("name", sorted(EXPECTED_OUTCOMES))
def test_each_example_in_every_engine(name: str) -> None:
    engines, findings = views(example_drafts()[name])
    sglang, vllm = EXPECTED_OUTCOMES[name]
    expected = {"sglang": sglang, "vllm": vllm}
    assert [engines[spec]["outcome"] for spec in ALL] == [expected[ENGINE_RULES[spec].engine] for spec in ALL]
    for spec, view in engines.items():
        serves = view["outcome"] in ("served", "served-with-plugin")
        # A launch line exactly when the release serves the draft as trained; a refusal otherwise.
        assert (view["launch"] is not None) is serves, spec
        assert (view["refusal"] is None) is serves, spec
        assert view["matches_training"] is serves, spec
        errors = [f for f in findings if f.values.get("engine") == spec and f.severity.value == "error"]
        assert bool(errors) is not serves, (spec, errors)


def test_bonus_dflash_reads_in_each_engine() -> None:
    engines, _ = views("example:zlab-dflash", target="Qwen/Qwen3-8B")
    sglang = engines[SGLANG]
    assert sglang["block_size"] == 8 and sglang["block_size_source"] == "dflash_config"
    assert sglang["num_speculative_tokens"] == 7 and sglang["layout"] == "bonus"
    assert sglang["target_layer_ids"] == [1, 3] and sglang["target_layer_ids_source"] == "config"
    assert sglang["num_target_layers"] == 5 and sglang["mask_token_id"] == 500
    assert sglang["launch"] == [
        "python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
        "--speculative-algorithm", "DFLASH",
        "--speculative-draft-model-path", str(example_drafts()["zlab-dflash"]),
        "--speculative-num-draft-tokens", "8",
    ]  # fmt: skip
    for spec in (VLLM33, VLLM34):
        vllm = engines[spec]
        assert vllm["block_size_source"] == "launch" and vllm["num_speculative_tokens"] == 7
        assert vllm["launch"][:3] == ["vllm", "serve", "Qwen/Qwen3-8B"] and vllm["launch"][3] == "--speculative-config"
        config = json.loads(vllm["launch"][4])
        assert config == {
            "method": "dflash",
            "model": str(example_drafts()["zlab-dflash"]),
            "num_speculative_tokens": 7,
        }
        assert vllm["launch_environment"] == {}


def test_anchor_first_dflash_errors_for_sglang_and_passes_for_vllm_with_the_plugin() -> None:
    """The issue's acceptance case, in one `--engine all` view."""
    engines, findings = views(example_drafts()["engine-demo/zlab-dflash-anchor-first"])
    assert engines[SGLANG]["layout"] == "bonus" and engines[SGLANG]["matches_training"] is False
    (error,) = [f for f in findings if f.values.get("engine") == SGLANG]
    assert error.code == "DFT071" and error.severity.value == "error"
    assert "markov_rank > 0" in error.hint  # which SGLang path would be right, and why it is not
    for spec in (VLLM33, VLLM34):
        assert engines[spec]["layout"] == "anchor-first" and engines[spec]["plugin"] == "needed"
        assert codes_for(findings, spec) == ["DFT076"]
        assert engines[spec]["launch_environment"]["DFLASH_TOOLS_REQUIRE_PLUGIN"] == "1"
    # 0.33.0 still has the V1 runner, which drafts anchor-first DFlash in the wrong layout.
    assert engines[VLLM33]["launch_environment"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert "VLLM_USE_V2_MODEL_RUNNER" not in engines[VLLM34]["launch_environment"]


def test_the_sglang_layout_comes_from_its_table() -> None:
    """The DFLASH layout is the table's reading of `sample_from_anchor`, not a constant in the view:
    a release whose table reads the key (and serves the layout) serves the anchor-first draft."""
    report = inspect_loaded(load_checkpoint(str(example_drafts()["engine-demo/zlab-dflash-anchor-first"])))
    facts = DraftFacts.from_report(report)
    assert facts is not None
    stock = ENGINE_RULES[SGLANG]
    assert engine_view(stock, facts).layout is Layout.BONUS
    reads_it = dataclasses.replace(
        stock,
        keys=tuple(
            dataclasses.replace(key, locations=("dflash_config.sample_from_anchor",), when_missing=WhenMissing.DEFAULT)
            if key.key == "sample_from_anchor" and key.path == "DFLASH"
            else key
            for key in stock.keys
        ),
        layouts=tuple(
            dataclasses.replace(rule, outcome=Outcome.SERVED)
            if (rule.algorithm, rule.layout) == ("dflash", Layout.ANCHOR_FIRST)
            else rule
            for rule in stock.layouts
        ),
    )
    view = engine_view(reads_it, facts)
    assert (view.layout, view.outcome) == (Layout.ANCHOR_FIRST, Outcome.SERVED)


# --- edge cases ---------------------------------------------------------------------------


def test_missing_block_size_falls_back_to_16(tmp_path: Path) -> None:
    engines, findings = views(edge(tmp_path, "no-block-size"))
    sglang = engines[SGLANG]
    assert (sglang["block_size"], sglang["block_size_source"], sglang["num_speculative_tokens"]) == (16, "default", 15)
    (warning,) = [f for f in findings if f.code == "DFT072"]
    assert warning.severity.value == "warning" and "K = 15" in warning.message
    assert sglang["matches_training"] is False  # the trained block size is unknown (DFT010)


def test_top_level_and_nested_keys(tmp_path: Path) -> None:
    top, _ = views(edge(tmp_path, "top-level-keys"))
    assert top[SGLANG]["block_size_source"] == "top-level" and top[SGLANG]["target_layer_ids"] == [1, 3]
    assert top[SGLANG]["mask_token_id_source"] == "mask_token_id"
    assert top[VLLM34]["target_layer_ids"] == [1, 3] and top[VLLM34]["mask_token_id"] == 500
    # Both places: every engine takes dflash_config's first.
    masks, _ = views(edge(tmp_path, "mask-token-ids-disagree"))
    assert {masks[spec]["mask_token_id"] for spec in ALL} == {500}
    nested, _ = views(edge(tmp_path, "nested-keys-only"))
    assert nested[SGLANG]["block_size_source"] == "dflash_config"
    # Two block sizes: SGLang takes the nested one; inspect's own DFT010 says they disagree.
    both, findings = views(edge(tmp_path, "block-sizes-disagree"))
    assert both[SGLANG]["block_size"] == 8 and "DFT010" in [f.code for f in findings]


def test_missing_layer_ids_are_derived_from_the_target(tmp_path: Path) -> None:
    folder = edge(tmp_path, "no-layer-ids")
    engines, findings = views(folder)
    # Without --target, SGLang's fallback is the config's num_target_layers (5): layers 1..2.
    assert engines[SGLANG]["target_layer_ids"] == [1, 2]
    assert engines[SGLANG]["target_layer_ids_source"] == "derived"
    assert any(f.code == "DFT073" and f.values["engine"] == SGLANG for f in findings)
    # vLLM falls back to the target's own default layers: unknown without --target.
    assert engines[VLLM34]["target_layer_ids"] is None and "DFT075" in codes_for(findings, VLLM34)


def test_null_or_empty_layer_ids_as_each_engine_reads_them(tmp_path: Path) -> None:
    # A null is no list: SGLang derives (parse_dflash_draft_config: `if layer_ids is None`), vLLM
    # skips it (get_eagle3_aux_layers_from_config: `if not layer_ids:`), as for no-layer-ids.
    null, _ = views(edge(tmp_path, "null-layer-ids"))
    assert (null[SGLANG]["outcome"], null[SGLANG]["target_layer_ids_source"]) == ("served", "derived")
    assert null[SGLANG]["target_layer_ids"] == [1, 2]
    assert null[VLLM34]["outcome"] == "served" and null[VLLM34]["target_layer_ids"] is None
    # An empty list: vLLM goes on to the top-level ids; SGLang stops at it ("must be non-empty").
    empty, _ = views(edge(tmp_path, "empty-layer-ids-then-top-level"))
    assert (empty[VLLM33]["target_layer_ids"], empty[VLLM34]["target_layer_ids"]) == ([1, 3], [1, 3])
    assert empty[SGLANG]["outcome"] == "refused"


def test_derived_layer_ids_that_differ_from_training_are_an_error(tmp_path: Path) -> None:
    target = write_config(
        tmp_path / "target",
        {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 64,
         "vocab_size": 512, "num_attention_heads": 4, "intermediate_size": 128},
    )  # fmt: skip
    engines, findings = views("example:zlab-dflash", target=str(target), target_spec=load_target(str(target)))
    assert engines[SGLANG]["num_target_layers"] == 36 and engines[SGLANG]["num_target_layers_source"] == "target"
    # The config names [1, 3]: SGLang captures those (no derivation), so the pairing finding is inspect's own.
    assert engines[SGLANG]["target_layer_ids"] == [1, 3]
    derived, findings = views(edge(tmp_path, "no-layer-ids"), target_spec=load_target(str(target)))
    assert derived[SGLANG]["target_layer_ids"] == [1, 33]  # spread over 1..33 for 2 draft layers
    assert derived[VLLM34]["target_layer_ids"] == [1, 17, 32]  # the target's default capture layers
    assert derived[VLLM34]["outcome"] == "served"  # trained ids unknown: a warning, not a refusal


def test_layout_stated_where_an_engine_does_not_read_it(tmp_path: Path) -> None:
    engines, findings = views(edge(tmp_path, "anchor-first-top-level-only"))
    # vLLM reads dflash_config.sample_from_anchor only: the top-level true is never seen.
    for spec in (VLLM33, VLLM34):
        assert engines[spec]["outcome"] == "misaligned" and engines[spec]["layout"] == "bonus"
        assert "DFT071" in codes_for(findings, spec)
    assert engines[SGLANG]["outcome"] == "misaligned"
    # After convert, vLLM reads it; SGLang still cannot serve it.
    out = tmp_path / "converted"
    convert_checkpoint(str(tmp_path / "anchor-first-top-level-only"), out)
    after, _ = views(out)
    assert after[VLLM34]["outcome"] == "served-with-plugin" and after[SGLANG]["outcome"] == "misaligned"


def test_deepspec_layout(tmp_path: Path) -> None:
    engines, findings = views(edge(tmp_path, "deepspec"))
    (layout,) = [f for f in findings if f.code == "DFT011"]
    assert "DeepSpec" in layout.message and layout.values["source"] == "inferred"
    assert engines[SGLANG]["outcome"] == "refused" and "markov_rank" in engines[SGLANG]["refusal"]
    (refusal,) = [f for f in findings if f.values.get("engine") == SGLANG]
    assert refusal.code == "DFT074" and "no SGLang path" in refusal.hint
    for spec in (VLLM33, VLLM34):
        assert engines[spec]["outcome"] == "served" and engines[spec]["layout"] == "anchor-first"
        assert json.loads(engines[spec]["launch"][4])["method"] == "dspark"
        assert engines[spec]["num_speculative_tokens"] == 7 and engines[spec]["matches_training"] is True


def test_shift_label(tmp_path: Path) -> None:
    engines, findings = views(edge(tmp_path, "shift-label"))
    # dflash_config.shift_label declares the layout like sample_from_anchor (docs/rules.md): no DFT011.
    assert [f for f in findings if f.code == "DFT011"] == []
    # Outside a Domino draft SGLang does not read shift_label; vLLM never does.
    assert [engines[spec]["outcome"] for spec in ALL] == ["misaligned"] * len(ALL)
    domino, _ = views(edge(tmp_path, "domino-anchor-first"))
    assert domino[SGLANG]["outcome"] == "served" and domino[SGLANG]["layout"] == "anchor-first"
    # Domino drafts B - 1 tokens from positions 0..B-2: the verify window stays the block size.
    assert domino[SGLANG]["num_speculative_tokens"] == 7 and domino[SGLANG]["launch"][-1] == "8"
    assert domino[VLLM34]["outcome"] == "refused"  # no Domino projector in vLLM
    bonus, _ = views(edge(tmp_path, "domino-bonus"))
    assert bonus[SGLANG]["outcome"] == "served" and bonus[SGLANG]["layout"] == "bonus"


def test_shift_label_against_an_explicit_layout_is_a_conflict(tmp_path: Path) -> None:
    config = edge_configs()["shift-label"]
    config["dflash_config"]["sample_from_anchor"] = False
    _, findings = views(write_config(tmp_path / "both", config))
    assert any(f.code == "DFT010" and "dflash_config.shift_label" in f.keys for f in findings)


@pytest.mark.parametrize(
    ("name", "code", "spec"),
    [
        ("no-mask-token-id", "DFT075", SGLANG),  # looked up in the target's tokenizer
        ("no-mask-token-id", "DFT074", VLLM34),  # vLLM refuses without one
        ("negative-mask-token-id", "DFT074", SGLANG),
        ("conv-unpaired", "DFT074", SGLANG),
        ("selector-unpaired", "DFT074", SGLANG),
        ("output-multiplier-zero", "DFT074", SGLANG),
        ("layer-id-out-of-range", "DFT074", SGLANG),
        ("no-sliding-window", "DFT074", SGLANG),
        ("no-sliding-window", "DFT074", VLLM33),
        ("speculators-dspark-no-sfa", "DFT071", VLLM34),  # translated with false
    ],
)
def test_load_time_rules(tmp_path: Path, name: str, code: str, spec: str) -> None:
    _, findings = views(edge(tmp_path, name))
    assert code in codes_for(findings, spec), [f.message for f in findings]


def test_speculators_format_points_to_convert_to_zlab() -> None:
    engines, findings = views("example:speculators-dflash")
    assert engines[SGLANG]["reads_format"] is False and engines[SGLANG]["launch"] is None
    (finding,) = [f for f in findings if f.values.get("engine") == SGLANG]
    # SGLang stops at config load (no top-level model_type), before its dialect step: DFT078,
    # with the conversion that it reads as the fix.
    assert finding.code == "DFT078" and "--to zlab`" in finding.hint
    assert engines[SGLANG]["stopped_at"] == "config"
    assert engines[VLLM34]["reads_format"] is True and engines[VLLM34]["target_layer_ids"] == [1, 3]


# --- every convert output ---------------------------------------------------------------


CONVERSIONS = [
    ("zlab-dflash", {}),
    ("zlab-dflash", {"to": "speculators"}),
    ("zlab-dflash2", {"to": "speculators"}),
    ("zlab-dflash2-anchor-first", {}),
    ("speculators-dflash", {"to": "zlab"}),
    ("speculators-dflash2", {"to": "zlab"}),
    ("speculators-dflash-legacy", {}),
    ("speculators-dspark", {}),
    ("dspark-native", {}),
    ("speculators-dflash", {"for_engines": [SGLANG]}),
]


@pytest.mark.parametrize(("name", "options"), CONVERSIONS, ids=[f"{n}-{o}" for n, o in CONVERSIONS])
def test_convert_outputs_serve_as_trained(tmp_path: Path, name: str, options: dict[str, Any]) -> None:
    out = tmp_path / "out"
    convert_checkpoint(f"example:{name}", out, **options)
    engines, _ = views(out)
    for spec, view in engines.items():
        if view["reads_format"] and view["outcome"] != "misaligned":
            assert view["matches_training"] is True, spec
    # The written config states the layout where every engine that reads the format looks.
    assert engines[VLLM34]["outcome"] in ("served", "served-with-plugin")


def test_convert_for_sglang_writes_zlab_and_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    result = convert_checkpoint("example:speculators-dflash2", tmp_path / "ok", for_engines=[SGLANG])
    assert result.plan.output_dialect.value == "zlab-dflash2"
    assert result.plan.engines[KEY[SGLANG]]["outcome"] == "served"
    from dflash_tools.errors import OperationError

    with pytest.raises(OperationError, match="bonus layout"):
        convert_checkpoint("example:zlab-dflash2-anchor-first", tmp_path / "no", for_engines=[SGLANG])
    with pytest.raises(OperationError, match="markov_rank"):
        convert_checkpoint(str(edge(tmp_path, "deepspec")), tmp_path / "no2", dry_run=True, for_engines=[SGLANG])
    assert not (tmp_path / "no").exists()
    # The same DeepSpec draft, for vLLM: written with sample_from_anchor explicit.
    plan = convert_checkpoint(str(tmp_path / "deepspec"), dry_run=True, for_engines=[VLLM34]).plan
    assert plan.config["sample_from_anchor"] is True and plan.engines[KEY[VLLM34]]["matches_training"] is True


# --- the option, the tables, the output ---------------------------------------------------


def test_engine_option_values_combine() -> None:
    assert resolve_engine_specs(["all"]) == (ALL, False)
    assert resolve_engine_specs(["sglang", "vllm==0.34.0,sglang"]) == ([SGLANG, VLLM34], False)
    assert resolve_engine_specs(["vllm==0.33.0+cpu", "vllm"]) == ([VLLM33], True)
    with pytest.raises(ValueError, match=r"vllm==999\.0\.0"):  # a release no table can ever be
        resolve_engine_specs(["vllm==999.0.0"])
    with pytest.raises(ValueError, match="trtllm"):
        resolve_engine_specs(["trtllm"])


def test_every_check_a_table_names_is_implemented() -> None:
    named = {check.name for rules in ENGINE_RULES.values() for check in rules.checks}
    assert named == set(CHECKERS)


def test_json_engines_object() -> None:
    result = CliRunner().invoke(app, ["inspect", "example:zlab-dflash", "--engine", "all", "--json"])
    assert result.exit_code == 0, result.output
    engines = json.loads(result.stdout)["engines"]
    assert list(engines) == [KEY[spec] for spec in ALL]  # engines.sglang while it has one table
    fields = {
        "engine", "version", "reads_format", "refusal", "layout", "block_size", "block_size_source",
        "num_speculative_tokens", "num_query_tokens", "target_layer_ids", "target_layer_ids_source", "num_target_layers", "mask_token_id",
        "matches_training", "launch",
    }  # fmt: skip
    for key, view in engines.items():
        assert fields <= set(view), key
        assert key in (view["engine"], f"{view['engine']}=={view['version']}")


def test_human_view_fits_80_columns() -> None:
    result = CliRunner().invoke(
        app, ["inspect", str(example_drafts()["engine-demo/zlab-dflash-anchor-first"]), "--engine", "all"],
        env={"COLUMNS": "80"},
    )  # fmt: skip
    assert result.exit_code == 1  # SGLang's error
    lines = result.stdout.splitlines()
    section = lines[lines.index("engines") + 1 : lines.index("findings")]
    assert all(len(line) <= 80 for line in section)
    # One table with a column per release while it fits, else a block per release.
    blocks = [line.split()[0] for line in section if not line.startswith(" ")]
    assert section[0].split() == ALL or blocks == ALL
    launches = lines[lines.index("launch (copy a command line and run it):") + 1 :]
    assert launches[0].startswith(f"# {SGLANG}: no launch line: misaligned")
    # Each launch line whole on one line, however long: copyable as it is.
    assert any(
        line.startswith("DFLASH_TOOLS_REQUIRE_PLUGIN=1 vllm serve TARGET --speculative-config ") for line in launches
    )
    assert not any(line.startswith("# ") and "vllm serve" in line for line in launches)


def test_an_error_finding_comments_out_the_launch_lines_it_blocks(tmp_path: Path) -> None:
    """An error that names no engine (a mask id outside the vocabulary) comments out every launch
    line; the engine error above (SGLang's misaligned layout) keeps vLLM's lines pasteable."""
    import shutil

    draft = tmp_path / "draft"
    shutil.copytree(example_drafts()["zlab-dflash2"], draft)
    config = json.loads((draft / "config.json").read_text())
    config["dflash_config"]["mask_token_id"] = config["vocab_size"] + 5
    (draft / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["inspect", str(draft), "--engine", "all"], env={"COLUMNS": "200"})
    lines = result.stdout.splitlines()
    heading = next(i for i, line in enumerate(lines) if line.startswith("launch"))
    assert lines[heading] == "launch (not to run until DFT032 above is fixed; lines kept as comments):"
    launches = [line for line in lines[heading + 1 :] if "vllm serve" in line or "launch_server" in line]
    assert len(launches) == len(ALL) and all(line.startswith("# ") for line in launches)


def test_outcome_ranks_cover_every_outcome() -> None:
    from dflash_tools.serving.engine_model import RANK

    assert set(RANK) == set(Outcome)


def test_the_installed_vllm_gets_its_column_with_the_plugins_real_state(tmp_path: Path) -> None:
    """`--engine vllm`: the installed release's table, with what its files say about the plugin
    (source trees as in test_vllm_view: native = the upstream change, else no working plugin)."""
    from tests.serving.test_vllm_view import capability, vllm_tree

    anchor_first = load_checkpoint(str(example_drafts()["engine-demo/zlab-dflash-anchor-first"]))
    native = capability(vllm_tree(tmp_path / "native", native=True), version="0.34.0")
    report = inspect_for_engines(anchor_first, [VLLM34], installed_vllm=native)
    (view,) = report.extra["engines"].values()
    assert view["installed"] is True and view["plugin"] == "native" and view["outcome"] == "served"
    assert "DFLASH_TOOLS_REQUIRE_PLUGIN" not in view["launch_environment"]

    without = capability(vllm_tree(tmp_path / "stock"), version="0.34.0")
    report = inspect_for_engines(anchor_first, [], installed_vllm=without)
    view = report.extra["engines"][KEY[VLLM34]]
    assert view["installed"] is True and view["outcome"] == "refused" and view["launch"] is None
    # One finding says it: the installed-vLLM check's DFT041, not a second one from the column.
    assert [f.code for f in report.findings if f.severity.value == "error"] == ["DFT041"]
