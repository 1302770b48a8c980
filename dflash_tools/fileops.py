"""Safe file writing: atomic single files, faithful JSON rewrites, staged folders, weight links.

Every write goes to a temporary file in the destination folder and is renamed over the target, so a
reader (or a crash) sees the old file or the new one, never half of one. `os.replace` replaces a
symlink itself, never what it points to, which is what keeps Hugging Face cache blobs safe.

Rewritten JSON files keep the bytes of every value that did not change: key order, indentation,
number spelling, inline lists. Only the members that changed are re-serialized, in the file's
own style, so a normalization shows up as a minimal diff.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

# --------------------------------------------------------------------------------------------
# Atomic single-file writes
# --------------------------------------------------------------------------------------------


def current_umask() -> int:
    # os.umask can only be read by setting it; restore at once (single-threaded CLI use).
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_dir(folder: Path) -> None:
    """Make a rename inside `folder` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[IO[bytes]], object], *, mode: int | None = None) -> None:
    """Write `path` through `write(handle)` into a temporary sibling, fsync, then replace.

    The file mode is `mode`, else that of the file being replaced, else 0o666 minus the umask
    (mkstemp alone would leave 0600). On any failure, including KeyboardInterrupt, the temporary
    file is removed and the target is untouched.
    """
    path = Path(path)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~current_umask()
    with naming_the_file(path):
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with naming_the_file(path), os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.chmod(mode)
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


