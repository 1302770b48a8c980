"""Help pages that read well at 80 columns and cost almost nothing to build.

typer's plain help (`rich_markup_mode=None`) wraps with a text wrapper that breaks words at
hyphens (`anchor-` / `first`), rewraps example commands (`--format` / `json`) and shows Python
types as metavars (`<str>`, `<int range>`); typer's rich help groups options into panels but
imports rich's whole rendering stack on every `--help` (about 0.1 s of CPU, more than typer
itself: bench/bench_startup.py). So the page is laid out here, by the command classes typer takes
as `cls=` (its documented way to customize a command), and nothing here imports rich:

- prose paragraphs wrap at spaces only, never inside a word;
- a paragraph whose lines are indented in the source (example commands, lists) is printed as
  written, never rewrapped: keep each such line under 76 columns and continue a long command
  with ` \\` (tests/cli/test_help.py checks every page at 80 columns);
- options are grouped under their `rich_help_panel=` (typer's own option attribute; the panel
  names are in `_options.Panel`), panels in the order they first appear, the rest under
  "Options";
- metavars say what to type: TEXT, INTEGER, FLOAT, PATH, or the choices as `[a|b]`;
- engine release names come from the engine tables (`expand`), never from a literal here.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

import typer.core

# typer's display of a parameter's type, e.g. `<int range>`, `<list[str]>`, `<human|json>`.
_TYPE_DISPLAY = re.compile(r"<([^<>]+)>")
_TYPE_NAMES = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "path": "PATH", "Path": "PATH", "bool": "BOOLEAN"}
TERM_COLUMN = 30  # the widest option column; longer ones put their help on the next line
# typer's `  [default: 10.0; x>=0.1]` after an option's help; _NBSP keeps each item whole.
_EXTRAS = re.compile(r"  (\[[^\[\]]*\])$")
_NBSP = "\xa0"


# Markers a help text may hold, filled from the engine tables (`dflash_tools.engine_rules`).
RELEASE_MARKERS = ("{releases}", "{newest}", "{newest_vllm}")


def expand(text: str) -> str:
    """A help text with its release markers filled: `{releases}` every table (`vllm==X.Y.Z`, ...),
    `{newest}` each engine named alone for its newest table (`vllm` alone is the installed one),
    `{newest_vllm}` the newest vLLM table. The tables are imported only for a page that shows
    one (a few milliseconds: the root page and most commands do without)."""
    if not any(marker in text for marker in RELEASE_MARKERS):
        return text
    from dflash_tools.engine_rules import ENGINE_RULES, latest

    engines = sorted({rules.engine for rules in ENGINE_RULES.values()} - {"vllm"})
    newest_vllm = latest("vllm")
    values = {
        "{releases}": ", ".join(ENGINE_RULES),
        "{newest}": ", ".join(f"{engine} (its newest table)" for engine in engines),
        "{newest_vllm}": newest_vllm.spec if newest_vllm is not None else "vllm",
    }
    for marker, value in values.items():
        text = text.replace(marker, value)
    return text


def metavar(display: str) -> str:
    """`int range` -> INTEGER, `list[str]` -> TEXT, `human|json` -> [human|json]."""
    name = display.removeprefix("list[").removesuffix("]") if display.startswith("list[") else display
    if "|" in name:
        return f"[{name}]"
    name = name.removesuffix(" range")
    return _TYPE_NAMES.get(name, name.upper())


def _term(record: str) -> str:
    return _TYPE_DISPLAY.sub(lambda match: metavar(match.group(1)), record)


def wrap(text: str, width: int) -> list[str]:
    """Lines of at most `width` columns, broken at spaces only (a longer word stays whole)."""
    return textwrap.wrap(text, width=max(width, 20), break_long_words=False, break_on_hyphens=False) or [""]


def write_text(formatter: Any, text: str) -> None:
    """Paragraphs separated by blank lines: prose is rewrapped at spaces, indented blocks kept."""
    indent = " " * formatter.current_indent
    width = formatter.width - formatter.current_indent
    for number, paragraph in enumerate(inspect.cleandoc(text).split("\n\n")):
        if number:
            formatter.write("\n")
        lines = paragraph.split("\n")
        if lines[0][:1].isspace():
            # An example command or a list: as written (a shell line must stay pasteable).
            for line in lines:
                formatter.write(f"{indent}{line.rstrip()}\n")
            continue
        for line in wrap(" ".join(line.strip() for line in lines), width):
            formatter.write(f"{indent}{line}\n")


def write_definitions(formatter: Any, rows: Sequence[tuple[str, str]], column: int | None = None) -> None:
    """`term  help` rows; a term too wide for the column puts its help on the next line."""
    if not rows:
        return
    indent = " " * formatter.current_indent
    column = column or term_column(rows)
    width = formatter.width - formatter.current_indent - column
    for term, help_text in rows:
        lines = wrap(_bind_extras(help_text), width) if help_text else [""]
        lines = [line.replace(_NBSP, " ") for line in lines]
        if len(term) + 2 <= column:
            formatter.write(f"{indent}{term.ljust(column)}{lines[0]}".rstrip() + "\n")
            lines = lines[1:]
        else:
            formatter.write(f"{indent}{term}\n")
        for line in lines:
            formatter.write(f"{indent}{' ' * column}{line}\n")


def term_column(rows: Iterable[tuple[str, str]]) -> int:
    """The help column: after the widest term that fits in TERM_COLUMN, plus two spaces."""
    widths = [len(term) for term, _ in rows if len(term) <= TERM_COLUMN]
    return max(widths, default=TERM_COLUMN) + 2


def _bind_extras(help_text: str) -> str:
    """`[env var: X; default: y]` wraps between its items, never inside one."""
    match = _EXTRAS.search(help_text)
    if match is None:
        return help_text
    return help_text[: match.start(1)] + match.group(1).replace(" ", _NBSP).replace(";" + _NBSP, "; ")


def _option_sections(command: Any, ctx: Any) -> list[tuple[str, list[tuple[str, str]]]]:
    arguments: list[tuple[str, str]] = []
    panels: dict[str, list[tuple[str, str]]] = {}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        if param.param_type_name == "argument":
            # An argument is its metavar (SOURCE); typer appends the type, which says nothing more.
            arguments.append((_TYPE_DISPLAY.sub("", record[0]).strip(), expand(record[1])))
            continue
        row = (_term(record[0]), expand(record[1]))
        panels.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(row)
    sections = [("Arguments", arguments)] if arguments else []
    # Options without a panel (--help, the root's --version) come last, after the command's own.
    general = panels.pop("Options", [])
    return sections + list(panels.items()) + ([("Options", general)] if general else [])


def _write_sections(formatter: Any, sections: Sequence[tuple[str, list[tuple[str, str]]]]) -> None:
    # One help column for the whole page, so the sections line up.
    column = term_column(row for _, rows in sections for row in rows)
    for name, rows in sections:
        with formatter.section(name):
            write_definitions(formatter, rows, column)


class _Layout:
    """The help text, options and epilog of a page, laid out by the rules above."""

    help: str | None
    epilog: str | None

    def format_help_text(self, ctx: Any, formatter: Any) -> None:
        if self.help:
            formatter.write_paragraph()
            with formatter.indentation():
                write_text(formatter, expand(self.help))

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _write_sections(formatter, _option_sections(self, ctx))

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        if self.epilog:
            formatter.write_paragraph()
            with formatter.indentation():
                write_text(formatter, self.epilog)


class Command(_Layout, typer.core.TyperCommand):
    """A command whose help page follows the rules in this module's docstring."""


class Group(_Layout, typer.core.TyperGroup):
    """The root command: the same layout, then one line per command."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        _write_sections(formatter, [*_option_sections(self, ctx), ("Commands", rows)])
