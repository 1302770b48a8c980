"""`--help` pages: readable at 80 columns, the same option names meaning the same thing, and cheap.

The rules are `dflash_tools/cli/_help.py`'s and `app.py`'s (docs/development.md, "Adding a command
or an option"); each test here failed on the help pages before they were laid out by `_help.py`.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import textwrap
from typing import Any, get_args

import pytest
import typer
from typer.testing import CliRunner

from dflash_tools.cli import app

COMMANDS = ("inspect", "convert", "plan", "smoke-test", "examples")
runner = CliRunner()


def help_page(*command: str, columns: int = 80) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


def click_command(name: str) -> Any:
    group = typer.main.get_command(app)
    return group.commands[name]  # type: ignore[attr-defined]


def source_examples(text: str) -> list[str]:
    """The indented lines of a help text: example commands, printed as written."""
    return [line.strip() for line in inspect.cleandoc(text).splitlines() if line[:1].isspace() and line.strip()]


@pytest.mark.parametrize("command", [(), *((name,) for name in COMMANDS)], ids=["root", *COMMANDS])
def test_help_fits_80_columns_and_never_splits_a_word(command: tuple[str, ...]) -> None:
    page = help_page(*command)
    lines = page.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    # A word broken at its hyphen (`example:vllm-cpu-` / `demo/target`, `anchor-` / `first`).
    assert not [line for line in lines if re.search(r"\w-$", line)]
    # Every word of every help text and option help is on the page whole.
    words = set(page.split())
    cmd = typer.main.get_command(app) if not command else click_command(command[0])
    texts = [cmd.help or "", cmd.epilog or ""] + [p.help or "" for p in cmd.params if not getattr(p, "hidden", False)]
    missing = {word for text in texts for word in text.split() if word not in words}
    assert not missing, f"split or lost on the page: {sorted(missing)}"


@pytest.mark.parametrize("command", COMMANDS)
def test_example_commands_are_printed_as_written(command: str) -> None:
    """Each example is one shell line (or a line continued with a backslash), never rewrapped."""
    page_lines = [line.strip() for line in help_page(command).splitlines()]
    examples = source_examples(click_command(command).help)
    assert examples, f"{command} --help has no examples"
    for example in examples:
        assert example in page_lines, f"{example!r} was rewrapped"
    # `--format` / `json`: in the examples block, a line is a command or the continuation of one
    # that ended in a backslash, never a stray piece of the line above.
    block = page_lines[page_lines.index("Examples:") + 2 :]
    block = block[: block.index("")] if "" in block else block
    for previous, line in zip(["\\"] + block, block, strict=False):
        assert line.startswith("dflash-tools ") or previous.endswith("\\"), f"{line!r} split from {previous!r}"


@pytest.mark.parametrize("command", COMMANDS)
def test_metavars_say_what_to_type(command: str) -> None:
    page = help_page(command)
    assert not re.findall(r"<[^<>\s]+( range)?>", page), "typer's Python-type metavars (<str>, <int range>)"
    assert "list[" not in page


def test_choices_are_shown() -> None:
    assert "--engine [auto|vllm|torch]" in help_page("smoke-test")
    assert "--format [human|json]" in help_page("inspect")
    assert "--fail-on [error|warning|info]" in help_page("inspect")
    assert "--to [zlab|speculators]" in help_page("convert")


def test_declared_choices_are_the_cores() -> None:
    """Choices the CLI declares (so that --help need not import the core) match the core's."""
    from dflash_tools.files.atomic import LinkMode
    from dflash_tools.findings import Severity
    from dflash_tools.serving.engine_view import engine_choices

    def choices(command: str, option: str) -> tuple[str, ...]:
        param = next(p for p in click_command(command).params if option in p.opts)
        return tuple(get_args(param.type_descriptor.annotation)) or tuple(param.metavar.strip("[]").split("|"))

    assert choices("inspect", "--fail-on") == tuple(s.value for s in Severity)
    assert choices("convert", "--link-mode") == tuple(m.value for m in LinkMode)
    for command in ("inspect", "plan"):
        engine_help = next(p for p in click_command(command).params if "--engine" in p.opts).help or ""
        named = [name for name in engine_choices() if name in engine_help.replace(" ", "")]
        assert named == engine_choices(), (command, engine_help)


