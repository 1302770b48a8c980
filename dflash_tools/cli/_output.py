"""Output sinks: JSON (one document via json.dumps, never through rich) or human (rich, stdout).

Logs, warnings and progress go to stderr. Every string that comes from a checkpoint (tensor
names, config values, Hub metadata) passes through `safe_text` before rich sees it, so escape
sequences and `[markup]` are shown inert.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any

# Declared with the options (which `--help` imports and which must not import rich); re-exported.
from dflash_tools.cli._options import OutputFormat as OutputFormat

if TYPE_CHECKING:
    from rich.console import Console

# rich is imported by the functions that print, not here: `main()` imports this module (through
# `_errors`) on every run, `--help` included, and rich's console costs a third of typer's start-up.

# C0/C1 controls, DEL, Unicode bidi / zero-width controls and line separators that can disguise
# text, and lone surrogates (legal as JSON escapes in a hostile file, unprintable as UTF-8).
_UNSAFE = re.compile(
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

    return _UNSAFE.sub(_escape, text)


def safe_text(value: Any) -> str:
    """Printable, markup-inert text: control characters become visible \\xNN / \\uNNNN escapes."""
    from rich.markup import escape

    return escape(printable(value))


def _no_color(flag: bool) -> bool:
    return flag or "NO_COLOR" in os.environ


def stdout_console(no_color: bool = False) -> Console:
    from rich.console import Console

    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "120"))
    return Console(no_color=_no_color(no_color), highlight=False, width=width, soft_wrap=False)


def stderr_console(no_color: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=True, no_color=_no_color(no_color), highlight=False)


# Documents larger than this are written without indentation: json's indenting encoder is pure
# Python (a second per million values, e.g. a config's million layer ids), its compact one is C.
PRETTY_JSON_LIMIT = 1_000_000


def write_json(document: Any) -> None:
    text = json.dumps(document, ensure_ascii=False, allow_nan=False)
    if len(text) <= PRETTY_JSON_LIMIT:
        text = json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False)
    # Also the only way to write a lone surrogate (not encodable as UTF-8) exactly.
    text = _JSON_ESCAPE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
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
