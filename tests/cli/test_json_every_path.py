"""`--json` gives exactly one JSON document on stdout on every path, failures included.

Each case runs the installed entry point (`python -m dflash_tools`, the same `main()` as the
`dflash-tools` script) in a fresh process, as `… --json | jq` would: stdout must parse as one
document, carry `schema_version`, and agree with the exit code. Offline (HF_HUB_OFFLINE=1), so a
repo id that is not cached fails without the network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FAILURES = [
    # inspect
    (["inspect", "./nope"], 2, "source"),
    (["inspect", "nobody/no-draft"], 2, "source"),
    (["inspect", "example:nope"], 2, "source"),
    (["inspect", "--bogus-option", "example:zlab-dflash2"], 2, "usage"),
    (["inspect", "-k", "0", "example:zlab-dflash2"], 2, "usage"),
    (["inspect", "--fail-on", "nonsense", "example:zlab-dflash2"], 2, "usage"),
    (["inspect", "--author", "someone", "--limit", "0"], 2, "usage"),
    (["inspect", "example:zlab-dflash2", "--target", "./no-target"], 2, "source"),
    (["inspect", "example:zlab-dflash2", "--target", "nobody/no-target"], 2, "source"),
    # convert
    (["convert", "./nope", "-o", "out"], 2, "source"),
    (["convert", "example:zlab-dflash2"], 2, "usage"),
    (["convert", "example:zlab-dflash2", "-o", "out", "--in-place"], 2, "usage"),
    (["convert", "example:zlab-dflash2", "-o", "out", "--to", "klingon"], 2, "usage"),
    (["convert", "example:zlab-dflash2", "-o", "occupied"], 2, "usage"),
    (["convert", "example:zlab-dflash2", "--in-place"], 2, "usage"),
    (["convert", "--bogus-option", "x"], 2, "usage"),
    (["convert", "-o", "out"], 2, "usage"),
    # smoke-test
    (["smoke-test", "-d", "example:zlab-dflash2"], 2, "usage"),
    (["smoke-test", "-t", "./no-target", "-d", "example:zlab-dflash2", "--dry-run"], 2, "source"),
    # Offline a dry run plans without a Hub target it cannot read (DFT090); a run needs it.
    (["smoke-test", "--runtime", "torch", "-t", "nobody/no-target", "-d", "example:zlab-dflash2"], 2, "source"),
    (["smoke-test", "--runtime", "warp-drive", "-t", "example:tiny-target", "-d", "example:zlab-dflash2"], 2, "usage"),
    (["smoke-test", "--preset", "no-such-preset"], 2, None),
    (["smoke-test", "--server", "http://127.0.0.1:9", "-d", "a", "-d", "b"], 2, "usage"),
    (["smoke-test", "--max-tokens", "zero", "-t", "x", "-d", "y"], 2, "usage"),
    # plan
    (["plan", "-d", "example:zlab-dflash2"], 2, "usage"),
    (["plan", "-t", "./no-target", "-d", "example:zlab-dflash2"], 2, "source"),
    (["plan", "-t", "example:vllm-cpu-demo/target", "-d", "./nope"], 2, "source"),
    (["plan", "-t", "example:vllm-cpu-demo/target", "-d", "example:zlab-dflash", "--engine", "warp-drive"], 2, "usage"),
    (["plan", "--preset", "no-such-preset"], 2, None),
    (["plan", "-t", "./no-target", "-d", "example:zlab-dflash"], 2, "source"),  # a Hub one: DFT090, exit 0
    # examples
    (["examples", "--bogus-option"], 2, "usage"),
]


def run(args: list[str], cwd: Path) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "DFLASH_TOOLS_"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(cwd / "hf-home"))
    result = subprocess.run(
        [sys.executable, "-m", "dflash_tools", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )
    return result.returncode, result.stdout


def one_document(stdout: str) -> object:
    decoder = json.JSONDecoder()
    document, end = decoder.raw_decode(stdout.lstrip())
    assert not stdout.lstrip()[end:].strip(), f"more than one document: {stdout!r}"
    return document


# Each failure once with --json; one failure per command also with --format json (the same code path).
CASES = [(args, code, kind, ["--json"]) for args, code, kind in FAILURES] + [
    (args, code, kind, ["--format", "json"])
    for args, code, kind in FAILURES
    if args
    in (
        ["inspect", "./nope"],
        ["convert", "--bogus-option", "x"],
        ["smoke-test", "-d", "example:zlab-dflash2"],
        ["plan", "-d", "example:zlab-dflash2"],
    )
]


@pytest.mark.parametrize(
    ("args", "exit_code", "kind", "flag"), CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_every_failure_prints_one_error_document(
    args: list[str], exit_code: int, kind: str | None, flag: list[str], tmp_path: Path
) -> None:
    (tmp_path / "occupied").mkdir()
    (tmp_path / "occupied" / "file").write_text("x")
    code, stdout = run([*args, *flag], tmp_path)
    assert code == exit_code, stdout
    document = one_document(stdout)
    assert isinstance(document, dict)
    assert document["schema_version"] == 1
    assert document["ok"] is False
    assert document["exit_code"] == code
    assert document["command"] == args[0]
    error = document["error"]
    assert error["message"] and error["exit_code"] == code
    if kind is not None:
        assert error["kind"] == kind


def test_environment_variable_asks_for_json_too(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "DFLASH_TOOLS_"))}
    env.update(HF_HUB_OFFLINE="1", DFLASH_TOOLS_FORMAT="json")
    result = subprocess.run(
        [sys.executable, "-m", "dflash_tools", "inspect", "--bogus-option"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2
    assert one_document(result.stdout)["error"]["kind"] == "usage"  # type: ignore[index]


@pytest.mark.parametrize(
    ("args", "exit_code"),
    [
        (["inspect", "example:zlab-dflash2"], 0),
        (["inspect", "example:speculators-dflash-legacy", "--fail-on", "warning"], 1),
        (["inspect", "example:zlab-dflash2", "./nope"], 2),
        (["convert", "example:zlab-dflash2", "--check"], 1),
        (["convert", "example:zlab-dflash2", "-o", "out"], 0),
        (["examples"], 0),
        (["smoke-test", "--dry-run", "-t", "example:engine-demo/target", "-d", "example:engine-demo/zlab-dflash2"], 0),
        # An unreadable draft is a refused draft inside the full smoke-test document (exit 2).
        (["smoke-test", "--dry-run", "-t", "example:engine-demo/target", "-d", "./nope"], 2),
        (["plan", "-t", "example:vllm-cpu-demo/target", "-d", "example:vllm-cpu-demo/zlab-dflash"], 0),
        (["plan", "-t", "example:vllm-cpu-demo/target", "-d", "example:vllm-cpu-demo/zlab-dflash-anchor-first"], 1),
    ],
)
def test_success_and_findings_paths_print_one_document(args: list[str], exit_code: int, tmp_path: Path) -> None:
    code, stdout = run([*args, "--json"], tmp_path)
    assert code == exit_code, stdout
    document = one_document(stdout)
    documents = document if isinstance(document, list) else [document]
    assert all(isinstance(d["schema_version"], int) and d["command"] == args[0] for d in documents)
    if args[0] == "inspect":  # each source's `ok` and `exit_code` agree, and the worst is the exit code
        assert all(d["ok"] is (d["exit_code"] == 0) for d in documents)
        assert max(d["exit_code"] for d in documents) == code
    if code == 2 and args[0] == "inspect":  # several sources, one unreadable: an error document in its place
        assert any(d.get("ok") is False and "error" in d for d in documents)
    if args[0] in ("smoke-test", "plan", "convert"):
        # `ok` and `exit_code` say what the exit says, in every document (`convert --check` that
        # finds changes said ok: true with exit 1).
        assert document["exit_code"] == code  # type: ignore[index]
        assert document["ok"] is (code == 0)  # type: ignore[index]


def test_environment_json_is_the_json_flag_on_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """DFLASH_TOOLS_FORMAT=json with no argument at all (where a person gets the help) prints the
    very document `--json` prints, and its exit code: for each command and for the bare program.
    In process, through the same `main()` as the `dflash-tools` script."""
    from dflash_tools.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def run_main(args: list[str], env_json: bool) -> tuple[int, str]:
        if env_json:
            monkeypatch.setenv("DFLASH_TOOLS_FORMAT", "json")
        else:
            monkeypatch.delenv("DFLASH_TOOLS_FORMAT", raising=False)
        monkeypatch.setattr(sys, "argv", ["dflash-tools", *args])
        with pytest.raises(SystemExit) as exited:
            main()
        return int(exited.value.code or 0), capsys.readouterr().out

    for command in ("inspect", "convert", "smoke-test"):
        env_code, env_out = run_main([command], env_json=True)
        flag_code, flag_out = run_main([command, "--json"], env_json=False)
        assert env_code == flag_code == 2, (command, env_out)
        assert "Usage:" not in env_out, "the help went to stdout in place of the document"
        assert one_document(env_out) == one_document(flag_out), command
    bare_code, bare_out = run_main([], env_json=True)
    assert bare_code == 2
    document = one_document(bare_out)
    assert isinstance(document, dict) and document["error"]["kind"] == "usage"
