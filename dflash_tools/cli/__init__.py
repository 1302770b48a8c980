"""Command-line entry point (`dflash-tools`): two modules per command, one output sink, one error map.

`app` registers the commands; each `NAME_cmd` declares a command's options and help (all that
`--help` imports), and its `NAME_run` calls the library and renders, imported only when the
command runs (app.py says how to add one); `_help` lays out the help pages; `_output` is the only
place that writes to the terminal and `_errors` maps every library error to a one-line message,
a next step and an exit code.

Imports: the commands' core entry points (`inspect`, `convert`, `serving` for plan, `smoke`) and
what they return (`draft`, `reading`, `dialects`, `files`), plus typer and rich, which nothing
outside this package imports.
"""

from __future__ import annotations

import sys

import typer
import typer.main

from dflash_tools.cli.app import app, register_commands

register_commands()

__all__ = ["app", "main"]


def main() -> None:
    """Run the app; a command-line mistake asked for as JSON still gets one JSON document."""
    from dflash_tools.cli._errors import EXIT_USAGE, error_document, json_requested
    from dflash_tools.cli._output import write_json

    argv = sys.argv[1:]
    if not json_requested(argv):
        app()
        return
    root = typer.main.get_command(app)
    # Without arguments a command prints its help (`no_args_is_help`): fine for a person, but
    # JSON asked for (also through DFLASH_TOOLS_FORMAT, where no argument at all is given) must
    # get the command's own error document, exactly as `--json` alone gets it.
    root.no_args_is_help = False
    for subcommand in getattr(root, "commands", {}).values():
        subcommand.no_args_is_help = False
    try:
        code = root.main(args=argv, standalone_mode=False)
    except typer.Abort:
        sys.exit(130)
    except typer.TyperException as exc:
        # The parser rejected the command line (typer's public base class of its usage errors).
        code = getattr(exc, "exit_code", EXIT_USAGE)
        show = getattr(exc, "show", None)
        if type(exc).__name__ != "NoArgsIsHelpError":
            command = next((arg for arg in argv if not arg.startswith("-")), "")
            write_json(error_document(command, exc.format_message(), "see --help", code, "usage"))
        if callable(show):
            show()
        sys.exit(code)
    sys.exit(code if isinstance(code, int) else 0)
