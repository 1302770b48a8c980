"""`dflash-tools inspect` as a user runs it: output modes, exit codes, terminal safety, startup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dflash_tools_testing as testing
from dflash_tools.cli import app
from dflash_tools.inspect import inspect_checkpoint
from tests.conftest import CheckpointFactory

runner = CliRunner()


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_human_report_on_bundled_example() -> None:
    code, out, err = invoke("inspect", "example:zlab-dflash2")
    assert code == 0, err
    assert "zlab-dflash2" in out and "bonus-anchor" in out and "8 query positions" in out
    assert "OK" in out
    assert "\x1b[" not in out  # NO_COLOR and not a TTY


def test_json_document_shape() -> None:
    code, out, _ = invoke("inspect", "example:zlab-dflash2-anchor-first", "--format", "json", "-k", "7")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema_version"] == 2 and doc["command"] == "inspect" and doc["exit_code"] == 0
    assert (doc["dialect"], doc["algorithm"]) == ("zlab-dflash2", "dflash2")
    geometry = doc["geometry"]
    assert {
        k: geometry[k]
        for k in (
            "block_size",
            "sample_from_anchor",
            "sample_from_anchor_source",
            "max_speculative_tokens",
            "num_speculative_tokens",
            "num_query_tokens",
        )
    } == {
        "block_size": 7,
        "sample_from_anchor": True,
        "sample_from_anchor_source": "explicit",
        "max_speculative_tokens": 7,
        "num_speculative_tokens": 7,
        "num_query_tokens": 7,
    }
    assert set(doc["model"]) >= {"hidden_size", "num_hidden_layers", "vocab_size", "target_layer_ids"}
    assert set(doc["tensors"]) >= {"count", "parameters", "bytes", "dtypes"}
    assert doc["findings"] == [] and doc["ok"] is True


def test_target_layer_ids_always_in_zlab_convention() -> None:
    for example in ("zlab-dflash", "speculators-dflash", "open-spec"):
        _, out, _ = invoke("inspect", f"example:{example}", "--json")
        assert json.loads(out)["model"]["target_layer_ids"] == [1, 3], example


def test_error_findings_exit_1_with_json_document(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("speculators-dflash")
    config = json.loads((folder / "config.json").read_text())
    config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 5  # block_size 8: fits no layout
    (folder / "config.json").write_text(json.dumps(config))
    code, out, _ = invoke("inspect", str(folder), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["ok"] is False
    finding = next(f for f in doc["findings"] if f["code"] == "DFT012")
    assert finding["severity"] == "error" and "run `dflash-tools convert" in finding["hint"].lower()
    assert "speculators_config.proposal_methods[0].speculative_tokens" in finding["keys"]


def test_an_older_speculators_save_is_read_by_its_evidence() -> None:
    """Proposal count == block_size reads two ways (an old speculators save, or anchor-first); the
    save declares no layout, so it predates the flag and was trained bonus-anchor (issue 32): the
    count is wrong only by that inference, a warning whose fix writes no layout flag."""
    code, out, _ = invoke("inspect", "example:speculators-dflash-legacy", "--json")
    assert code == 0
    doc = json.loads(out)
    assert {f["code"]: f["severity"] for f in doc["findings"]} == {
        "DFT011": "info",
        "DFT012": "warning",
        "DFT055": "info",  # its sliding layers
    }
    finding = next(f for f in doc["findings"] if f["code"] == "DFT012")
    assert "before April 2026" in finding["message"] and "sample-from-anchor" not in finding["hint"]
    assert len(finding["values"]["readings"]) == 2
    assert doc["geometry"]["layout_decided_by"] == "trainer-record"


def test_fail_on_warning() -> None:
    assert invoke("inspect", "example:dspark-native")[0] == 0
    assert invoke("inspect", "example:dspark-native", "--fail-on", "warning")[0] == 1


def test_serving_k_check() -> None:
    code, out, _ = invoke("inspect", "example:zlab-dflash2", "-k", "5", "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["geometry"]["num_speculative_tokens"] == 5
    assert [f["code"] for f in doc["findings"]] == ["DFT013"]


def test_target_option(tmp_path: Path) -> None:
    target = Path(__file__).parents[2] / "dflash_tools" / "examples" / "tiny-target"
    code, out, _ = invoke("inspect", "example:zlab-dflash", "--target", str(target), "--json")
    assert code == 0 and json.loads(out)["target"]["num_hidden_layers"] == 5


def test_unreadable_source_exits_2_with_one_line(tmp_path: Path) -> None:
    code, out, err = invoke("inspect", str(tmp_path / "missing"))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith("error:") and str(tmp_path / "missing") in lines[0]
    assert lines[1].startswith("hint:")
    assert "Traceback" not in err


def test_broken_checkpoint_exits_1_not_2(make_checkpoint: CheckpointFactory) -> None:
    folder = make_checkpoint("zlab-dflash")
    (folder / "config.json").write_text("{oops")
    code, out, _ = invoke("inspect", str(folder), "--json")
    assert code == 1 and json.loads(out)["findings"][0]["code"] == "DFT001"


def test_usage_errors_exit_2() -> None:
    assert invoke("inspect", "example:zlab-dflash2", "-k", "0")[0] == 2
    assert invoke("inspect", "example:zlab-dflash2", "--format", "xml")[0] == 2
    code, _, err = invoke("inspect")
    assert code == 2 and "Usage: dflash-tools inspect" in err  # no arguments: help on stderr, exit 2


def test_tensor_table() -> None:
    code, out, _ = invoke("inspect", "example:zlab-dflash2", "--tensors")
    assert code == 0 and "candidate_selector.successor_codebook" in out
    _, out, _ = invoke("inspect", "example:zlab-dflash2", "--tensors", "--json")
    table = json.loads(out)["tensor_table"]
    names = [row["name"] for row in table]
    assert len(names) == 36
    assert names.index("layers.0.mlp.up_proj.weight") < names.index("layers.1.input_layernorm.weight")


def test_several_sources_table_and_array(make_checkpoint: CheckpointFactory) -> None:
    broken = make_checkpoint("zlab-dflash")
    (broken / "config.json").write_text("[]")
    sources = ["example:zlab-dflash2", "example:speculators-dflash-legacy", str(broken)]
    code, out, _ = invoke("inspect", *sources)
    assert code == 1
    assert "3 source(s), 1 with errors" in out
    code, out, _ = invoke("inspect", *sources, "example:missing", "--json")
    assert code == 2
    docs = json.loads(out)
    assert [d["ok"] for d in docs] == [True, True, False, False]
    # The reports' version, then the error document's (docs/json.md); every one names its command.
    assert [d["schema_version"] for d in docs] == [2, 2, 2, 1]
    assert [(d["command"], d["exit_code"]) for d in docs] == [
        ("inspect", 0),
        ("inspect", 0),
        ("inspect", 1),
        ("inspect", 2),
    ]
    assert "error" in docs[3]


HOSTILE = [
    "layers.0.\x1b]52;c;cHduZWQ=\x07evil",
    "[bold red]fake[/bold red]",
    "\x1b[2J\x1b[Hclear",
    "right\u202eleft",
]


def test_hostile_tensor_names_are_inert(make_checkpoint: CheckpointFactory) -> None:
    table = [*testing.tensor_table(testing.TINY), *[(name, "BF16", (2,)) for name in HOSTILE]]
    folder = make_checkpoint("zlab-dflash", tensors=table)
    code, out, _ = invoke("inspect", str(folder), "--tensors")
    assert code == 0
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert "\\x1b]52" in out and "[bold red]fake[/bold red]" in out
    _, out, _ = invoke("inspect", str(folder), "--tensors", "--json")
    names = {row["name"] for row in json.loads(out)["tensor_table"]}
    assert set(HOSTILE) <= names  # exact in JSON


def test_json_env_default(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = invoke("inspect", "example:open-spec", env={"DFLASH_TOOLS_FORMAT": "json"})
    assert code == 0 and json.loads(out)["dialect"] == "open-spec"


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dflash_tools", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )


def test_debug_env_shows_traceback(tmp_path: Path) -> None:
    plain = _run("inspect", str(tmp_path / "x"))
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    debug = _run("inspect", str(tmp_path / "x"), DFLASH_TOOLS_DEBUG="1")
    assert "Traceback" in debug.stderr and "SourceError" in debug.stderr


def test_help_and_inspect_do_not_import_heavy_modules() -> None:
    code = (
        "import sys\n"
        "from dflash_tools.cli import app\n"
        "from typer.testing import CliRunner\n"
        "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0\n"
        "r = CliRunner().invoke(app, ['inspect', 'example:zlab-dflash2', '--json']); assert r.exit_code == 0, r.output\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'vllm', 'numpy', 'huggingface_hub') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == ""


def test_version() -> None:
    code, out, _ = invoke("--version")
    assert code == 0 and out.startswith("dflash-tools ")


def test_anchor_first_and_bonus_anchor_side_by_side(make_checkpoint: CheckpointFactory) -> None:
    anchor = make_checkpoint(
        "speculators-dflash2", replace(testing.TINY_DFLASH2, block_size=7, sample_from_anchor=True)
    )
    bonus = make_checkpoint("zlab-dflash2")
    code, out, _ = invoke("inspect", str(anchor), str(bonus), "-k", "7")
    assert code == 0
    assert "anchor-first (explicit)" in out and "bonus-anchor (explicit)" in out


def test_a_json_file_given_alone_is_called_by_its_name(tmp_path: Path) -> None:
    """`inspect some.json`: DFT002 and DFT001 name that file, not "config.json"."""
    unknown = tmp_path / "preset.json"
    unknown.write_text('{"a": 1}', encoding="utf-8")
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    [dft002] = [f for f in inspect_checkpoint(str(unknown)).findings if f.code == "DFT002"]
    assert dft002.message.startswith("preset.json matches no known draft dialect")
    [dft001] = [f for f in inspect_checkpoint(str(broken)).findings if f.code == "DFT001"]
    assert dft001.message.startswith("broken.json is not valid JSON") and "broken.json" in dft001.hint
    assert "config.json" not in dft001.hint + dft002.message


def test_an_unreadable_source_in_the_summary_points_at_no_codes() -> None:
    """The summary's codes column of an unreadable source said "see below", with no codes below."""
    result = CliRunner().invoke(app, ["inspect", "example:zlab-dflash2", "./nope"], env={"COLUMNS": "120"})
    assert result.exit_code == 2
    assert "see below" not in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith("./nope"))
    assert row.split()[-2:] == ["UNREADABLE", "-"]
