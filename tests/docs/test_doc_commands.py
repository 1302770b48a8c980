"""Every shell command in README.md and docs/*.md runs as written, or its block says why not.

Each shell block (docs/development.md, "Documented commands") runs command by command with bash,
in a scratch folder where the placeholder folders the docs use (`./my-draft`, `./draft`, ...) are
copies of bundled examples, offline: the Hub repo ids the docs name are served by the test Hub
(tests/hub_server.py) from bundled examples too. A command passes when it exits 0 (or the exit
code its own `# ... exit N ...` comment announces) without a traceback. Blocks marked
`<!-- not-run: REASON -->` are skipped here and listed in docs/not-run.md.

Runs of the torch engine take tens of seconds each: those blocks are marked `ci_only` (run by
.ci/run after the default suite).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dflash_tools.reading.local import examples_dir
from tests.docs.doc_blocks import NOT_RUN_LIST, REASONS, ROOT, Block, blocks, not_run_list
from tests.hub_server import HubServer

# The folders the docs use as placeholders, and the bundled example each one is a copy of.
SCRATCH_FOLDERS = {
    "my-draft": "zlab-dflash2",
    "a": "zlab-dflash",
    "b": "speculators-dflash2",
    "draft": "speculators-dflash-legacy",  # un-normalized: --check exits 1, --dry-run shows a diff
    "speculators-draft": "speculators-dflash",
    "anchor-draft": "zlab-dflash2-anchor-first",
}
# The Hub repos the docs name, served by the test Hub from bundled examples (a target is served
# as its config only, which is all inspect and a dry run read).
HUB_REPOS = {
    "z-lab/Qwen3.8-27B-DFlash2": "zlab-dflash2",
    "z-lab/Qwen3-8B-DFlash-b16": "zlab-dflash",
    "DaoCloud/Qwen3.8-27B-DFlash2-Exp": "zlab-dflash2-anchor-first",
    "Qwen/Qwen3.8-27B": "tiny-target",
}
# Files whose blocks wait for marks from another change; the test below fails once a file's
# blocks are all marked, so that its entry is removed.
PENDING_MARKS: dict[str, str] = {}

ALL = blocks()
SHELL_BLOCKS = [b for b in ALL if b.shell]


def is_slow(block: Block) -> bool:
    """An engine run (not a dry run) takes tens of seconds on a CPU."""
    return any("smoke-test" in c and "--dry-run" not in c for c in block.commands())


def runnable() -> Iterator[object]:
    for block in SHELL_BLOCKS:
        if block.not_run is not None:
            continue
        marks = [pytest.mark.ci_only] if is_slow(block) else []
        yield pytest.param(block, id=block.id, marks=marks)


@pytest.fixture(scope="module")
def docs_hub() -> Iterator[HubServer]:
    with HubServer() as hub:
        for repo_id, example in HUB_REPOS.items():
            folder = examples_dir() / example
            hub.add_repo(repo_id, {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()})
        yield hub


def scratch_folder(root: Path) -> Path:
    for name, example in SCRATCH_FOLDERS.items():
        shutil.copytree(examples_dir() / example, root / name)
    return root


def environment(scratch: Path, hub_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "DFLASH_TOOLS_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",  # this dflash-tools, this python
        HF_HOME=str(scratch / ".hf-home"),
        HF_ENDPOINT=hub_url,
        HF_HUB_OFFLINE="0",
        HF_HUB_DISABLE_TELEMETRY="1",
        NO_COLOR="1",
        COLUMNS="80",
    )
    return env


def expected_codes(command: str) -> set[int]:
    """0, and any code the command's own comment announces (`# CI gate: exit 1 if ...`)."""
    comment = command.split(" # ", 1)[1] if " # " in command else ""
    return {0} | {int(code) for code in re.findall(r"\bexit (\d)\b", comment)}


