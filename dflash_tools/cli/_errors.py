"""Map failures to one-line messages with a next step, and to the documented exit codes."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from dflash_tools.cli._output import reset_documents, safe_text, stderr_console, write_json
from dflash_tools.cli._signals import Interrupted
from dflash_tools.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, DflashToolsError, UsageError, error_document

__all__ = ["EXIT_FINDINGS", "EXIT_OK", "EXIT_USAGE", "error_document", "handle_errors", "json_requested"]


def debug_enabled() -> bool:
    return os.environ.get("DFLASH_TOOLS_DEBUG", "") not in ("", "0", "false")


def report_error(message: str, hint: str = "") -> None:
    console = stderr_console()
    # soft_wrap: the message stays one line however narrow the terminal is.
    console.print(f"[bold red]error:[/bold red] {safe_text(message)}", soft_wrap=True)
    if hint:
        console.print(f"[dim]hint:[/dim] {safe_text(hint)}", soft_wrap=True)


def refuse_empty_names(option: str, values: list[str] | None, choices: list[str]) -> None:
    """An empty name (`--engine ''`, `--engine 'vllm,'`) is a usage error, not "no engine asked"."""
    for value in values or []:
        if not value.strip() or any(not part.strip() for part in value.split(",")):
            raise UsageError(f"{option} {value!r}: an empty engine name", f"choose from: {', '.join(choices)}")


def json_requested(argv: list[str]) -> bool:
    """Whether a command line asked for JSON, read before (or without) option parsing."""
    if "--json" in argv or any(arg in ("--format=json", "-fjson") for arg in argv):
        return True
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag in ("--format", "-f") and value == "json":
            return True
    return os.environ.get("DFLASH_TOOLS_FORMAT") == "json" and "--format" not in argv and "-f" not in argv


@contextmanager
def handle_errors(command: str = "", *, json_output: bool = False, source: Any = None) -> Iterator[None]:
    """Turn our exceptions into exit codes; anything else is a one-line internal error.

    With `json_output`, every failure also writes one error document to stdout, so a caller
    piping into `jq` always gets exactly one document.
    """

    def fail(message: str, hint: str, code: int, kind: str, **extra: Any) -> typer.Exit:
        if json_output:
            write_json(error_document(command, message, hint, code, kind, source, **extra))
        report_error(message, hint)
        return typer.Exit(code)

    reset_documents()
    try:
        yield
    except typer.Exit:
        raise
    except DflashToolsError as exc:
        if debug_enabled():
            raise
        findings = getattr(exc, "findings", None)
        extra = {"findings": [f.to_dict() for f in findings]} if findings else {}
        raise fail(exc.message, exc.hint, exc.exit_code, exc.kind, **extra) from None
    except KeyboardInterrupt as exc:
        # Ctrl-C, or SIGTERM / SIGHUP (`_signals`): the cleanups have run on the way here.
        stop = exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)
        raise fail(stop.message, "run the command again to finish it", stop.exit_code, "interrupted") from None
    except OSError as exc:
        # The file system said no (permissions, an immutable file, a read-only mount, a full
        # disk): the user's to fix, not a bug. Staging folders are already cleaned up.
        if debug_enabled():
            raise
        where = exc.filename2 or exc.filename
        raise fail(
            (f"{where}: " if where else "") + (exc.strerror or str(exc) or type(exc).__name__),
            "check the permissions, mount and free space of that location, then run again",
            EXIT_FINDINGS,
            "os",
        ) from None
    except Exception as exc:
        if debug_enabled():
            raise
        raise fail(
            f"internal error: {type(exc).__name__}: {exc}",
            "this is a bug in dflash-tools; rerun with DFLASH_TOOLS_DEBUG=1 for the traceback and report it",
            EXIT_FINDINGS,
            "internal",
        ) from None
