"""The root typer app. Each command lives in its own module and only parses, calls the core, renders."""

from __future__ import annotations

import typer

from dflash_tools._version import __version__

EPILOG = (
    "Exit codes: 0 ok; 1 the checkpoint has error findings, or a runtime failure; "
    "2 usage error or unreadable input (no such path or repo, offline and not cached). "
    "Set DFLASH_TOOLS_DEBUG=1 to see tracebacks."
)

app = typer.Typer(
    name="dflash-tools",
    help="Inspect, normalize and smoke-test DFlash-family speculative-decoding drafts "
    "(DFlash, DFlash2, DSpark) before you serve them with vLLM.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
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
    from dflash_tools.cli import convert_cmd, inspect_cmd, smoke_test_cmd

    inspect_cmd.register(app)
    convert_cmd.register(app)
    smoke_test_cmd.register(app)
