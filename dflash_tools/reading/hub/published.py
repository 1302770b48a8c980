"""A published draft's config.json from the bundled profiles, for when the Hub cannot answer.

`configs/profiles/*.json` (the published profiles `draft.profiles` compares drafts with) list
each published release of a draft: its repo, revision, the sha256 of its config.json and, under
`configs/profiles/releases/`, the file itself, byte for byte. When a repo id cannot be read from
the Hub (HF_HUB_OFFLINE, or the Hub unreachable) and is not in the local Hugging Face cache, the
reading layer answers from that file, saying so (DFT056: revision, sha256, "from the bundled
profile"), instead of failing with nothing; a profile that has no such file says that instead
(docs/inspect.md, "Offline: the bundled published configs").

The profiles are read here as data (JSON), not through `draft.profiles`, which sits above this
layer; only rows whose file is the repo's own root config.json are used (`path`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from dflash_tools.reading.checkpoint import CONFIG_NAME
from dflash_tools.reading.local import configs_dir


@dataclass(frozen=True)
class PublishedConfig:
    """One bundled release of a published draft: `text` is its config.json, as published."""

    profile: str
    repo: str
    revision: str | None
    sha256: str
    text: str
    note: str
    releases: int  # how many releases of this repo the profiles hold


@cache
def _profiles() -> tuple[dict[str, Any], ...]:
    folder = configs_dir() / "profiles"
    if not folder.is_dir():
        return ()
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            found.append(data)
    return tuple(found)


def _rows(repo_id: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(profile, release row) of every bundled release of `repo_id` (case-insensitive)."""
    wanted = repo_id.lower()
    return [
        (profile, row)
        for profile in _profiles()
        for row in profile.get("releases") or ()
        if isinstance(row, dict) and str(row.get("repo", "")).lower() == wanted
    ]


def published_config(repo_id: str, revision: str | None) -> PublishedConfig | None:
    """The bundled config.json of `repo_id` at `revision` (a commit, or a prefix of one; None or
    `main`: the first release its profile lists), checked against the sha256 the row records."""
    rows = [(p, r) for p, r in _rows(repo_id) if r.get("path", CONFIG_NAME) == CONFIG_NAME and r.get("config_file")]
    if revision not in (None, "main"):
        rows = [
            (p, r)
            for p, r in rows
            if any(str(rev).startswith(revision) for rev in [r.get("revision"), *(r.get("other_revisions") or ())])
        ]
    for profile, row in rows:
        path = configs_dir() / "profiles" / row["config_file"]
        try:
            data = path.read_bytes()
        except OSError:
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != row.get("config_sha256"):
            continue  # not the published bytes: never answered as if it were
        return PublishedConfig(
            profile=profile["name"],
            repo=row["repo"],
            revision=row.get("revision"),
            sha256=digest,
            text=data.decode("utf-8"),
            note=str(row.get("note") or ""),
            releases=len(_rows(repo_id)),
        )
    return None


def profile_without_config(repo_id: str) -> str | None:
    """What a profile of `repo_id` knows when it bundles no config.json of it: its layout, in words
    (None: no profile names the repo, or it has a config)."""
    wanted = repo_id.lower()
    for profile in _profiles():
        if profile["name"].lower() != wanted or profile.get("releases"):
            continue
        geometry = profile.get("geometry") or {}
        block = geometry.get("block_size")
        anchor_first = geometry.get("sample_from_anchor")
        layout = "anchor-first" if anchor_first else "bonus-anchor"
        k_max = geometry.get("max_speculative_tokens")
        parts = [f"{profile.get('algorithm', 'a')} draft", layout, f"block_size {block}"]
        if k_max is not None:
            queries = k_max if anchor_first else k_max + 1
            parts.append(f"K {k_max}, {queries} query positions")
        if profile.get("target"):
            parts.append(f"for {profile['target']}")
        return ", ".join(str(part) for part in parts)
    return None


def drafts_of_target(repo_id: str) -> list[str]:
    """The bundled profiles' drafts whose target is `repo_id` (their configs are bundled, its is not)."""
    wanted = repo_id.lower()
    return [p["name"] for p in _profiles() if str(p.get("target", "")).lower() == wanted and p.get("releases")]
