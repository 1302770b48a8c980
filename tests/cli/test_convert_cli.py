"""`dflash-tools convert` as a user runs it: every command line of the issue, exit codes, JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

import dflash_tools_testing as testing
from dflash_tools.cli import app
from dflash_tools.inspect import inspect_checkpoint
from tests.conftest import CheckpointFactory

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def codes(folder: Path) -> set[str]:
    return {f.code for f in inspect_checkpoint(str(folder)).findings}


def test_anchor_first_declared_explicitly(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint(
        "zlab-dflash2", replace(testing.TINY_DFLASH2, block_size=7, sample_from_anchor=None), name="anchor-draft"
    )
    code, out, err = invoke("convert", str(source), "-o", str(tmp_path / "out"), "--sample-from-anchor")
    assert code == 0, err
    assert "anchor-first" in out and "wrote" in out
    # Before / after geometry side by side.
    assert "bonus-anchor" in out and "7 (explicit)" in out
    assert not codes(tmp_path / "out") & {"DFT010", "DFT011", "DFT012"}


def test_cross_dialect_to_zlab(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("speculators-dflash", name="speculators-draft")
    code, out, err = invoke("convert", str(source), "-o", str(tmp_path / "zlab"), "--to", "zlab")
    assert code == 0, err
    assert "speculators-dflash → zlab-dflash (cross-dialect)" in out
    assert "layer ids shifted by -1" in out


def test_in_place_with_backup(make_checkpoint: CheckpointFactory) -> None:
    source = make_checkpoint("zlab-dflash", replace(testing.TINY, sample_from_anchor=None), name="draft")
    code, out, err = invoke("convert", str(source), "--in-place")
    assert code == 0, err
    assert (source / "config.json.bak").exists() and "config.json.bak" in out
    code, out, _ = invoke("convert", str(source), "--in-place")
    assert code == 0 and "already normalized" in out


def test_dry_run_prints_plan_and_diff(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash", replace(testing.TINY, sample_from_anchor=None), name="draft")
    code, out, _ = invoke("convert", str(source), "-o", str(tmp_path / "out"), "--dry-run")
    assert code == 0
    assert "--- a/config.json" in out and '+  "sample_from_anchor": false' in out
    assert "dry run: nothing written" in out and not (tmp_path / "out").exists()


def test_check_is_a_ci_gate(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash", replace(testing.TINY, sample_from_anchor=None), name="draft")
    code, out, _ = invoke("convert", str(source), "--check")
    assert code == 1 and "would change" in out
    assert invoke("convert", str(source), "-o", str(tmp_path / "fixed"))[0] == 0
    code, out, _ = invoke("convert", str(tmp_path / "fixed"), "--check")
    assert code == 0 and "already normalized" in out
    # A lone config.json can be checked too (CI on a config-only change).
    assert invoke("convert", str(source / "config.json"), "--check")[0] == 1
    assert invoke("convert", str(tmp_path / "fixed" / "config.json"), "--check")[0] == 0
    code, out, _ = invoke("convert", str(tmp_path / "fixed"), "--check", "--format", "json")
    document = json.loads(out)
    assert code == 0 and document["mode"] == "check" and document["changed"] is False


def test_json_document(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("speculators-dflash", replace(testing.TINY, with_embed_tokens=True))
    code, out, err = invoke("convert", str(source), "-o", str(tmp_path / "z"), "--to", "zlab", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["schema_version"] == 1 and document["command"] == "convert" and document["ok"]
    assert document["dialect"] == {"before": "speculators-dflash", "after": "zlab-dflash"}
    assert document["geometry"]["after"]["block_size"] == 8
    assert document["verification"]["ok"] and document["verification"]["new_errors"] == []
    assert document["tensors"]["changes"][0]["name"] == "embed_tokens.weight"
    assert {f["path"]: f["action"] for f in document["files"]}["model.safetensors"] == "repack"
    assert document["written"] and document["output"] == str(tmp_path / "z")


def test_refusals_exit_1_with_the_settling_flag(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    config = testing.make_config("zlab-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=True))
    config["sample_from_anchor"] = False
    source = make_checkpoint("zlab-dflash2", config=config)
    code, out, err = invoke("convert", str(source), "-o", str(tmp_path / "out"))
    assert code == 1 and out == ""
    assert "sample_from_anchor disagrees" in err and "--no-sample-from-anchor" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()
    code, out, err = invoke("convert", str(source), "-o", str(tmp_path / "out"), "--json")
    document = json.loads(out)
    assert code == 1 and document["ok"] is False and document["error"]["exit_code"] == 1


def test_usage_mistakes_exit_2(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "x").write_text("x")
    for args in (
        ("--in-place", "-o", str(tmp_path / "o")),
        (),
        ("-o", str(occupied)),
        ("--to", "open-spec", "-o", str(tmp_path / "o")),
        ("--no-backup", "-o", str(tmp_path / "o")),
        ("--block-size", "0", "-o", str(tmp_path / "o")),
    ):
        code, _, err = invoke("convert", str(source), *args)
        assert code == 2, (args, err)
    code, _, err = invoke("convert", str(tmp_path / "missing"), "-o", str(tmp_path / "o"))
    assert code == 2 and "no such file" in err


def test_help_documents_exit_codes() -> None:
    code, out, _ = invoke("convert", "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert "Exit codes: 0" in flat and "2 usage error" in flat and "--in-place" in flat and "--push-to-hub" in flat


def test_convert_does_not_import_torch(make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    import subprocess
    import sys

    source = make_checkpoint("speculators-dflash", replace(testing.TINY, with_embed_tokens=True))
    code = (
        "import sys; from dflash_tools.cli import main; sys.argv = ['dflash-tools', 'convert', "
        f"{str(source)!r}, '-o', {str(tmp_path / 'z')!r}, '--to', 'zlab', '-q'];\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"


def test_an_unwritable_output_is_reported_with_the_users_path(tmp_path: Path) -> None:
    """A folder that cannot be made names -o's own path, never the hidden lock file convert makes
    beside it (`.out.dflash-tools-lock`); a file in the way is named too."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    wanted = blocker / "out"
    result = CliRunner().invoke(app, ["convert", "example:zlab-dflash", "-o", str(wanted), "--json"])
    assert result.exit_code == 1
    message = json.loads(result.stdout)["error"]["message"]
    assert message.startswith(f"{wanted}: -o cannot be written there") and str(blocker) in message
    assert "dflash-tools-lock" not in message
