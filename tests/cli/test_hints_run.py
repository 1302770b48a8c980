"""Every command a hint suggests succeeds when pasted.

Hints are collected from real runs (inspect on every bundled draft, as `example:NAME`, as a copied
folder, as its `model.safetensors` and as its lone `config.json`; and the error paths a newcomer
hits first); each `dflash-tools …` command quoted in them is split as a shell would split it and
run in the same folder. A template with a value the user must choose (`--block-size N`) is run
with that value filled in from the report.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.cli._layout import hint_commands
from dflash_tools.cli.examples_run import all_examples
from dflash_tools.reading.local import examples_dir, list_examples

runner = CliRunner()


def run_process(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """A fresh interpreter: huggingface_hub reads HF_HUB_OFFLINE and HF_ENDPOINT at import."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "DFLASH_TOOLS_"))}
    result = subprocess.run(
        [sys.executable, "-m", "dflash_tools", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**full_env, "HF_HOME": str(cwd / "hf-home"), **env},
        timeout=120,
    )
    return result.returncode, result.stderr


def run(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, args, env={"HF_HUB_OFFLINE": "1", **(env or {})})
    return result.exit_code, result.stdout, result.stderr


def inspect_hints(source: str) -> list[str]:
    code, out, err = run(["inspect", source, "--json"])
    assert code in (0, 1), err
    return [f["hint"] for f in json.loads(out)["findings"] if f["hint"]]


def fill_placeholders(command: str, source: str) -> str:
    """`--block-size N`: the trained block size, read from the source's JSON report."""
    if re.search(r"\bN\b", command):
        code, out, _ = run(["inspect", source, "--json"])
        block_size = (json.loads(out).get("geometry") or {}).get("block_size") or 8
        command = re.sub(r"\bN\b", str(block_size), command)
    return command


def paste(command: str) -> tuple[int, str]:
    argv = shlex.split(command)
    assert argv[0] == "dflash-tools", command
    code, out, err = run(argv[1:])
    return code, out + err


def forms(name: str, folder: Path) -> list[str]:
    """The ways a newcomer names the same draft."""
    copy = folder / name
    shutil.copytree(examples_dir() / name, copy)
    found = [f"example:{name}", f"./{name}", f"./{name}/config.json"]
    found += [f"./{name}/{p.name}" for p in sorted(copy.glob("*.safetensors"))[:1]]
    return found


@pytest.mark.parametrize("name", list_examples())
def test_inspect_fix_commands_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    commands = []
    for source in forms(name, tmp_path):
        for hint in inspect_hints(source):
            commands += [(source, command) for command in hint_commands(hint)]
    for source, command in commands:
        filled = fill_placeholders(command, source)
        # Every suggested output folder is new; a second fix for the same source writes elsewhere.
        out = re.search(r"-o (\S+)", filled)
        if out and Path(out.group(1)).exists():
            shutil.rmtree(out.group(1))
        code, text = paste(filled)
        assert code == 0, f"hint for {source} suggests `{command}`, which exits {code}:\n{text}"


def test_the_examples_with_fixes_are_covered() -> None:
    """The parametrized test above runs fix commands, not nothing: at least these carry one."""
    with_fixes = {name for name in list_examples() if any(hint_commands(h) for h in inspect_hints(f"example:{name}"))}
    assert {"speculators-dflash-legacy"} <= with_fixes
    # dspark-native's layout is only its dialect's default: no fix line writes it (issue 32).
    assert "dspark-native" not in with_fixes