@pytest.mark.parametrize("command", ["inspect", "convert", "plan", "smoke-test"])
def test_options_are_grouped(command: str) -> None:
    """Every option of a command sits in a named group (typer's rich_help_panel)."""
    ungrouped = [
        p.opts[0]
        for p in click_command(command).params
        if isinstance(p, typer.core.TyperOption) and not p.hidden and not p.rich_help_panel
    ]
    assert ungrouped == []
    headings = [line for line in help_page(command).splitlines() if re.fullmatch(r"[A-Z][\w ]+:", line)]
    assert len(headings) >= 4 and "Hugging Face Hub:" in headings and "Output:" in headings


def test_the_same_option_means_the_same_thing_everywhere() -> None:
    """An option name shared by several commands has one help text (so one meaning) in all of them."""
    seen: dict[str, tuple[str, str]] = {}
    differing = []
    for command in COMMANDS:
        for param in click_command(command).params:
            if not isinstance(param, typer.core.TyperOption) or param.hidden:
                continue
            for name in param.opts:
                help_text = param.help or ""
                if name in seen and seen[name][1] != help_text and name in SHARED_MEANING:
                    differing.append(f"{name}: {seen[name][0]} says {seen[name][1]!r}, {command} {help_text!r}")
                seen.setdefault(name, (command, help_text))
    assert differing == []
    # `--timeout` is the Hub request timeout in every command; smoke-test's engine clock has its own name.
    for command in ("inspect", "convert", "plan", "smoke-test"):
        assert re.search(r"--timeout FLOAT +Seconds for each Hub request", help_page(command))
    assert "--run-timeout FLOAT" in help_page("smoke-test")


# Options whose help may differ in wording per command (what they revise or target differs) are
# left out; these must read the same everywhere.
SHARED_MEANING = {"--timeout", "--token", "--format", "-f", "--json", "--no-color", "--target-revision"}


def test_quiet_everywhere_there_is_human_output() -> None:
    for command in ("inspect", "convert", "plan", "smoke-test"):
        assert "-q, --quiet" in help_page(command), command


def test_smoke_test_summary_does_not_say_gpu_only() -> None:
    """It runs on a CPU too (the torch engine, vLLM's CPU build)."""
    row = next(line for line in help_page().splitlines() if line.strip().startswith("smoke-test"))
    assert "GPU" not in row
    first = inspect.cleandoc(click_command("smoke-test").help).split("\n\n")
    assert "GPU" not in first[0] and "CPU" in first[1]


def test_help_and_a_command_help_import_no_command_module() -> None:
    """`--help` and `COMMAND --help` load typer and the option declarations only: no rich, no
    pydantic (typer's value conversion), no importlib.metadata, no core module."""
    script = textwrap.dedent(
        """
        import json, sys
        from dflash_tools.cli import main
        sys.argv = ["dflash-tools", *sys.argv[1:]]
        try:
            main()
        except SystemExit:
            pass
        print(json.dumps(sorted(sys.modules)), file=sys.stderr)
        """
    )
    allowed_ours = {
        "dflash_tools",
        "dflash_tools.errors",
        "dflash_tools.cli",
        "dflash_tools.cli.app",
        "dflash_tools.cli._help",
        "dflash_tools.cli._options",
        "dflash_tools.cli._errors",
        "dflash_tools.cli._output",
        *(f"dflash_tools.cli.{name.replace('-', '_')}_cmd" for name in COMMANDS),
    }
    for args in (["--help"], ["inspect", "--help"], ["plan", "--help"], ["smoke-test", "--help"]):
        completed = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60, check=True
        )
        modules = set(json.loads(completed.stderr.strip().splitlines()[-1]))
        ours = {m for m in modules if m.startswith("dflash_tools")}
        assert ours <= allowed_ours, f"{args}: {sorted(ours - allowed_ours)}"
        heavy = {m.split(".")[0] for m in modules} & {"rich", "pydantic", "torch", "huggingface_hub", "safetensors"}
        assert heavy == set(), args
        assert "importlib.metadata" not in modules, args


def test_hub_timeout_old_spelling_still_works(tmp_path: Any) -> None:
    """smoke-test's `--hub-timeout` (now `--timeout`) is accepted, with a note."""
    result = runner.invoke(
        app,
        ["smoke-test", "--dry-run", "--json", "--hub-timeout", "3", "-t", "example:engine-demo/target"]
        + ["-d", "example:engine-demo/zlab-dflash2", "--engine", "torch"],
    )
    assert result.exit_code == 0, result.output
    assert "--hub-timeout is deprecated" in result.stderr
    assert json.loads(result.stdout)["drafts"]
    assert "--hub-timeout" not in help_page("smoke-test")
