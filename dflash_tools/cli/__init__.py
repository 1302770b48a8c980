"""Command-line entry point (`dflash-tools`): two modules per command, one output sink, one error map.

`app` registers the commands; each `NAME_cmd` declares a command's options and help (all that
`--help` imports), and its `NAME_run` calls the library and renders, imported only when the
command runs (app.py says how to add one); `_help` lays out the help pages; `_output` is the only
place that writes to the terminal and `_errors` maps every library error to a one-line message,
a next step and an exit code.

Imports: the commands' core entry points (`inspect`, `convert`, `plan`, `smoke`, `serving` for
`inspect --engine`) and what they return (`draft`, `reading`, `dialects`, `files`, `engine_rules`
for the release names in help texts, `smoke_contract`), plus typer and rich, which nothing
outside this package imports.
"""

from __future__ import annotations

import signal
import sys

import typer
import typer.main

from dflash_tools.cli.app import app, register_commands

register_commands()

__all__ = ["app", "main"]


def main() -> None:
    """Run the app: any terminal (`_output.prepare_streams`), SIGTERM and SIGHUP as Ctrl-C
    (`_signals`), a command-line mistake as one line (and one JSON document when JSON is asked
    for), never a traceback."""
    from dflash_tools.cli._output import prepare_streams, reset_documents
    from dflash_tools.cli._signals import signals_handled

    prepare_streams()
    reset_documents()
    with signals_handled():
        code = _run(sys.argv[1:])
    sys.exit(code)


def _run(argv: list[str]) -> int:
    """Parse and run one command line; its exit status."""
    from dflash_tools.cli._errors import EXIT_USAGE, error_document, json_requested, report_error
    from dflash_tools.cli._output import write_json
    from dflash_tools.cli._signals import Interrupted

    as_json = json_requested(argv)
    command = next((arg for arg in argv if not arg.startswith("-")), "")
    root = typer.main.get_command(app)
    if as_json:
        # Without arguments a command prints its help (`no_args_is_help`): fine for a person, but
        # JSON asked for (also through DFLASH_TOOLS_FORMAT, where no argument at all is given) must
        # get the command's own error document, exactly as `--json` alone gets it.
        root.no_args_is_help = False
        for subcommand in getattr(root, "commands", {}).values():
            subcommand.no_args_is_help = False
    try:
        code = root.main(args=argv, prog_name="dflash-tools", standalone_mode=False)
    except typer.Abort:
        code = 130
    except KeyboardInterrupt as exc:
        # Stopped while parsing or starting, before a command's own handler: the same answer.
        stop = exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)
        if as_json:
            write_json(error_document(command, stop.message, "", stop.exit_code, "interrupted"))
        report_error(stop.message)
        code = stop.exit_code
    except typer.TyperException as exc:
        # The parser rejected the command line (typer's public base class of its usage errors).
        code = getattr(exc, "exit_code", EXIT_USAGE)
        if type(exc).__name__ == "NoArgsIsHelpError":
            show = getattr(exc, "show", None)
            if callable(show):
                show()
        else:
            from dflash_tools.cli._usage import usage_error

            message, hint = usage_error(exc, argv)
            if as_json:
                write_json(error_document(command, message, hint, code, "usage"))
            report_error(message, hint)
    return code if isinstance(code, int) else 0
