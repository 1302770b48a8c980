"""Width-aware human layout: nothing a user copies (identifier, number, path, command) is ever split.

Rich wraps table cells by folding words at the column edge, which cut source names, numbers and
finding codes into pieces at 80 columns. Here text is laid out by us, on the plain (unstyled)
string, breaking only at spaces and between ` · `-separated segments, and printed with
`soft_wrap=True` so rich neither wraps, crops nor pads it. A table is used only when every cell
fits on one line at the console's width; otherwise the same rows are printed as one block per
row. A single word wider than the console stays whole on its own line.

Command lines (fixes, launch lines) are printed to be pasted: broken between shell words with a
` \\` continuation when wider than the console (`command_lines`), never inside a word, so the
shell joins them back into exactly the same command; a word holding a control character is
written in bash's `$'...'` quoting, which is inert on the terminal and pastes as the same bytes.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from dflash_tools.cli._output import SEVERITY_STYLE, UNSAFE_TEXT, printable
from dflash_tools.cli._usage import PLACEHOLDERS

SEPARATOR = " · "
# Spaces inside `backtick` spans and [bracketed lists] are made unbreakable while wrapping, so a
# quoted command, a key or a shape such as [2, 4] never splits across lines; textwrap only breaks
# at ASCII whitespace.
_NBSP = "\xa0"
_QUOTED = re.compile(r"`[^`]*`|\[[^\[\]`]{0,60}\]")
# `K_max = 7`, `a → b`: a value stays on the line of the name it belongs to.
_BOUND = re.compile(r"(?<=\S) (=|→|×) (?=\S)")
# A hint's command: a backtick span that starts with our program name and has arguments. Its
# words may be shell-quoted ('a `b` c'), so a quoted word may hold a backtick.
_COMMAND = re.compile(
    r"`(dflash-tools\s+(?:inspect|convert|plan|smoke-test|examples)\s+(?:'[^']*'|\"(?:[^\"\\]|\\.)*\"|[^`'\"])+)`"
)


def console_width(console: Console) -> int:
    return max(20, console.width)


def unbroken(text: str) -> str:
    """`text` as one word for wrap_words: a phrase that reads wrong split, such as
    "(dry run: nothing written)"; wrap_words gives its spaces back."""
    return text.replace(" ", _NBSP)


def wrap_words(text: str, width: int, indent: str = "", first_indent: str | None = None) -> list[str]:
    """Lines of at most `width` columns, broken at spaces only (a longer word stays whole)."""
    protected = _QUOTED.sub(lambda m: m.group().replace(" ", _NBSP), text)
    protected = _BOUND.sub(lambda m: f"{_NBSP}{m.group(1)}{_NBSP}", protected)
    lines = textwrap.wrap(
        protected,
        width=max(width, 10),
        initial_indent=indent if first_indent is None else first_indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [line.replace(_NBSP, " ") for line in lines] or [indent if first_indent is None else first_indent]


def pack(segments: Sequence[str], width: int, first: str = "", indent: str = "") -> list[str]:
    """Join segments with ` · ` into lines of at most `width`; a segment is never split unless it
    alone is wider than a line, and then only at its spaces."""
    lines: list[str] = []
    current = first
    fresh = True  # nothing after the prefix on this line yet
    for segment in (s for s in segments if s):
        candidate = current + ("" if fresh else SEPARATOR) + segment
        if len(candidate) <= width or fresh and len(current) + len(segment) <= width:
            current, fresh = candidate, False
            continue
        if not fresh:
            lines.append(current)
            current, fresh = indent, True
        if len(current) + len(segment) <= width:
            current, fresh = current + segment, False
        else:
            wrapped = wrap_words(segment, width, indent=indent, first_indent=current)
            lines.extend(wrapped[:-1])
            current, fresh = wrapped[-1], False
    lines.append(current)
    return lines


def print_line(console: Console, text: str | Text, style: str | None = None) -> None:
    """One logical line as is: no wrapping, cropping or padding by rich."""
    console.print(text if isinstance(text, Text) else Text(text, style=style or ""), soft_wrap=True)


def key_values(console: Console, rows: Iterable[tuple[str, Sequence[str]]]) -> None:
    """`label  value · value` rows; continuation lines stay under the value column."""
    rows = [(label, segments) for label, segments in rows]
    if not rows:
        return
    label_width = max(len(label) for label, _ in rows) + 2
    width = console_width(console)
    for label, segments in rows:
        if segments and label_width + len(segments[0]) > width and " " not in segments[0]:
            # A path too long for the value column goes whole on a line of its own, unindented,
            # so it can be copied as one piece; the label stays above it.
            print_line(console, Text(label, style="bold"))
            print_line(console, Text(segments[0]))
            segments = segments[1:]
            if not segments:
                continue
            lines = pack(segments, width, first=" " * label_width, indent=" " * label_width)
        else:
            lines = pack(segments, width, first=label.ljust(label_width), indent=" " * label_width)
        for index, line in enumerate(lines):
            text = Text(line)
            if index == 0:
                text.stylize("bold", 0, len(label))
            print_line(console, text)


# --- findings and the commands that fix them -----------------------------------------------


@dataclass(frozen=True)
class Fix:
    number: int
    code: str
    command: str

    @property
    def placeholders(self) -> list[str]:
        """The words the user must replace before running it (`--block-size N`: N)."""
        return [word for word in shell_words(self.command) if word in PLACEHOLDERS]

    @property
    def complete(self) -> bool:
        """False for a template with a value the user must choose (`--block-size N`)."""
        return not self.placeholders


def hint_commands(hint: str) -> list[str]:
    """The runnable `dflash-tools …` commands quoted in a hint, one space between their words."""
    return [" ".join(shell_words(match.group(1))) for match in _COMMAND.finditer(hint)]


# --- command lines: words, quoting, continuation lines -------------------------------------


def shell_words(command: str) -> list[str]:
    """The words of a POSIX shell line as written (their quotes kept), split at unquoted blanks."""
    words: list[str] = []
    current: list[str] = []
    quote = ""
    index = 0
    while index < len(command):
        char = command[index]
        if quote == "'":
            current.append(char)
            if char == "'":
                quote = ""
        elif quote == '"':
            current.append(char)
            if char == "\\" and index + 1 < len(command):
                index += 1
                current.append(command[index])
            elif char == '"':
                quote = ""
        elif char == "\\" and index + 1 < len(command):
            current += [char, command[index + 1]]
            index += 1
        elif char in " \t\n":
            if current:
                words.append("".join(current))
                current = []
        else:
            if char in "'\"":
                quote = char
            current.append(char)
        index += 1
    if current:
        words.append("".join(current))
    return words


def ansi_c_quoted(value: str) -> str:
    """`value` in bash's `$'...'` quoting: every control character as an escape, so the word is
    inert on a terminal and a paste gives the program exactly `value` (bash, zsh, ksh)."""
    out = []
    for char in value:
        code = ord(char)
        if char in "\\'":
            out.append("\\" + char)
        elif 0xDC80 <= code <= 0xDCFF:  # a byte of a file name that is not UTF-8 (surrogateescape)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif UNSAFE_TEXT.fullmatch(char):
            out.append(f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "$'" + "".join(out) + "'"


def displayed_word(word: str) -> str:
    """A shell word as printed: as written, or `$'...'` when it holds a character that is unsafe
    on a terminal (a path with an escape sequence or a newline in its name)."""
    if not UNSAFE_TEXT.search(word):
        return word
    import shlex

    try:
        values = shlex.split(word)
    except ValueError:
        return printable(word)
    return ansi_c_quoted(values[0]) if len(values) == 1 else printable(word)


CONTINUATION = " \\"
CONTINUATION_INDENT = "    "


def command_lines(command: str, width: int) -> list[str]:
    """`command` as lines of at most `width` columns that paste as one command: broken between
    words, each line but the last ending in ` \\`, the next indented; never inside a word (one
    wider than a line stands alone on its own line). One line when it fits."""
    words = [displayed_word(word) for word in shell_words(command)]
    if not words:
        return [""]
    if len(" ".join(words)) <= width:
        return [" ".join(words)]
    # An option and its value stay on one line when they fit (`-o ./out`, `--max-model-len 4096`).
    units: list[list[str]] = []
    for word in words:
        previous = units[-1] if units else None
        if (
            previous is not None
            and len(previous) == 1
            and previous[0].startswith("-")
            and "=" not in previous[0]
            and not word.startswith("-")
        ):
            previous.append(word)
        else:
            units.append([word])
    room = width - len(CONTINUATION_INDENT) - len(CONTINUATION)
    pieces = [piece for unit in units for piece in ([" ".join(unit)] if len(" ".join(unit)) <= room else unit)]
    lines: list[str] = []
    current = pieces[0]
    for piece in pieces[1:]:
        if len(current) + 1 + len(piece) + len(CONTINUATION) <= width:
            current += " " + piece
            continue
        lines.append(current + CONTINUATION)
        current = CONTINUATION_INDENT + piece
    lines.append(current)
    return lines


def print_command(console: Console, command: str, *, commented: bool = False) -> None:
    """A command whole and pasteable at the console's width (`command_lines`); `commented`
    prints every line after `# `, for a line shown but not to be run as it is."""
    width = console_width(console) - (2 if commented else 0)
    for line in command_lines(command, width):
        print_line(console, ("# " + line) if commented else line, style="dim" if commented else None)


def print_comment(console: Console, text: str, style: str = "dim") -> None:
    """A `# ...` note, wrapped at words, every line a shell comment."""
    for line in wrap_words(text, console_width(console), "#   ", first_indent="# "):
        print_line(console, line, style=style)


def print_findings(console: Console, findings: Sequence[dict[str, object]], fixes: list[Fix]) -> None:
    """Findings as `CODE severity  message` blocks; each command in a hint becomes a numbered fix,
    printed whole on its own line by `print_fixes`."""
    width = console_width(console)
    head_width = 16  # a six-character code, a space, the longest severity ("warning"), two spaces
    indent = " " * head_width
    for finding in findings:
        code = printable(finding["code"])
        severity = str(finding["severity"])
        head = f"{code} {severity}".ljust(head_width)
        for index, line in enumerate(wrap_words(printable(finding["message"]), width, indent, first_indent=head)):
            text = Text(line)
            if index == 0:
                text.stylize(SEVERITY_STYLE.get(severity, ""), 0, len(code) + 1 + len(severity))
            print_line(console, text)
        raw_hint = str(finding.get("hint") or "")
        if not raw_hint:
            continue

        def number_of(text: str, code: str = code) -> str:
            command = " ".join(shell_words(text))
            for index, fix in enumerate(fixes):
                if fix.command == command:
                    if code not in fix.code.split(", "):
                        fixes[index] = replace(fix, code=f"{fix.code}, {code}")
                    return f"fix {fix.number} below"
                merged = merge_convert_commands(fix.command, command)
                if merged is not None:
                    fixes[index] = replace(fix, code=f"{fix.code}, {code}", command=merged)
                    return f"fix {fix.number} below"
            fixes.append(Fix(len(fixes) + 1, code, command))
            return f"fix {len(fixes)} below"

        # The commands are taken from the hint as written (their words exact), the rest made printable.
        parts = _COMMAND.split(raw_hint)
        hint = "".join(number_of(part, code) if index % 2 else printable(part) for index, part in enumerate(parts))
        for line in wrap_words("→ " + hint, width, indent + "  ", first_indent=indent):
            print_line(console, line, style="dim")


def merge_convert_commands(first: str, second: str) -> str | None:
    """One `convert SRC -o OUT` with both commands' flags, or None when they cannot be one.

    Two findings often suggest a convert of the same source into the same folder with different
    flags; pasted one after the other, the second would stop at "OUT exists". Their flags only add
    to each other (each names a value convert writes), so the union is the command to run, unless
    one flag's `--no-` form stands in the other command."""
    first_words, second_words = shell_words(first), shell_words(second)
    base = 5  # dflash-tools convert SRC -o OUT
    if len(first_words) < base or first_words[:2] != ["dflash-tools", "convert"]:
        return None
    if first_words[:base] != second_words[:base] or first_words[3] != "-o":
        return None
    first_flags, second_flags = first_words[base:], second_words[base:]
    if any(not word.startswith("--") for word in first_flags + second_flags):
        return None  # a flag with a value (`--block-size N`): keep such commands apart
    names = {word.removeprefix("--no-").removeprefix("--") for word in first_flags}
    extra = [word for word in second_flags if word not in first_flags]
    if any(word.removeprefix("--no-").removeprefix("--") in names for word in extra):
        return None  # --sample-from-anchor against --no-sample-from-anchor: the user must choose
    return " ".join(first_words + extra)


