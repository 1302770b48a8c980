"""`dflash-tools explain`, run: one finding code, or the whole catalogue (options: `explain_cmd`).

The text is the catalogue's (`dflash_tools.findings`: `CodeInfo.condition` and `.action`), the
one source docs/findings.md is rendered from, so the command and the page never disagree and the
command works where the docs are not at hand (an installed wheel).
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Any

from rich.text import Text

from dflash_tools.cli._errors import handle_errors
from dflash_tools.cli._layout import console_width, print_line, wrap_words
from dflash_tools.cli._output import SEVERITY_STYLE, OutputFormat, stdout_console, write_json
from dflash_tools.errors import UsageError
from dflash_tools.findings import CATALOGUE, CodeInfo

if TYPE_CHECKING:
    from dflash_tools.cli.explain_cmd import ExplainArgs

SCHEMA_VERSION = 1

# `[text](page.md#anchor)` in the catalogue's markdown: the text, then where it is in docs/.
_LINK = re.compile(r"\[([^\]]+)\]\(([^)]+)\)")


def plain(markdown: str) -> str:
    """The catalogue's markdown as a terminal shows it: links as `text (docs/page.md)`, no backticks."""
    text = _LINK.sub(
        lambda m: m.group(1) if m.group(1).endswith(".md") else f"{m.group(1)} (docs/{m.group(2)})", markdown
    )
    text = re.sub(r"(?<![\w/-])([\w-]+\.md)\b", r"docs/\1", text)
    return text.replace("docs/docs/", "docs/").replace("`", "")


def find_code(text: str) -> CodeInfo:
    """DFT071, dft071, 71 or 071; UsageError naming the closest codes otherwise."""
    wanted = text.strip().upper()
    if wanted.isdigit():
        wanted = f"DFT{int(wanted):03d}"
    if wanted in CATALOGUE:
        return CATALOGUE[wanted]
    close = difflib.get_close_matches(wanted, list(CATALOGUE), n=3, cutoff=0.6)
    raise UsageError(
        f"no finding code {text!r}",
        (f"did you mean {' or '.join(close)}? " if close else "") + "`dflash-tools explain` lists them all",
    )


# Not a declaration: a catalogue entry as `explain` prints it, its texts made plain for the terminal.
def to_dict(info: CodeInfo) -> dict[str, Any]:
    return {
        "code": info.code,
        "severity": info.severity.value,
        "title": info.title,
        "condition": plain(info.condition),
        "action": plain(info.action),
    }


def run(args: ExplainArgs) -> None:
    """Run `dflash-tools explain` with the options `explain_cmd` parsed."""
    fmt = OutputFormat.JSON if args.json_flag else args.output_format
    with handle_errors("explain", json_output=fmt is OutputFormat.JSON, source=args.code):
        infos = [find_code(args.code)] if args.code is not None else list(CATALOGUE.values())
        if fmt is OutputFormat.JSON:
            write_json(
                {
                    "schema_version": SCHEMA_VERSION,
                    "command": "explain",
                    "ok": True,
                    "exit_code": 0,
                    "findings": [to_dict(info) for info in infos],
                }
            )
            return
        console = stdout_console(args.no_color)
        width = console_width(console)
        if args.code is None:
            for info in infos:
                # The title starts in column 16 (code, severity) and continues there.
                lines = wrap_words(info.title, width, " " * 15, first_indent=" " * 15)
                severity = (f"{info.severity.value:<7}", SEVERITY_STYLE[info.severity.value])
                print_line(console, Text.assemble((info.code, "bold"), " ", severity, " ", lines[0].lstrip()))
                for line in lines[1:]:
                    print_line(console, line)
            print_line(console, "dflash-tools explain CODE: when a code is raised and what to do about it")
            return
        info = infos[0]
        lines = wrap_words(f"{info.code} {info.severity.value}: {info.title}", width, "  ", first_indent="")
        head = Text(lines[0])
        head.stylize("bold", 0, len(info.code))
        head.stylize(
            SEVERITY_STYLE[info.severity.value], len(info.code) + 1, len(info.code) + 1 + len(info.severity.value)
        )
        print_line(console, head)
        for line in lines[1:]:
            print_line(console, line)
        for label, text in (("when", info.condition), ("what to do", info.action)):
            for line in wrap_words(f"{label}: {plain(text)}", width, "  ", first_indent=""):
                print_line(console, line)
        print_line(console, "all codes: dflash-tools explain, or docs/findings.md")