def test_every_bundled_example_is_listed_and_inspectable() -> None:
    code, out, _ = run(["examples", "--json"])
    assert code == 0
    listed = {e["source"] for e in json.loads(out)["examples"]}
    assert {"example:tiny-target", "example:engine-demo/target", "example:engine-demo/zlab-dflash2"} <= listed
    assert {f"example:{name}" for name in list_examples()} <= listed
    for source in listed:  # every listed name resolves (targets give findings, not errors)
        code, _, err = run(["inspect", source, "--json"])
        assert code in (0, 1), f"{source}: {err}"
    assert len(listed) == len(all_examples())


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "./nope"],
        ["convert", "./nope", "-o", "x"],
        ["inspect", "example:nope"],
    ],
)
def test_error_hints_name_commands_that_run(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(args)
    assert code == 2
    commands = re.findall(r"`(dflash-tools [^`]+)`", err)
    assert commands, err
    for command in commands:
        pasted, text = paste(command)
        assert pasted == 0, f"`{command}` exits {pasted}: {text}"


def test_convert_error_does_not_offer_single_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _, _, err = run(["convert", "./nope", "-o", "x"])
    assert ".safetensors" not in err and "checkpoint folder" in err


def test_options_named_in_hints_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A network hint names the timeout option of the command that printed it: `--timeout`, the
    Hub request timeout in every command (smoke-test's engine wall clock is `--run-timeout`)."""
    monkeypatch.chdir(tmp_path)
    # An endpoint that refuses connections at once: the Hub cannot be reached.
    env = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}
    for args, option in (
        (["inspect", "nobody/no-draft"], "--timeout"),
        # A run, not a dry run: a dry run plans without a target the Hub cannot be asked about
        # (DFT090, docs/plan.md), a run needs it and stops with the network hint.
        (["smoke-test", "--runtime", "torch", "-t", "nobody/no-target", "-d", "example:zlab-dflash2"], "--timeout"),
    ):
        code, stderr = run_process(args, env, tmp_path)
        assert code == 2, stderr
        named = set(re.findall(r"--[a-z-]+", stderr.split("hint:", 1)[-1]))
        assert option in named, stderr
        code, help_text, _ = run([args[0], "--help"])
        for flag in named:
            assert flag in help_text, f"{args[0]} hint names {flag}, which {args[0]} does not have"


def test_a_typo_of_a_local_folder_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints" / "my-draft-v2").mkdir(parents=True)
    for env in ({"HF_HUB_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}):
        code, stderr = run_process(["inspect", "checkpoints/my-draft"], env, tmp_path)
        assert code == 2
        # Offline or unreachable, the Hub was not asked: the message says so rather than "no such repo".
        assert (
            "no local folder checkpoints/my-draft, and the Hub could not be asked about a repo of that name" in stderr
        )
        assert "checkpoints/my-draft-v2" in stderr  # the close local name
        assert "hf download" not in stderr


@pytest.mark.parametrize("name", ["speculators-dflash-legacy"])
def test_the_printed_fix_lines_run_one_after_another(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user does: copy each printed fix line in turn, in one folder, nothing cleaned between.
    Converts of one source into one folder are one line, so none stops at "OUT exists", and the
    result no longer carries the codes the fixes were for."""
    monkeypatch.chdir(tmp_path)
    source = f"example:{name}"
    code, out, _ = run(["inspect", source])
    assert code in (0, 1)
    lines = [line for line in out.splitlines() if line.startswith("dflash-tools ")]
    comments = [line for line in out.splitlines() if line.startswith("# fix ")]
    assert lines and len(lines) == len(comments)
    fixed_codes = set(re.findall(r"DFT\d{3}", " ".join(comments)))
    for line in lines:
        code, text = paste(fill_placeholders(line, source))
        assert code == 0, f"`{line}` exits {code}:\n{text}"
    outputs = {re.search(r"-o (\S+)", line).group(1) for line in lines}  # type: ignore[union-attr]
    for folder in outputs:
        code, out, _ = run(["inspect", folder, "--json"])
        assert code == 0
        assert not fixed_codes & {f["code"] for f in json.loads(out)["findings"]}


def test_converts_into_one_folder_merge_and_conflicting_ones_do_not() -> None:
    from dflash_tools.cli._layout import merge_convert_commands

    base = "dflash-tools convert ./d -o ./out"
    assert merge_convert_commands(base, base + " --no-sample-from-anchor") == base + " --no-sample-from-anchor"
    assert merge_convert_commands(base + " --sample-from-anchor", base + " --no-sample-from-anchor") is None
    assert merge_convert_commands(base, "dflash-tools convert ./d -o ./elsewhere --sample-from-anchor") is None
    assert merge_convert_commands(base, base + " --block-size N") is None


@pytest.mark.parametrize("name", list_examples())
def test_engine_view_fix_commands_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`inspect --engine all`: what its findings suggest (`convert --to zlab` for SGLang, ...) runs."""
    monkeypatch.chdir(tmp_path)
    source = f"example:{name}"
    code, out, err = run(["inspect", source, "--engine", "all", "--json"])
    assert code in (0, 1), err
    engine_hints = [f["hint"] for f in json.loads(out)["findings"] if f.get("values", {}).get("engine")]
    for command in {command for hint in engine_hints for command in hint_commands(hint)}:
        filled = fill_placeholders(command, source)
        out_folder = re.search(r"-o (\S+)", filled)
        if out_folder and Path(out_folder.group(1)).exists():
            shutil.rmtree(out_folder.group(1))
        code, text = paste(filled)
        assert code == 0, f"--engine hint for {source} suggests `{command}`, which exits {code}:\n{text}"
