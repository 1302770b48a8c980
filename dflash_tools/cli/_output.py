"""Output sinks: JSON (one document via json.dumps, never through rich) or human (rich, stdout).

Logs, warnings and progress go to stderr. Every string that comes from a checkpoint (tensor
names, config values, Hub metadata) passes through `safe_text` before rich sees it, so escape
sequences and `[markup]` are shown inert.

Any terminal: a stream that cannot encode Unicode (`PYTHONIOENCODING=ascii`, `LANG=C` on an old
system) gets our symbols in ASCII (`→` as `->`, `·` as `-`) and anything else as a visible
`\\uXXXX` escape (`prepare_streams`), and JSON is then written with ASCII escapes, which parse
back to the same document; the width comes from `COLUMNS` only when it is a usable number.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any

# Declared with the options (which `--help` imports and which must not import rich); re-exported.
from dflash_tools.cli._options import OutputFormat as OutputFormat
from dflash_tools.cli._signals import deferred_signals, document_written, mark_document_written

if TYPE_CHECKING:
    from rich.console import Console

# rich is imported by the functions that print, not here: `main()` imports this module (through
# `_errors`) on every run, `--help` included, and rich's console costs a third of typer's start-up.

# C0/C1 controls, DEL, Unicode bidi / zero-width controls and line separators that can disguise
# text, and lone surrogates (legal as JSON escapes in a hostile file, unprintable as UTF-8).
UNSAFE_TEXT = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff]"
)
# In JSON output the same characters (those json.dumps leaves raw) become \uXXXX escapes: the
# document parses back to exactly the same strings, and stays inert when it lands on a terminal.
_JSON_ESCAPE = re.compile("[\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff]")


def printable(value: Any) -> str:
    """Control characters become visible \\xNN / \\uNNNN escapes (for rich `Text`, which takes no markup)."""
    text = value if isinstance(value, str) else str(value)

    def _escape(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return UNSAFE_TEXT.sub(_escape, text)


def safe_text(value: Any) -> str:
    """Printable, markup-inert text: control characters become visible \\xNN / \\uNNNN escapes."""
    from rich.markup import escape

    return escape(printable(value))


def _no_color(flag: bool) -> bool:
    return flag or "NO_COLOR" in os.environ


# --- streams that cannot encode Unicode -----------------------------------------------------

# Our own symbols in ASCII, for a stream that cannot encode them; anything else becomes \uXXXX.
ASCII_FALLBACK = {
    "·": "-",
    "→": "->",
    "←": "<-",
    "×": "x",
    "≥": ">=",
    "≤": "<=",
    "≠": "!=",
    "…": "...",
    "•": "*",
    "—": "--",
    "–": "-",
    "─": "-",
    "│": "|",
    "✓": "ok",
    "✗": "x",
    "\xa0": " ",
}
_ERROR_HANDLER = "dflash-tools-ascii"


def _ascii_fallback(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    out = []
    for char in text:
        replacement = ASCII_FALLBACK.get(char)
        if replacement is None:
            code = ord(char)
            replacement = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
        out.append(replacement)
    return "".join(out), error.end


codecs.register_error(_ERROR_HANDLER, _ascii_fallback)


def encodes_unicode(stream: object) -> bool:
    """Whether `stream` writes any character as is (a UTF encoding)."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        return False
    return name.startswith("utf")


def prepare_streams() -> None:
    """Make stdout and stderr write every character: a stream whose encoding cannot hold one
    (`PYTHONIOENCODING=ascii`) writes our symbols in ASCII and the rest as escapes, instead of
    failing with UnicodeEncodeError after half a report (and after convert wrote OUT)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and not encodes_unicode(stream):
            reconfigure(errors=_ERROR_HANDLER)


# --- width ----------------------------------------------------------------------------------

DEFAULT_PIPE_WIDTH = 120  # piped output (a file, `less`, a CI log): lines as wide as this
MIN_WIDTH, MAX_WIDTH = 20, 1000


def columns_setting() -> int | None:
    """`COLUMNS` when it is a usable width (digits, 20 to 1000 after clamping); else None.
    `COLUMNS=abc` or `COLUMNS=` is ignored, as a shell would not have set it that way."""
    value = os.environ.get("COLUMNS", "").strip()
    if not value.isascii() or not value.isdigit():
        return None
    return min(max(int(value), MIN_WIDTH), MAX_WIDTH)


def stream_width(stream: object) -> int:
    """The width to lay out for: `COLUMNS` if usable, else the terminal's, else 120 for a pipe."""
    setting = columns_setting()
    if setting is not None:
        return setting
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        try:
            return min(max(os.get_terminal_size(stream.fileno()).columns, MIN_WIDTH), MAX_WIDTH)  # type: ignore[attr-defined]
        except (OSError, ValueError, AttributeError):
            return 80
    return DEFAULT_PIPE_WIDTH


def stdout_console(no_color: bool = False) -> Console:
    from rich.console import Console

    width = stream_width(sys.stdout)
    return Console(no_color=_no_color(no_color), highlight=False, width=width, soft_wrap=False)


def stderr_console(no_color: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=True, no_color=_no_color(no_color), highlight=False, width=stream_width(sys.stderr))


# Documents larger than this are written without indentation: json's indenting encoder is pure
# Python (a second per million values, e.g. a config's million layer ids), its compact one is C.
PRETTY_JSON_LIMIT = 1_000_000


def json_document_written() -> bool:
    """Whether this process has written its JSON document: a command writes exactly one, so an
    interrupt that lands after it (or a failure while it is being written) adds none."""
    return document_written()


def reset_documents() -> None:
    """A command starts: it has written no document yet (tests run many commands in one process)."""
    mark_document_written(False)


def write_json(document: Any) -> None:
    if document_written():
        return
    # A stream that cannot encode Unicode gets ASCII escapes, which parse back to the same text.
    ascii_only = not encodes_unicode(sys.stdout)
    text = json.dumps(document, ensure_ascii=ascii_only, allow_nan=False)
    if len(text) <= PRETTY_JSON_LIMIT:
        text = json.dumps(document, indent=2, ensure_ascii=ascii_only, allow_nan=False)
    # Also the only way to write a lone surrogate (not encodable as UTF-8) exactly.
    text = _JSON_ESCAPE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
    mark_document_written()
    with deferred_signals():  # an interrupt now would leave half a document
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def human_bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1000
    return f"{count} B"  # pragma: no cover


SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
