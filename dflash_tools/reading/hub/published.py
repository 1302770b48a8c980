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

from dflash_tools.documents import JsonDocument
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


@dataclass(frozen=True)
class ProfileRecord(JsonDocument):
    """What a bundled profile records of a draft whose config.json it does not bundle (from its
    model card): JSON `not_read.profile` of `plan` and `smoke-test`, and the words of their
    errors and findings (`words`)."""

    profile: str
    algorithm: str | None
    layout: str  # "anchor-first" | "bonus-anchor"
    block_size: int | None
    num_speculative_tokens: int | None  # K: the profile's K_max
    num_query_tokens: int | None
    target: str | None

    def words(self) -> str:
        """`dflash2 draft, anchor-first, block_size 7, K 7, 7 query positions, for TARGET`."""
        parts = [f"{self.algorithm or 'a'} draft", self.layout, f"block_size {self.block_size}"]
        if self.num_speculative_tokens is not None:
            parts.append(f"K {self.num_speculative_tokens}, {self.num_query_tokens} query positions")
        if self.target:
            parts.append(f"for {self.target}")
        return ", ".join(parts)


def profile_without_config(repo_id: str) -> ProfileRecord | None:
    """What a profile of `repo_id` records when it bundles no config.json of it (None: no profile
    names the repo, or it has a config)."""
    wanted = repo_id.lower()
    for profile in _profiles():
        if profile["name"].lower() != wanted or profile.get("releases"):
            continue
        geometry = profile.get("geometry") or {}
        anchor_first = bool(geometry.get("sample_from_anchor"))
        k_max = geometry.get("max_speculative_tokens")
        return ProfileRecord(
            profile=profile["name"],
            algorithm=profile.get("algorithm"),
            layout="anchor-first" if anchor_first else "bonus-anchor",
            block_size=geometry.get("block_size"),
            num_speculative_tokens=k_max,
            num_query_tokens=None if k_max is None else (k_max if anchor_first else k_max + 1),
            target=profile.get("target") or None,
        )
    return None


def no_bundled_config(repo_id: str) -> str:
    """Why the bundled profiles cannot answer for `repo_id`, in words: the profile that names it
    but stores no config.json, with what it records; or that none stores its config.json."""
    known = profile_without_config(repo_id)
    if known is None:
        return "dflash-tools bundles no published config.json of it"
    return f"dflash-tools bundles no published config.json of it, only its profile (configs/profiles): {known.words()}"


def drafts_of_target(repo_id: str) -> list[str]:
    """The bundled profiles' drafts whose target is `repo_id` (their configs are bundled, its is not)."""
    wanted = repo_id.lower()
    return [p["name"] for p in _profiles() if str(p.get("target", "")).lower() == wanted and p.get("releases")]
