"""Map failures to one-line messages with a next step, and to the documented exit codes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import typer

from dflash_tools.cli._output import safe_text, stderr_console
from dflash_tools.errors import DflashToolsError

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2


def debug_enabled() -> bool:
    return os.environ.get("DFLASH_TOOLS_DEBUG", "") not in ("", "0", "false")


def report_error(message: str, hint: str = "") -> None:
    console = stderr_console()
    # soft_wrap: the message stays one line however narrow the terminal is.
    console.print(f"[bold red]error:[/bold red] {safe_text(message)}", soft_wrap=True)
    if hint:
        console.print(f"[dim]hint:[/dim] {safe_text(hint)}", soft_wrap=True)


def error_document(command: str, message: str, hint: str, exit_code: int) -> dict[str, object]:
    """The one JSON document a --format json run prints when it stops on an error."""
    return {
        "schema_version": 1,
        "command": command,
        "ok": False,
        "exit_code": exit_code,
        "error": {"message": message, "hint": hint},
    }


@contextmanager
def handle_errors(json_command: str | None = None) -> Iterator[None]:
    """Turn our exceptions into exit codes; anything else is a one-line internal error.

    With `json_command` (the command's name, when its output is JSON), our own errors also print
    an error document on stdout, so JSON readers get one document on every path.
    """
    try:
        yield
    except typer.Exit:
        raise
    except DflashToolsError as exc:
        if debug_enabled():
            raise
        report_error(exc.message, exc.hint)
        if json_command is not None:
            import json
            import sys

            document = error_document(json_command, exc.message, exc.hint, exc.exit_code)
            sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        report_error("interrupted")
        raise typer.Exit(130) from None
    except OSError as exc:
        # The file system said no (permissions, an immutable file, a read-only mount, a full
        # disk): the user's to fix, not a bug. Staging folders are already cleaned up.
        if debug_enabled():
            raise
        where = exc.filename2 or exc.filename
        report_error(
            (f"{where}: " if where else "") + (exc.strerror or str(exc) or type(exc).__name__),
            "check the permissions, mount and free space of that location, then run again",
        )
        raise typer.Exit(EXIT_FINDINGS) from None
    except Exception as exc:
        if debug_enabled():
            raise
        report_error(
            f"internal error: {type(exc).__name__}: {exc}",
            "this is a bug in dflash-tools; rerun with DFLASH_TOOLS_DEBUG=1 for the traceback and report it",
        )
        raise typer.Exit(EXIT_FINDINGS) from None
