"""Safe file writing: atomic single files, staged folders, weight links, test pause points.

Every write goes to a temporary file in the destination folder and is renamed over the target, so a
reader (or a crash) sees the old file or the new one, never half of one. `os.replace` replaces a
symlink itself, never what it points to, which is what keeps Hugging Face cache blobs safe.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO

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