def print_fixes(console: Console, fixes: Sequence[Fix]) -> None:
    """Each fix as a shell command, whole (`print_command`), after a `#` comment saying what it is
    for and naming any placeholder to replace."""
    if not fixes:
        return
    print_line(console, "fix (copy a command line and run it):", style="bold")
    for fix in fixes:
        placeholders = fix.placeholders
        note = f": replace {', '.join(dict.fromkeys(placeholders))} first" if placeholders else ""
        print_comment(console, f"fix {fix.number} ({fix.code}){note}")
        print_command(console, fix.command)


# --- tables that become blocks when they do not fit ----------------------------------------


def print_unpadded(console: Console, renderable: Table) -> None:
    """Rich pads every cell to its column's width; drop the blanks at the end of each line so
    piped output carries no trailing spaces."""
    for line in console.render_lines(renderable, pad=False):
        while line and line[-1].text.strip() == "" and not line[-1].control:
            line.pop()
        if line:
            last = line[-1]
            line[-1] = Segment(last.text.rstrip(" "), last.style, last.control)
        line.append(Segment.line())
        console.print(Segments(line), soft_wrap=True, end="")


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[str | Text]], *, title: str | None = None) -> Table:
    """The house table: a header rule, no borders, cells never wrapped."""
    table = Table(
        title=title,
        title_justify="left",
        show_header=True,
        header_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for column in columns:
        table.add_column(column, no_wrap=True)
    for row in rows:
        # Text, never str: a str cell would be parsed as rich markup (`[flipped: ...]` vanishes).
        table.add_row(*(cell if isinstance(cell, Text) else Text(cell) for cell in row))
    return table


def fits(console: Console, table: Table) -> bool:
    """Whether every cell of `table` fits on one line at the console's width."""
    return Measurement.get(console, console.options.update(width=10_000), table).maximum <= console_width(console)


def table_or_blocks(
    console: Console,
    columns: Sequence[str],
    rows: Sequence[Sequence[str | Text]],
    *,
    title: str | None = None,
    heading_status: Sequence[Text | None] | None = None,
) -> None:
    """A bordered table when every cell fits on one line at this width; else one block per row:
    the first cell as a heading (with its status, if given), then `column value` segments."""
    table = plain_table(columns, rows, title=title)
    width = console_width(console)
    if fits(console, table):
        print_unpadded(console, table)
        return
    if title:
        print_line(console, title, style="bold")
    for index, row in enumerate(rows):
        head = row[0].copy() if isinstance(row[0], Text) else Text(row[0], style="bold")
        status = heading_status[index] if heading_status else None
        if status is not None:
            head.append("  ")
            head.append_text(status)
        print_line(console, head)
        segments = []
        for column, cell in zip(columns[1:], row[1:], strict=True):
            if heading_status and cell is heading_status[index]:
                continue  # already on the heading line
            plain = cell.plain if isinstance(cell, Text) else cell
            if plain.strip() and plain != "-":
                segments.append(f"{column} {plain}" if column else plain)
        for line in pack(segments, width, first="  ", indent="  "):
            print_line(console, line)