@contextlib.contextmanager
def naming_the_file(path: Path) -> Iterator[None]:
    """Give an OSError raised while writing `path` that file's name, if it has none.

    A failed write() or fsync() (ENOSPC, EDQUOT, EIO) carries no file name, so the one-line
    error would say "No space left on device" without saying where.
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def atomic_write_bytes(path: Path, data: bytes, *, mode: int | None = None) -> None:
    atomic_write(path, lambda handle: handle.write(data), mode=mode)


def atomic_write_text(path: Path, text: str, *, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


# --------------------------------------------------------------------------------------------
# JSON that keeps the file's own bytes for everything that did not change
# --------------------------------------------------------------------------------------------

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# A \uXXXX escape of a non-ASCII code point: the file was written with ensure_ascii=True.
_NON_ASCII_ESCAPE = re.compile(r"\\u(?:00[89a-fA-F][0-9a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3})")


@dataclass
class _Node:
    """A parsed JSON value and where its text lies in the source."""

    kind: str  # "object" | "array" | "scalar"
    start: int
    end: int
    value: Any
    # object: (key, key text span, value node) per member, in file order
    members: list[tuple[str, tuple[int, int], _Node]] = field(default_factory=list)
    items: list[_Node] = field(default_factory=list)
    # This container, or one inside it, repeats a key: its text is never reused as a whole,
    # so a rewrite keeps one copy of each key (the last, which is what Python's json reads).
    repeats_key: bool = False


def _skip(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    return match.end() if match else pos


def _parse(text: str, pos: int) -> _Node:
    pos = _skip(text, pos)
    char = text[pos : pos + 1]
    if char == "{":
        node = _Node("object", pos, pos, {})
        pos = _skip(text, pos + 1)
        if text[pos : pos + 1] == "}":
            node.end = pos + 1
            return node
        while True:
            if text[pos : pos + 1] != '"':
                raise ValueError(f"expected a key at offset {pos}")
            key, key_end = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
            key_span = (pos, key_end)
            pos = _skip(text, key_end)
            if text[pos : pos + 1] != ":":
                raise ValueError(f"expected ':' at offset {pos}")
            child = _parse(text, pos + 1)
            if key in node.value or child.repeats_key:
                node.repeats_key = True
            node.members.append((key, key_span, child))
            node.value[key] = child.value
            pos = _skip(text, child.end)
            if text[pos : pos + 1] == ",":
                pos = _skip(text, pos + 1)
                continue
            if text[pos : pos + 1] == "}":
                node.end = pos + 1
                return node
            raise ValueError(f"expected ',' or '}}' at offset {pos}")
    if char == "[":
        node = _Node("array", pos, pos, [])
        pos = _skip(text, pos + 1)
        if text[pos : pos + 1] == "]":
            node.end = pos + 1
            return node
        while True:
            child = _parse(text, pos)
            node.repeats_key = node.repeats_key or child.repeats_key
            node.items.append(child)
            node.value.append(child.value)
            pos = _skip(text, child.end)
            if text[pos : pos + 1] == ",":
                pos = _skip(text, pos + 1)
                continue
            if text[pos : pos + 1] == "]":
                node.end = pos + 1
                return node
            raise ValueError(f"expected ',' or ']' at offset {pos}")
    value, end = _DECODER.raw_decode(text, pos)
    return _Node("scalar", pos, end, value)


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON text would be: 1, 1.0 and true are different values here."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


@dataclass(frozen=True)
class JsonStyle:
    """How a file writes JSON: indent unit (None = one line), separators, escaping."""

    indent: str | None = "  "
    key_separator: str = ": "
    item_separator: str = ","
    ensure_ascii: bool = False
    trailing: str = "\n"
    # "\r\n" for a file written on Windows: new lines inside the document match the old ones.
    newline: str = "\n"


def detect_style(text: str) -> JsonStyle:
    """The style of an existing JSON document (defaults: 2 spaces, ': ', UTF-8, final newline)."""
    try:
        root = _parse(text, 0)
    except (ValueError, IndexError):
        return JsonStyle()
    ensure_ascii = bool(_NON_ASCII_ESCAPE.search(text)) and all(ord(c) < 128 for c in text)
    trailing = text[root.end :]
    indent: str | None = "  "
    key_separator, item_separator = ": ", ","
    if root.kind == "object" and root.members:
        _, (_, key_end), first = root.members[0]
        key_separator = text[key_end : first.start]
        lead = text[root.start + 1 : root.members[0][1][0]]
        if "\n" in lead:
            indent = lead.rsplit("\n", 1)[1]
            item_separator = ","
        else:
            indent = None
            if len(root.members) > 1:
                item_separator = text[first.end : root.members[1][1][0]]
            else:
                item_separator = ", " if key_separator.endswith(" ") else ","
    newline = "\r\n" if "\r\n" in text[root.start : root.end] else "\n"
    return JsonStyle(indent, key_separator or ": ", item_separator, ensure_ascii, trailing, newline)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogates(text: str) -> str:
    """Lone surrogates as \\uXXXX escapes: the file said them that way, and UTF-8 cannot carry them.

    json.dumps(ensure_ascii=False) leaves them raw; they can only occur inside JSON strings, so
    escaping them there keeps the value and makes the text encodable.
    """
    return _LONE_SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _dumps(value: Any, style: JsonStyle, **options: Any) -> str:
    return _escape_surrogates(json.dumps(value, ensure_ascii=style.ensure_ascii, allow_nan=True, **options))


def _fresh(value: Any, style: JsonStyle, base_indent: str | None) -> str:
    """A value that did not exist in the file, written in the file's style at this depth."""
    if style.indent is None or base_indent is None:
        return _dumps(value, style, separators=(style.item_separator, style.key_separator))
    text = _dumps(value, style, indent=style.indent, separators=(",", style.key_separator))
    return text.replace("\n", style.newline + base_indent)


def _inline_separators(node: _Node, text: str, style: JsonStyle) -> tuple[str, str]:
    """Item and key separators of a container the file wrote on one line."""
    # A pretty-printed file's one-line containers read `[1, 2]` unless they show otherwise.
    item_separator = ", " if style.indent is not None else style.item_separator
    key_separator = style.key_separator
    if node.kind == "array" and len(node.items) > 1:
        item_separator = text[node.items[0].end : node.items[1].start]
    elif node.kind == "object" and node.members:
        _, (_, key_end), first = node.members[0]
        key_separator = text[key_end : first.start]
        if len(node.members) > 1:
            item_separator = text[first.end : node.members[1][1][0]]
    return item_separator, key_separator


