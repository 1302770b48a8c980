"""SIGTERM and SIGHUP end a command as Ctrl-C (SIGINT) does: cleanly, with one JSON document.

By default a SIGTERM (`kill`, `timeout`, a CI runner cancelling a job) or a SIGHUP (the terminal
closed) ends Python at once: no `finally` runs, so convert's staging folder stays beside OUT and
`--json` prints nothing. `signals_handled` makes all three raise `Interrupted` (a
KeyboardInterrupt, so every cleanup written for Ctrl-C runs: staging folders, temporary files,
child processes), `handle_errors` turns it into the `interrupted` error document and the exit
status 128 + the signal number (130, 143, 129), as a shell reports a killed command.

A second signal while the first is being handled is ignored: the cleanup it would interrupt is
what leaves nothing behind (SIGKILL still ends the process at once). A signal that arrives after
the command wrote its JSON document changes nothing: the document is complete.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A command stopped by a signal; `exit_code` is 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def message(self) -> str:
        name = signal.Signals(self.signum).name
        return "interrupted (Ctrl-C)" if self.signum == signal.SIGINT else f"terminated by {name}"


class _State:
    interrupted = False
    # Whether this process has written its JSON document (cli._output.write_json sets it): a
    # command writes exactly one, so an interrupt that lands after it adds none. Kept here, below
    # _output, so that the handler reads it without importing the module that imports this one.
    document_written = False


def mark_document_written(written: bool = True) -> None:
    _State.document_written = written


def document_written() -> bool:
    return _State.document_written


def _handler(signum: int, frame: FrameType | None) -> None:
    if _State.interrupted or _State.document_written:
        return  # already stopping (its cleanup must finish), or the answer is already out
    _State.interrupted = True
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_handled() -> Iterator[None]:
    """Route SIGINT, SIGTERM and SIGHUP to `Interrupted` while the block runs, then put the
    previous handlers back (main thread only; a signal a parent process set to be ignored, as
    `nohup` does with SIGHUP, stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _State.interrupted = False
    previous = {}
    for signum in HANDLED:
        handler = signal.getsignal(signum)
        if handler is not signal.SIG_IGN:
            previous[signum] = handler
            signal.signal(signum, _handler)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold the handled signals while a block runs (writing the JSON document), so that it is
    never cut in half; one that arrived meanwhile is delivered after the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
