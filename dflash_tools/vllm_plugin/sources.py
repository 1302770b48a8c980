"""Read vLLM's source files without importing vLLM, and cut single functions out of them.

The same code reads an installed vLLM through its package folder, for the launcher (without
importing it) and inside the plugin, so the fingerprint that the plugin checks at runtime is the
one the real-vLLM tier checks against the installed release.
Paths are POSIX paths relative to the folder that holds the `vllm` package, e.g.
`vllm/config/vllm.py`.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import importlib.util
import os
import stat
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

SourceReader = Callable[[str], str | None]
"""Relative path -> file text, or None when the file does not exist."""


# vLLM's largest source file is a few hundred kilobytes; a "source" beyond this is not one.
MAX_SOURCE_BYTES = 8 * 1024 * 1024


class DirectoryReader:
    """Files under `root`, the folder that contains the `vllm` package (site-packages).

    Only regular files are read (a FIFO would block the read forever, a link to /dev/zero would
    fill memory), at most MAX_SOURCE_BYTES of each, and bytes that are not UTF-8 are decoded as
    U+FFFD (the fingerprint then simply does not match). A file that exists but cannot be read
    is answered as absent (None) and recorded in `problems`, one line per file, for the caller
    to report. Nothing here raises for what is on disk: this runs inside vLLM's processes too.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.problems: dict[str, str] = {}

    def __call__(self, relative: str) -> str | None:
        path = self.root.joinpath(*PurePosixPath(relative).parts)
        try:
            data = _read_regular_file(path)
        except FileNotFoundError:
            return None
        except _Unreadable as exc:
            self.problems[relative] = str(exc)
            return None
        except OSError as exc:
            if isinstance(exc, NotADirectoryError) or exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return None
            self.problems[relative] = exc.strerror or type(exc).__name__
            return None
        return data.decode("utf-8", errors="replace")


class _Unreadable(Exception):
    """A path that exists but is not something to read as a source file."""


def _read_regular_file(path: Path) -> bytes:
    # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat on the open file then refuses
    # anything but a regular file, whatever the path pointed at when it was checked.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise _Unreadable("a folder, not a file") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _Unreadable(f"not a regular file ({_file_kind(mode)})")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as handle:
            fd = -1
            data = handle.read(MAX_SOURCE_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_SOURCE_BYTES:
        raise _Unreadable(f"larger than {MAX_SOURCE_BYTES // (1024 * 1024)} MiB, not a source file")
    return data


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a file"


def directory_reader(root: Path) -> DirectoryReader:
    """A reader of the source files under `root` (see DirectoryReader)."""
    return DirectoryReader(root)


def installed_package_root(package: str = "vllm") -> Path | None:
    """The folder holding `package`, found without importing it (None when not installed)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


@dataclass(frozen=True)
class FunctionSource:
    """One function's text as it stands in a file, and where."""

    qualname: str
    text: str
    first_line: int  # the first decorator's line, else the `def` line (1-based), as in co_firstlineno
    def_line: int
    last_line: int

    @property
    def sha256(self) -> str:
        return hashlib.sha256(normalize(self.text).encode("utf-8")).hexdigest()


def normalize(text: str) -> str:
    """Dedented, trailing whitespace stripped: indentation of the class must not matter."""
    lines = [line.rstrip() for line in textwrap.dedent(text).strip("\n").splitlines()]
    return "\n".join(lines) + "\n"


def find_function(module_text: str, qualname: str) -> FunctionSource | None:
    """`Class.method` or `function` (property getters by their name) from a module's text."""
    try:
        tree = ast.parse(module_text)
    except SyntaxError:
        return None
    parts = qualname.split(".")
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        found: ast.AST | None = None
        for stmt in body:
            if last and isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == part:
                found = stmt
                # A property setter after the getter has the same name; the getter comes first.
                break
            if not last and isinstance(stmt, ast.ClassDef) and stmt.name == part:
                found = stmt
                break
        if found is None:
            return None
        node = found
        if not last:
            assert isinstance(found, ast.ClassDef)
            body = found.body
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    lines = module_text.splitlines()
    end = node.end_lineno or node.lineno
    text = "\n".join(lines[node.lineno - 1 : end])
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return FunctionSource(qualname=qualname, text=text, first_line=first, def_line=node.lineno, last_line=end)