def _emit(value: Any, node: _Node | None, text: str, style: JsonStyle, base_indent: str | None) -> str:
    if node is not None and not node.repeats_key and same_json(value, node.value):
        return text[node.start : node.end]
    if isinstance(value, dict) and node is not None and node.kind == "object" and node.members:
        return _emit_object(value, node, text, style, base_indent)
    if isinstance(value, list) and node is not None and node.kind == "array" and node.items and value:
        return _emit_array(value, node, text, style, base_indent)
    if node is not None and node.kind in ("object", "array") and "\n" not in text[node.start : node.end]:
        # A container the file kept on one line stays on one line, with its own separators.
        item_separator, key_separator = _inline_separators(node, text, style)
        return _dumps(value, style, separators=(item_separator, key_separator))
    return _fresh(value, style, base_indent)


def _emit_array(value: list[Any], node: _Node, text: str, style: JsonStyle, base_indent: str | None) -> str:
    """Rebuild an array item by item: unchanged items and the text between them keep their bytes."""
    lead = text[node.start + 1 : node.items[0].start]
    tail = text[node.items[-1].end : node.end - 1]
    gaps = [text[a.end : b.start] for a, b in zip(node.items, node.items[1:], strict=False)]
    multiline = "\n" in lead
    child_indent = lead.rsplit("\n", 1)[1] if multiline else None
    if gaps:
        extra_gap = gaps[-1]
    elif multiline:
        extra_gap = "," + lead
    else:
        extra_gap = ", " if style.indent is not None else style.item_separator
    parts = [
        _emit(item, node.items[index] if index < len(node.items) else None, text, style, child_indent)
        for index, item in enumerate(value)
    ]
    out = [parts[0]]
    for index, part in enumerate(parts[1:]):
        out.append(gaps[index] if index < len(gaps) else extra_gap)
        out.append(part)
    return "[" + lead + "".join(out) + tail + "]"


def _emit_object(value: dict[str, Any], node: _Node, text: str, style: JsonStyle, base_indent: str | None) -> str:
    """Rebuild an object member by member: unchanged members keep their exact text."""
    lead = text[node.start + 1 : node.members[0][1][0]]
    tail = text[node.members[-1][2].end : node.end - 1]
    _, (_, key_end), first_child = node.members[0]
    key_separator = text[key_end : first_child.start]
    item_separator = text[first_child.end : node.members[1][1][0]] if len(node.members) > 1 else "," + lead
    multiline = "\n" in lead
    child_indent = lead.rsplit("\n", 1)[1] if multiline else None
    # The last copy of a repeated key is the one Python's json read; the others are dropped.
    by_key = {key: (span, child) for key, span, child in node.members}
    last_index = {key: index for index, (key, _, _) in enumerate(node.members)}
    # The text before each member after the first (comma and whitespace), as the file wrote it.
    gaps = [text[a[2].end : b[1][0]] for a, b in zip(node.members, node.members[1:], strict=False)]
    keys = list(value)
    original_keys = [key for key, _, _ in node.members]
    if len(original_keys) > 2 and original_keys == sorted(original_keys):
        # A file written with sorted keys (transformers, speculators) gets new keys in place.
        keys = sorted(keys)
    elif len(set(original_keys)) < len(original_keys):
        # A repeated key stays where its last copy stood; keys new to the file follow.
        last_seen = {key: index for index, key in enumerate(original_keys)}
        keys.sort(key=lambda key: last_seen.get(key, len(original_keys)))
    out: list[str] = []
    previous: int | None = -1
    for key in keys:
        item = value[key]
        index = last_index.get(key)
        if index is not None:
            (key_start, _), child = by_key[key]
            # The key and its own separator keep their bytes ("a" : 1 stays spaced that way).
            member = text[key_start : child.start] + _emit(item, child, text, style, child_indent)
        else:
            member = _dumps(key, style) + key_separator + _fresh(item, style, child_indent)
        if out:
            follows_in_file = index is not None and previous is not None and 0 <= previous < index
            out.append(gaps[index - 1] if follows_in_file and index is not None else item_separator)
        out.append(member)
        previous = index
    if not out:
        return "{}"
    return "{" + lead + "".join(out) + tail + "}"


