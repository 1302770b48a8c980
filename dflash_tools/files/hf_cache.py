"""Whether a path lies in (or links into) the Hugging Face Hub cache, which must never be written.

Asked before every write (convert's output, `--in-place`) and when reading through cache links.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from huggingface_hub import constants

_COMMIT_HASH = re.compile(r"^[0-9a-f]{40}$")


def is_in_hf_cache(path: Path) -> bool:
    """Whether writing to `path` could touch the Hugging Face Hub cache.

    True when the path (as given or fully resolved) lies under HF_HUB_CACHE, when it looks like
    a cache snapshot (`.../snapshots/<40-hex commit>/...`), when it is a symlink into a `blobs/`
    folder, or when it is a folder whose direct entries are symlinks into a `blobs/` folder
    (a snapshot copied elsewhere: writing through its links would corrupt the shared blobs).
    """
    as_given = _absolute(Path(path))
    resolved = Path(os.path.realpath(as_given))
    roots = _cache_roots()
    if any(p.is_relative_to(root) for p in (as_given, resolved) for root in roots):
        return True
    for candidate in (as_given, resolved):
        parts = candidate.parts
        for i, part in enumerate(parts[:-1]):
            if part == "snapshots" and _COMMIT_HASH.match(parts[i + 1]):
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


def _links_into_blobs(path: Path) -> bool:
    return path.is_symlink() and Path(os.path.realpath(path)).parent.name == "blobs"
