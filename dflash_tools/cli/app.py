"""The root typer app and its commands.

Each command is two modules, so that `--help` and the commands that are not run cost nothing:
`NAME_cmd.py` declares the command (its help text, its options as the fields of one `NAMEArgs`
class, and `register(app)`) and imports only typer, `_options` and `_help`; `_options.command_for`
hands the parsed options, packed into one frozen `NAMEArgs`, to `NAME_run.run(args)`, which is
imported only when the command runs, calls the command's core entry point and renders. Adding a
command: write both modules and add it to `register_commands`. Adding an option: one field of
`NAMEArgs` (with a `rich_help_panel`; a shared one from `_options`).
docs/development.md has the details; tests/cli/test_help.py checks the rules.
"""

from __future__ import annotations

import typer

from dflash_tools.cli._help import Group

EPILOG = (
    "Exit codes: 0 ok; 1 the checkpoint has error findings, or a runtime failure; "
    "2 usage error or unreadable input (no such path or repo, offline and not cached). "
    "Set DFLASH_TOOLS_DEBUG=1 to see tracebacks."
)

# typer converts every option value that is not already a bool through pydantic, and the root's
# flags that were not given (--help, the completion flags) arrive as None: defaults of False
# spare `dflash-tools COMMAND --help` the pydantic import (most of its cost: bench/bench_startup.py).
_ROOT_FLAG_DEFAULTS = {"help": False, "install_completion": False, "show_completion": False}

app = typer.Typer(
    name="dflash-tools",
    cls=Group,
    help="Inspect, normalize and smoke-test DFlash-family speculative-decoding drafts "
    "(DFlash, DFlash2, DSpark) before you serve them with vLLM.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "default_map": _ROOT_FLAG_DEFAULTS},
)


def _version(value: bool) -> None:
    if value:
        from dflash_tools._version import __version__

        typer.echo(f"dflash-tools {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Inspect, normalize and smoke-test DFlash-family speculative-decoding drafts."""


def register_commands() -> None:
    from dflash_tools.cli import convert_cmd, examples_cmd, explain_cmd, inspect_cmd, plan_cmd, smoke_test_cmd

    inspect_cmd.register(app)
    convert_cmd.register(app)
    plan_cmd.register(app)
    smoke_test_cmd.register(app)
    examples_cmd.register(app)
    explain_cmd.register(app)