def dumps_like(value: Any, original: str | None, *, style_from: str | None = None) -> str:
    """Serialize `value` reusing `original`'s bytes for every member that did not change.

    With no original, the value is written fresh in the style of `style_from` (or 2-space
    indent, UTF-8, one trailing newline). `dumps_like(json.loads(text), text) == text` for any
    valid JSON text.
    """
    if original is not None:
        try:
            root = _parse(original, 0)
        except (ValueError, IndexError):
            root = None
        if root is not None:
            style = detect_style(original)
            lead = original[: root.start]
            trailing = original[root.end :]
            return lead + _emit(value, root, original, style, "") + trailing
    style = detect_style(style_from) if style_from is not None else JsonStyle()
    return _fresh(value, style, "") + style.trailing


def write_json_like(path: Path, value: Any, original: str | None) -> None:
    atomic_write_text(path, dumps_like(value, original))


# --------------------------------------------------------------------------------------------
# Placing unchanged files: hard link, copy or symlink
# --------------------------------------------------------------------------------------------


class LinkMode(StrEnum):
    AUTO = "auto"
    HARDLINK = "hardlink"
    COPY = "copy"
    SYMLINK = "symlink"


# Errors that mean "this file system cannot hard-link these two paths": fall back to a copy.
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES, errno.EOPNOTSUPP}


@dataclass(frozen=True)
class Placed:
    method: str  # "hardlink" | "copy" | "symlink"
    bytes_copied: int
    fallback_reason: str | None = None


def place_file(source: Path, destination: Path, mode: LinkMode) -> Placed:
    """Put `source`'s content at `destination` (which must not exist) without changing `source`.

    Symlinked sources (Hugging Face cache snapshots) are resolved first, so a hard link or a
    symlink points at the real blob, and a copy reads its bytes.
    """
    real = Path(os.path.realpath(source))
    if mode is LinkMode.SYMLINK:
        destination.symlink_to(real)
        return Placed("symlink", 0)
    if mode in (LinkMode.HARDLINK, LinkMode.AUTO):
        try:
            os.link(real, destination)
            return Placed("hardlink", 0)
        except OSError as exc:
            if mode is LinkMode.HARDLINK or exc.errno not in _NO_LINK:
                raise
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            return Placed("copy", copy_file(real, destination), fallback_reason=reason)
    return Placed("copy", copy_file(real, destination))


def copy_file(source: Path, destination: Path) -> int:
    """Copy bytes and mode (the kernel does the copying where it can), fsync the copy."""
    with naming_the_file(destination):
        shutil.copyfile(source, destination)
        shutil.copymode(source, destination)
        with open(destination, "rb") as handle:
            os.fsync(handle.fileno())
    return destination.stat().st_size


# --------------------------------------------------------------------------------------------
# Staging folders and where writing is allowed
# --------------------------------------------------------------------------------------------

STAGING_MARK = ".dflash-tools-"


