"""The shell blocks of README.md and docs/*.md, and the ones marked as not run by the tests.

Rules (docs/development.md, "Documented commands"): every fenced block has a language; a block
in bash, sh, shell or console is a list of commands that tests/docs/test_doc_commands.py runs,
unless the line before its opening fence is a mark

    <!-- not-run: REASON -->
    <!-- not-run: REASON free text saying more -->

with REASON one of `REASONS`. The marked blocks are listed in docs/not-run.md, which this module
writes:

    python -m tests.docs.doc_blocks --write     # regenerate docs/not-run.md
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_RUN_LIST = ROOT / "docs" / "not-run.md"
SHELL = {"bash", "sh", "shell", "console"}
REASONS = {
    "gpu": "needs a GPU (and vLLM on it)",
    "server": "needs a running vLLM server",
    "tier": "needs a real-engine tier's virtual environment (built from PyPI by .ci/tier-*.sh; CI runs them)",
    "network": "downloads from PyPI or another package index",
    "install": "installs dflash-tools: tests/docs/test_install.py runs each line offline (in a fresh clone)",
    "long": "takes minutes: run by hand; its quick mode runs in CI (tests/bench/test_bench_quick.py)",
    "hub": "reaches the real Hugging Face Hub (a write, or a repo the test Hub does not stand in for)",
    "repo": "rewrites files of this repository (a maintenance command)",
}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
_MARK = re.compile(r"^<!--\s*not-run:\s*(?P<reason>[\w-]+)(?P<why>[^>]*?)\s*-->$")
_HEADING = re.compile(r"^#+\s+(.*)$", re.M)


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository root
    line: int  # of the opening fence
    section: str  # the heading above it: a stable place name for the list
    language: str
    body: str
    not_run: str | None  # the REASON of a `<!-- not-run: REASON -->` mark
    why: str  # its free text

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def shell(self) -> bool:
        return self.language in SHELL

    def commands(self) -> list[str]:
        """One entry per command: `\\`-continued lines joined, blank and comment-only lines dropped."""
        joined, current = [], ""
        for line in self.body.splitlines():
            if current:
                current += " " + line.strip()
            else:
                current = line.strip()
            if current.endswith("\\"):
                current = current[:-1].rstrip()
                continue
            if current and not current.startswith("#"):
                joined.append(current)
            current = ""
        if current:
            joined.append(current)
        return joined


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(paths: list[Path] | None = None) -> list[Block]:
    found = []
    for path in paths or documents():
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
            mark = _MARK.match(before)
            headings = _HEADING.findall(text[: match.start()])
            found.append(
                Block(
                    file=path.relative_to(ROOT).as_posix(),
                    line=text.count("\n", 0, match.start()) + 1,
                    section=headings[-1].strip() if headings else "",
                    language=match.group("info").strip().split(" ")[0],
                    body=match.group("body"),
                    not_run=mark.group("reason") if mark else None,
                    why=mark.group("why").strip() if mark else "",
                )
            )
    return found


def not_run_list(found: list[Block] | None = None) -> str:
    """docs/not-run.md: every marked block, by file and section (line numbers would go stale)."""
    rows = []
    for block in found if found is not None else blocks():
        if block.not_run is None:
            continue
        reason = REASONS.get(block.not_run, "UNKNOWN REASON")
        why = f" ({block.why})" if block.why else ""
        commands = "<br>".join(f"`{_code(c)}`" for c in block.commands())
        rows.append(f"| {block.file} § {block.section} | **{block.not_run}**: {reason}{why} | {commands} |")
    return (
        "# Documented commands the tests do not run\n\n"
        "Every shell block in README.md and docs/ is run by `tests/docs/test_doc_commands.py` (in a scratch\n"
        "folder, offline, with placeholders filled by bundled examples), except the blocks below, each\n"
        "marked `<!-- not-run: REASON -->` where it stands ([development.md](development.md#documented-commands)).\n"
        "This page is generated: `python -m tests.docs.doc_blocks --write`.\n\n"
        "| where | why not | commands |\n"
        "|---|---|---|\n" + "\n".join(rows) + "\n"
    )


def _code(command: str) -> str:
    """A command without its trailing comment, safe inside a table cell."""
    return command.split(" # ", 1)[0].rstrip().replace("|", "&#124;")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.docs.doc_blocks", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {NOT_RUN_LIST.relative_to(ROOT)}")
    args = parser.parse_args()
    text = not_run_list()
    if args.write:
        NOT_RUN_LIST.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
