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
from dflash_tools.cli._help import expand

COMMANDS = ("inspect", "convert", "plan", "smoke-test", "examples", "explain")
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
    texts = [expand(text) for text in texts]  # release names filled from the engine tables
    missing = {word for text in texts for word in text.split() if word not in words}
    assert not missing, f"split or lost on the page: {sorted(missing)}"


@pytest.mark.parametrize("command", COMMANDS)
def test_example_commands_are_printed_as_written(command: str) -> None:
    """Each example is one shell line (or a line continued with a backslash), never rewrapped."""
    page_lines = [line.strip() for line in help_page(command).splitlines()]
    examples = source_examples(expand(click_command(command).help or ""))
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
    assert "--runtime [auto|vllm|torch]" in help_page("smoke-test")
    assert "--format [human|json]" in help_page("inspect")
    assert "--fail-on [error|warning|info]" in help_page("inspect")
    assert "--to [zlab|speculators|muse-glimmer]" in help_page("convert")


def test_declared_choices_are_the_cores() -> None:
    """Choices the CLI declares (so that --help need not import the core) match the core's."""
    from dflash_tools.files.atomic import LinkMode
    from dflash_tools.findings import Severity
    from dflash_tools.serving.engine_view import engine_choices
    from dflash_tools.smoke.options import AUTO, Runtime

    def choices(command: str, option: str) -> tuple[str, ...]:
        param = next(p for p in click_command(command).params if option in p.opts)
        return tuple(get_args(param.type_descriptor.annotation)) or tuple(param.metavar.strip("[]").split("|"))

    assert choices("inspect", "--fail-on") == tuple(s.value for s in Severity)
    assert choices("smoke-test", "--runtime") == (AUTO, *(r.value for r in Runtime if not r.is_server))
    assert choices("convert", "--link-mode") == tuple(m.value for m in LinkMode)
    for command, option in (("inspect", "--engine"), ("plan", "--engine"), ("convert", "--for")):
        engine_help = expand(next(p for p in click_command(command).params if option in p.opts).help or "")
        named = [name for name in engine_choices() if name in engine_help.replace(" ", "")]
        # convert --for takes every name but `vllm` alone (the installed release is not a target).
        wanted = [name for name in engine_choices() if option == "--engine" or name != "vllm"]
        assert [name for name in named if name in wanted] == wanted, (command, engine_help)


def test_release_names_come_from_the_engine_tables() -> None:
    """No release number is written in a help text: the pages name what `ENGINE_RULES` holds."""
    from dflash_tools.engine_rules import ENGINE_RULES, latest

    for command in COMMANDS:
        cmd = click_command(command)
        for text in [cmd.help or "", cmd.epilog or "", *(p.help or "" for p in cmd.params)]:
            # A dotted version (0.34.0), not an address (127.0.0.1).
            assert not re.search(r"(?<![\d.])\d+\.\d+\.\d+(?![\d.])", text), (command, text)
    newest = latest("vllm")
    assert newest is not None and f"--engine {newest.spec}" in help_page("plan")
    for spec in ENGINE_RULES:
        assert spec in help_page("inspect", columns=200) and spec in help_page("convert", columns=200)


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
SHARED_MEANING = {
    "--timeout",
    "--token",
    "--format",
    "-f",
    "--json",
    "--no-color",
    "--target-revision",
    # Declared once in `_options.py` (the "--target has four help texts" is this test's to keep).
    "--target",
    "-t",
    "--draft",
    "-d",
    "--preset",
    "-k",
    "--num-speculative-tokens",
    "--revision",
    "--quiet",
    "-q",
    "--engine",
}


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
        options = sys.modules.get("dflash_tools.plan.options")
        assert options is None or "__dataclass_fields__" not in vars(options.PlanOptions)
        arguments = sys.modules.get("dflash_tools.smoke.arguments")
        assert arguments is None or "__dataclass_fields__" not in vars(arguments.SmokeArguments)
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
        "dflash_tools.cli._signals",  # SIGTERM / SIGHUP handled from the start (stdlib only)
        *(f"dflash_tools.cli.{name.replace('-', '_')}_cmd" for name in COMMANDS),
        # The commands whose options the core declares once (`plan.options`, `smoke.arguments`:
        # standard library only, made a dataclass on first use, not on import).
        "dflash_tools.plan",
        "dflash_tools.plan.options",
        "dflash_tools.smoke",
        "dflash_tools.smoke.arguments",
    }
    # A page that names engine releases reads them from the tables (plain dataclasses).
    tables = {"dflash_tools.engine_rules", *(f"dflash_tools.engine_rules.{name}" for name in ENGINE_TABLE_MODULES)}
    for args in (["--help"], ["inspect", "--help"], ["plan", "--help"], ["smoke-test", "--help"]):
        completed = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60, check=True
        )
        modules = set(json.loads(completed.stderr.strip().splitlines()[-1]))
        ours = {m for m in modules if m.startswith("dflash_tools")}
        allowed = allowed_ours | (tables if args[0] in ("inspect", "plan") else set())
        assert ours <= allowed, f"{args}: {sorted(ours - allowed)}"
        heavy = {m.split(".")[0] for m in modules} & {"rich", "pydantic", "torch", "huggingface_hub", "safetensors"}
        assert heavy == set(), args
        assert "importlib.metadata" not in modules, args


