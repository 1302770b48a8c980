"""Command-line entry point (`dflash-tools`)."""

from __future__ import annotations

import sys

import click

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
    try:
        code = app(standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        command = next((arg for arg in argv if not arg.startswith("-")), "")
        write_json(error_document(command, exc.format_message(), "see --help", exc.exit_code, "usage"))
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