def staging_path(destination: Path, purpose: str = "partial") -> Path:
    """A hidden sibling of `destination`, on the same file system, so the final rename is atomic.

    The name carries the writer's process id, so a later run can tell a killed run's leftovers
    from a conversion still in progress.
    """
    return destination.parent / f".{destination.name}{STAGING_MARK}{purpose}-{os.getpid()}-{secrets.token_hex(4)}"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def remove_stale_staging(destination: Path) -> list[Path]:
    """Remove staging folders of `destination` left by runs that were killed; return them.

    Only `partial` folders (never-published output) go; an `old` folder is a previous OUT moved
    aside by `--force`, which may be the only copy if the run died between the two renames.
    """
    removed: list[Path] = []
    prefix = f".{destination.name}{STAGING_MARK}partial-"
    try:
        siblings = list(destination.parent.iterdir())
    except OSError:
        return removed
    for sibling in siblings:
        if not sibling.name.startswith(prefix) or sibling.is_symlink() or not sibling.is_dir():
            continue
        parts = sibling.name[len(prefix) :].split("-")
        if len(parts) != 2 or not parts[0].isdigit() or _process_alive(int(parts[0])):
            continue
        remove_tree(sibling)
        removed.append(sibling)
    return removed


def make_staging_dir(destination: Path) -> Path:
    destination.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(destination)
    stage = staging_path(destination)
    stage.mkdir(mode=0o777 & ~current_umask())
    return stage


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def is_empty_dir(path: Path) -> bool:
    try:
        return path.is_dir() and not any(path.iterdir())
    except OSError:
        return False


def publish_dir(stage: Path, destination: Path, *, replace_existing: bool) -> None:
    """Rename a complete staging folder into place.

    An absent or empty destination is replaced in one rename. A non-empty one (only with
    `replace_existing`) is first renamed aside, then removed once the new folder is in place:
    at every instant the destination is either the old folder, absent, or the new folder.
    """
    aside: Path | None = None
    if destination.exists() or destination.is_symlink():
        if destination.is_dir() and not destination.is_symlink() and is_empty_dir(destination):
            destination.rmdir()
        elif not replace_existing:
            raise FileExistsError(errno.EEXIST, "destination exists", str(destination))
        else:
            aside = staging_path(destination, "old")
            destination.rename(aside)
    stage.rename(destination)
    fsync_dir(destination.parent)
    if aside is not None:
        if aside.is_dir() and not aside.is_symlink():
            remove_tree(aside)
        else:
            aside.unlink()


def in_hf_cache(path: Path) -> bool:
    """Whether writing at `path` could touch the Hugging Face cache (the rule: hub.is_in_hf_cache)."""
    # Imported here: hub imports the readers, which import this module.
    from dflash_tools.hub import is_in_hf_cache

    return is_in_hf_cache(path)


def contains(folder: Path, candidate: Path) -> bool:
    """Whether `candidate` is `folder` or lies inside it (both resolved)."""
    return Path(os.path.realpath(candidate)).is_relative_to(Path(os.path.realpath(folder)))


# --------------------------------------------------------------------------------------------
# Test-only pause points (deterministic SIGKILL tests of the staging and rename)
# --------------------------------------------------------------------------------------------

PAUSE_ENV = "DFLASH_TOOLS_TEST_PAUSE_AT"
PAUSE_FILE_ENV = "DFLASH_TOOLS_TEST_PAUSE_FILE"


def pause_point(stage: str) -> None:
    """If DFLASH_TOOLS_TEST_PAUSE_AT names `stage`, announce it and wait to be killed.

    The process writes `stage` into DFLASH_TOOLS_TEST_PAUSE_FILE and waits until that file is
    removed (or 120 s pass), so a test can SIGKILL it at an exact point. Unset, this costs one
    environment lookup.
    """
    wanted = os.environ.get(PAUSE_ENV)
    if not wanted or stage not in wanted.split(","):
        return
    marker = os.environ.get(PAUSE_FILE_ENV)
    if not marker:
        return
    # Written aside and renamed, so the waiting test never reads a half-written marker.
    ready = Path(marker + ".writing")
    ready.write_text(stage, encoding="utf-8")
    ready.replace(marker)
    deadline = time.monotonic() + 120
    while Path(marker).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@contextlib.contextmanager
def cleanup_on_error(path: Path) -> Iterator[None]:
    """Remove a staging folder if the block fails (including KeyboardInterrupt)."""
    try:
        yield
    except BaseException:
        remove_tree(path)
        raise