# The engine tables' modules (`dflash_tools/engine_rules/`), which `inspect --help` and `plan --help` load.
ENGINE_TABLE_MODULES = sorted(
    path.stem
    for path in (__import__("pathlib").Path(__file__).parents[2] / "dflash_tools" / "engine_rules").glob("*.py")
    if path.stem not in ("__init__", "docs")
)


def test_hub_timeout_old_spelling_still_works(tmp_path: Any) -> None:
    """smoke-test's `--hub-timeout` (now `--timeout`) is accepted, with a note."""
    result = runner.invoke(
        app,
        ["smoke-test", "--dry-run", "--json", "--hub-timeout", "3", "-t", "example:engine-demo/target"]
        + ["-d", "example:engine-demo/zlab-dflash2", "--runtime", "torch"],
    )
    assert result.exit_code == 0, result.output
    assert "--hub-timeout is deprecated" in result.stderr
    assert json.loads(result.stdout)["drafts"]
    assert "--hub-timeout" not in help_page("smoke-test")


def test_smoke_test_engine_is_now_runtime() -> None:
    """smoke-test's `--engine` (a runtime, where inspect's and plan's name engine releases) is
    `--runtime`; the old spelling still works, with a note, and is not on the help page."""
    base = [
        "smoke-test",
        "--dry-run",
        "--json",
        "-t",
        "example:engine-demo/target",
        "-d",
        "example:engine-demo/zlab-dflash2",
    ]
    old = runner.invoke(app, [*base, "--engine", "torch"])
    new = runner.invoke(app, [*base, "--runtime", "torch"])
    assert old.exit_code == new.exit_code == 0, old.output
    assert "note: --engine is deprecated here: use --runtime" in old.stderr and "deprecated" not in new.stderr
    assert json.loads(old.stdout)["engine"] == json.loads(new.stdout)["engine"] == "torch"
    assert not re.search(r"--engine\b(?!-arg)", help_page("smoke-test"))
    clash = runner.invoke(app, [*base, "--engine", "torch", "--runtime", "vllm"])
    assert clash.exit_code == 2 and json.loads(clash.stdout)["error"]["kind"] == "usage"


@pytest.mark.parametrize("command", ["inspect", "plan"])
def test_k_has_one_type_and_single_k_commands_refuse_a_list(command: str) -> None:
    """`-k` is one option everywhere (K as typed); inspect and plan serve one K and refuse a list
    or a range with a usage error that points at smoke-test's sweep."""
    declared = {
        (p.type_descriptor.annotation, p.metavar, p.help)
        for name in COMMANDS
        for p in click_command(name).params
        if "-k" in p.opts
    }
    assert len(declared) == 1 and next(iter(declared))[:2] == (str, "K")
    args = {
        "inspect": ["inspect", "example:zlab-dflash"],
        "plan": ["plan", "-t", "example:vllm-cpu-demo/target", "-d", "example:vllm-cpu-demo/zlab-dflash"],
    }[command]
    result = runner.invoke(app, [*args, "-k", "3,5", "--json"])
    error = json.loads(result.stdout)["error"]
    assert result.exit_code == 2 and error["kind"] == "usage"
    assert error["message"] == f"-k '3,5': {command} takes one K; a list or a range is smoke-test's K sweep"
    assert runner.invoke(app, [*args, "-k", "5", "--json"]).exit_code in (0, 1)
