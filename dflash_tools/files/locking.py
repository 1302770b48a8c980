"""Locks that keep two `convert` runs from writing one checkpoint folder at once.

- A run that rewrites a folder in place holds an exclusive lock on the folder itself; a run
  that reads a local folder as its source holds a shared one. Both are `flock` on a descriptor
  of the directory, so nothing is written into the user's folder (or into the Hugging Face
  cache, whose snapshot folders may be read this way).
- A run writing `-o OUT` also holds `.OUT.dflash-tools-lock`, a hidden file beside OUT (where its
  staging folder goes anyway): OUT may not exist yet, and `--force` replaces the folder, so its
  name is what must be locked. The file is removed when the run ends; a run that was killed
  leaves it behind, harmless (the kernel released the lock), and the next run to OUT reuses
  and removes it.

A second run does not wait: it stops with exit 2 and "another convert is writing FOLDER", so
it never plans against files that are about to change.

Hand-written on `fcntl.flock` rather than the `filelock` library: filelock locks a separate
lock file and leaves it in place by design, while a directory lock needs no file at all and
the destination lock file must go away after the run. Locks are released by the kernel when a
process dies, SIGKILL included.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from dflash_tools.errors import UsageError

LOCK_MARK = ".dflash-tools-lock"
# flock where the file system cannot lock (some network mounts): go on with the name lock only.
_CANNOT_LOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.EBADF}


class LockBusy(UsageError):
    """Another run holds the lock (exit 2, like any input that cannot be used right now)."""


def _busy(folder: Path, exclusive: bool) -> LockBusy:
    # A run that wants to read is blocked only by a writer; one that wants to write, by either.
    also = " (or reading it as its source)" if exclusive else ""
    return LockBusy(
        f"another convert is writing {folder}{also}",
        "wait for it to finish, then run again (each run holds the lock only while it works)",
    )


@contextlib.contextmanager
def folder_lock(folder: Path, *, exclusive: bool) -> Iterator[bool]:
    """Hold an flock on `folder`'s own descriptor; yields False where the file system cannot lock.

    Raises LockBusy when another run holds a conflicting lock. A missing folder is not locked.
    """
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(folder, exclusive) from None
        except OSError as exc:
            if exc.errno not in _CANNOT_LOCK:
                raise
            yield False
            return
        yield True
    finally:
        os.close(fd)


def lock_file_path(destination: Path) -> Path:
    return destination.parent / f".{destination.name}{LOCK_MARK}"


@contextlib.contextmanager
def name_lock(destination: Path) -> Iterator[Path]:
    """Hold `.NAME.dflash-tools-lock` beside `destination` exclusively; remove it on the way out.

    Removing a lock file is only safe with a check after locking: a run that opened the file
    just before the holder removed it would lock a file no longer in the folder. So after
    locking, the path must still name the locked file; otherwise open it again.
    """
    path = lock_file_path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _busy(destination, exclusive=False) from None
        except OSError as exc:
            os.close(fd)
            if exc.errno not in _CANNOT_LOCK:
                raise
            yield path
            return
        try:
            current = path.stat()
        except FileNotFoundError:
            os.close(fd)
            continue
        if not os.path.samestat(current, os.fstat(fd)):
            os.close(fd)
            continue
        break
    try:
        yield path
    finally:
        # Removed while still locked, then released: no one can lock this file afterwards.
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)


@contextlib.contextmanager
def writing_output(destination: Path) -> Iterator[None]:
    """Everything an `-o OUT` run holds while it writes: the name lock and, if OUT exists, OUT itself."""
    with name_lock(destination), folder_lock(destination, exclusive=True):
        yield


@contextlib.contextmanager
def writing_in_place(folder: Path, *, may_write_beside: bool) -> Iterator[None]:
    """Everything an in-place run holds: the folder's own lock, or where the file system cannot
    lock a directory, the name lock beside it (only if writing there is allowed at all)."""
    with folder_lock(folder, exclusive=True) as locked:
        if locked or not may_write_beside:
            yield
            return
    with name_lock(folder):
        yield
