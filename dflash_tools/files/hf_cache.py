"""Whether a path lies in (or links into) the Hugging Face Hub cache, which must never be written.

Asked before every write (convert's output, `--in-place`) and when reading through cache links.
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import constants


def is_in_hf_cache(path: Path) -> bool:
    """Whether writing to `path` could touch the Hugging Face Hub cache.

    True when the path (as given or fully resolved) lies under HF_HUB_CACHE, when it lies in a
    cache snapshot (`models--*/snapshots/<commit>/...` with `blobs/` beside `snapshots/`), when it
    is a symlink into such a repo's `blobs/`, or when it is a folder whose direct entries are such
    symlinks (a snapshot copied elsewhere: writing through its links would corrupt the shared blobs).
    Decided by the cache's real layout, never by one folder's name: a plain folder that happens
    to hold a `blobs/` or `snapshots/` folder of its own is not the cache.
    """
    as_given = _absolute(Path(path))
    resolved = Path(os.path.realpath(as_given))
    roots = _cache_roots()
    if any(p.is_relative_to(root) for p in (as_given, resolved) for root in roots):
        return True
    for candidate in (as_given, resolved):
        parts = candidate.parts
        for i, part in enumerate(parts[:-1]):
            if part == "snapshots" and i > 0 and _is_cache_repo_dir(Path(*parts[:i])):
                return True
    if _links_into_blobs(as_given):
        return True
    if as_given.is_dir():
        try:
            return any(_links_into_blobs(entry) for entry in as_given.iterdir())
        except OSError:
            return False
    return False


def _absolute(path: Path) -> Path:
    """Absolute and normalized, but with symlinks left as they are."""
    return Path(os.path.normpath(path.expanduser().absolute()))


def _cache_roots() -> list[Path]:
    roots = [constants.HF_HUB_CACHE]
    env = os.environ.get("HF_HUB_CACHE")
    if env:
        roots.append(env)
    out: list[Path] = []
    for root in roots:
        absolute = _absolute(Path(root))
        out.extend({absolute, Path(os.path.realpath(absolute))})
    return out


# A cached repo folder: `models--org--name` (or datasets--, spaces--) holding blobs/ and snapshots/.
_CACHE_REPO_PREFIXES = ("models--", "datasets--", "spaces--")


def _is_cache_repo_dir(folder: Path) -> bool:
    return (
        folder.name.startswith(_CACHE_REPO_PREFIXES) and (folder / "blobs").is_dir() and (folder / "snapshots").is_dir()
    )


def _links_into_blobs(path: Path) -> bool:
    """A symlink whose target is a blob of a cached repo (`models--*/blobs/<hash>`)."""
    if not path.is_symlink():
        return False
    target = Path(os.path.realpath(path))
    return target.parent.name == "blobs" and _is_cache_repo_dir(target.parent.parent)