def run_command(command: str, scratch: Path, env: dict[str, str]) -> tuple[int, str]:
    shell_line = command
    if "| jq" in command and shutil.which("jq") is None:
        # Without jq here, what reaches the pipe must still be one JSON document.
        shell_line = command.split("| jq", 1)[0] + f"| {sys.executable} -m json.tool > /dev/null"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", shell_line],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return done.returncode, done.stdout[-3000:] + done.stderr[-3000:]


def check_block(block: Block, scratch: Path, hub_url: str) -> None:
    env = environment(scratch, hub_url)
    for command in block.commands():
        code, output = run_command(command, scratch, env)
        where = f"{block.id} (§ {block.section}): `{command}`"
        assert code in expected_codes(command), (
            f"{where} exits {code}. Fix the command, or the code; if it cannot run offline here, mark the "
            f"block with <!-- not-run: REASON --> (REASON: {', '.join(REASONS)}).\n{output}"
        )
        assert "Traceback" not in output and "internal error" not in output, f"{where}\n{output}"


@pytest.mark.parametrize("block", list(runnable()))
def test_documented_commands_run(block: Block, tmp_path: Path, docs_hub: HubServer) -> None:
    if block.file in PENDING_MARKS:
        pytest.skip(f"{block.file}: {PENDING_MARKS[block.file]}")
    check_block(block, scratch_folder(tmp_path), docs_hub.url)


def test_the_runner_fails_a_broken_command(tmp_path: Path, docs_hub: HubServer) -> None:
    """The check above can fail: a renamed option, a missing placeholder, a wrong exit code."""
    for body in (
        "dflash-tools inspect example:zlab-dflash2 --no-such-option\n",
        "dflash-tools inspect ./not-a-placeholder\n",
        "dflash-tools convert ./draft --check   # the draft is not normalized, so this exits 1\n",
        "dflash-tools inspect example:zlab-dflash2 | jq .no_such_key | grep -q 1\n",
    ):
        block = Block("synthetic.md", 1, "", "bash", body, None, "")
        with pytest.raises(AssertionError):
            check_block(block, scratch_folder(tmp_path / str(len(body))), docs_hub.url)
    passing = Block(
        "synthetic.md", 1, "", "bash", "dflash-tools convert ./draft --check  # exit 1: not normalized\n", None, ""
    )
    check_block(passing, scratch_folder(tmp_path / "ok"), docs_hub.url)


def test_every_block_says_what_it_is() -> None:
    """A fence without a language could hide a command from the runner."""
    unlabeled = [b.id for b in ALL if not b.language]
    assert unlabeled == [], "give each block a language: bash for commands, text for output, json, python"


def test_marks_are_known_and_on_shell_blocks() -> None:
    marked = [b for b in ALL if b.not_run is not None]
    assert [b.id for b in marked if b.not_run not in REASONS] == [], f"known reasons: {', '.join(REASONS)}"
    assert [b.id for b in marked if not b.shell] == []
    assert {b.not_run for b in marked} >= {"gpu", "tier", "install", "network"}


def test_the_not_run_list_is_current() -> None:
    assert NOT_RUN_LIST.read_text(encoding="utf-8") == not_run_list(), (
        "docs/not-run.md is out of date: run `python -m tests.docs.doc_blocks --write`"
    )


def test_pending_marks_are_still_pending() -> None:
    for file in PENDING_MARKS:
        unmarked = [b for b in SHELL_BLOCKS if b.file == file and b.not_run is None]
        assert unmarked, f"{file} has no unmarked shell block left: remove it from PENDING_MARKS"


def test_placeholders_and_hub_repos_are_used() -> None:
    """The tables above hold what the docs use, nothing more (a stale entry hides nothing, but
    misleads whoever adds a doc)."""
    text = "\n".join(c for b in SHELL_BLOCKS for c in b.commands())
    assert [name for name in SCRATCH_FOLDERS if f"./{name}" not in text] == []
    assert [repo for repo in HUB_REPOS if repo not in text and repo not in _preset_text()] == []


def _preset_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "configs" / "presets").glob("*.json"))
