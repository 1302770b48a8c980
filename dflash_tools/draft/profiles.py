"""Known published checkpoints (configs/profiles/*.json): "matches z-lab/... " or where it departs.

A profile holds the published draft's layout (`dialect`, `geometry`, `model`, `tensors`: DFT050
compares them) and its `releases`: one row per published revision with its repo (mirrors
included), revision, the sha256 of its config.json and the config itself. A config is identified
by its sha256, else by its content; a checkpoint named like a published one (the Hub repo, a Hub
cache snapshot or a folder of that name) whose config is none of the releases gets DFT054 naming
the keys that differ from the nearest release (docs/json.md, `profile`; docs/findings.md).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar, Protocol

from dflash_tools.documents import JsonDocument
from dflash_tools.findings import Finding, make_finding
from dflash_tools.reading.local import configs_dir as configs_dir  # re-exported: reading owns where configs live


@dataclass(frozen=True)
class Release(JsonDocument):
    """One published revision of a profile's draft: where it is and what its config.json was."""

    repo: str
    revision: str | None  # the commit; None where the source that quotes the file names none
    config_sha256: str
    config: dict[str, Any]
    note: str = ""
    # Later or earlier commits whose config.json is the same file.
    other_revisions: tuple[str, ...] = ()

    json_keys: ClassVar[tuple[str, ...]] = ("repo", "revision", "other_revisions", "config_sha256")

    @property
    def label(self) -> str:
        return f"{self.repo}@{self.revision[:8]}" if self.revision else f"{self.repo} (revision not recorded)"


@dataclass(frozen=True)
class Profile:
    name: str
    data: dict[str, Any]

    @property
    def fingerprint(self) -> tuple[Any, ...]:
        model = self.data.get("model", {})
        return (
            self.data.get("algorithm"),
            model.get("hidden_size"),
            model.get("num_hidden_layers"),
            model.get("vocab_size"),
        )

    @property
    def releases(self) -> tuple[Release, ...]:
        return tuple(
            Release(
                repo=row["repo"],
                revision=row.get("revision"),
                config_sha256=row["config_sha256"],
                config=row["config"],
                note=row.get("note", ""),
                other_revisions=tuple(row.get("other_revisions", ())),
            )
            for row in self.data.get("releases", ())
        )

    @property
    def repos(self) -> set[str]:
        """The profile's name and every repo a release of it is published under (mirrors)."""
        return {self.name} | {release.repo for release in self.releases}


@cache
def load_profiles() -> tuple[Profile, ...]:
    folder = configs_dir() / "profiles"
    if not folder.is_dir():
        return ()
    profiles = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        profiles.append(Profile(name=data["name"], data=data))
    return tuple(profiles)


def config_sha256(config_text: str | None) -> str | None:
    """The sha256 of config.json as stored: the text was decoded strictly from UTF-8, so encoding
    it again gives back the file's bytes."""
    return None if config_text is None else hashlib.sha256(config_text.encode("utf-8")).hexdigest()


MAX_DIFFERENCES = 200


@dataclass
class ProfileMatch(JsonDocument):
    name: str
    matched_by: str  # "config sha256", "config content", "repo id", "folder name" or "dimensions"
    differences: list[dict[str, Any]] = field(default_factory=list)
    # The published release whose config this is (by sha256 or content), else None.
    release: Release | None = None
    releases_known: int = 0
    # When no release matches: the nearest one, and the config keys that differ from it.
    nearest_release: Release | None = None
    config_differences: list[dict[str, Any]] = field(default_factory=list)

    json_keys: ClassVar[tuple[str, ...]] = (
        "name",
        "matched_by",
        "matches",
        "differences",
        "release",
        "releases_known",
        "nearest_release",
        "config_differences",
    )
    json_properties: ClassVar[Mapping[str, str]] = {"matches": "matches"}

    @property
    def matches(self) -> bool:
        return not self.differences


# Objects nested deeper than this are compared whole (a real config nests three or four levels;
# a hostile one thousands, which DFT062 reports).
_MAX_DEPTH = 32


def _flatten(prefix: str, value: Any, out: dict[str, Any], depth: int = 0) -> None:
    if isinstance(value, dict) and depth < _MAX_DEPTH:
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else key, inner, out, depth + 1)
    else:
        out[prefix] = value


def _json_safe(value: Any, depth: int = 0) -> Any:
    """A config value as strict JSON carries it: NaN and the infinities spelled as strings, and
    structures nested deeper than any real config summarized (as finding values are)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict | list):
        if depth >= _MAX_DEPTH:
            return f"<{type(value).__name__} nested deeper than {_MAX_DEPTH} levels>"
        if isinstance(value, dict):
            return {key: _json_safe(item, depth + 1) for key, item in value.items()}
        return [_json_safe(item, depth + 1) for item in value]
    return value


def canonical_json(value: Any) -> str | None:
    """`value` as JSON text with sorted keys: equal text is equal JSON with the types kept (Python's
    `==` takes `0 == false` and `1.0 == 1`, so an edited config would match the published one).
    None for a value JSON cannot spell (nested too deep to walk)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return None


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON, types kept (`canonical_json`)."""
    if type(a) is not type(b):
        return False
    if not isinstance(a, dict | list | float):
        return bool(a == b)
    text = canonical_json(a)
    return text is not None and text == canonical_json(b)


class DraftToMatch(Protocol):
    """What a profile is compared with: a draft as inspect read it (`draft.inspected.DraftToMatch`;
    a protocol here, so that the profiles, which the layout evidence reads, import no draft model)."""

    @property
    def tensors(self) -> Any: ...

    @property
    def fingerprint(self) -> tuple[Any, ...]: ...

    def sections(self) -> dict[str, Any]: ...


def match_profile(
    source: str,
    draft: DraftToMatch | None,
    *,
    config: dict[str, Any] | None = None,
    config_text: str | None = None,
) -> ProfileMatch | None:
    """The published profile a checkpoint is: by its config (sha256, then content), else the
    profile of the same repo, else one of the same dimensions. `draft` is None when the config
    describes no draft: then only the config itself identifies a release."""
    sha = config_sha256(config_text)
    repo = source.removeprefix("hf://")
    # Mirrors publish the same file: the release of the repo read, else the first that has it.
    releases = sorted(
        ((profile, release) for profile in load_profiles() for release in profile.releases),
        key=lambda pair: pair[1].repo != repo,
    )
    for profile, release in releases:
        if sha is not None and release.config_sha256 == sha:
            return _matched(profile, "config sha256", draft, release)
    wanted: str | None = None
    for profile, release in releases:
        if config is None or release.config.keys() != config.keys():
            continue  # other keys: another config, whatever the values (and no text to build)
        wanted = wanted or canonical_json(config)
        if wanted is not None and canonical_json(release.config) == wanted:
            return _matched(profile, "config content", draft, release)
    if draft is None:
        return None
    candidates = [p for p in load_profiles() if repo in p.repos]
    matched_by = "repo id"
    if not candidates:
        candidates = [p for p in load_profiles() if _names(source, p)]
        matched_by = "folder name"
    if not candidates:
        candidates = [p for p in load_profiles() if p.fingerprint == draft.fingerprint]
        matched_by = "dimensions"
        if not candidates:
            return None
        # Among same-dimension profiles prefer the one with the fewest differences.
        candidates.sort(key=lambda p: len(_differences(p, draft)))
    profile = candidates[0]
    match = _matched(profile, matched_by, draft, None)
    if config is not None and profile.releases:
        nearest = min(profile.releases, key=lambda r: len(config_differences(r.config, config)))
        match.nearest_release = nearest
        # A hostile config may differ in millions of keys; a report names the first ones.
        match.config_differences = config_differences(nearest.config, config)[:MAX_DIFFERENCES]
    return match


def _matched(profile: Profile, matched_by: str, draft: DraftToMatch | None, release: Release | None) -> ProfileMatch:
    return ProfileMatch(
        profile.name,
        matched_by,
        _differences(profile, draft) if draft is not None else [],
        release=release,
        releases_known=len(profile.releases),
    )


# A Hub cache snapshot (`models--owner--name/snapshots/<commit>/`) names its repo.
_CACHE_SNAPSHOT = re.compile(r"models--(?P<owner>[^/]+?)--(?P<name>[^/]+)/snapshots/")


def _names(source: str, profile: Profile) -> bool:
    """Whether a local path names one of the profile's repos: a Hub cache snapshot of it, or a
    folder of the repo's name (`hf download OWNER/NAME --local-dir NAME`). Case is ignored."""
    path = source.replace("\\", "/").rstrip("/")
    if path.endswith(".json") or path.endswith(".safetensors"):
        path = path.rsplit("/", 1)[0] if "/" in path else "."
    cached = _CACHE_SNAPSHOT.search(path + "/")
    repos = {r.lower() for r in profile.repos}
    if cached:
        return f"{cached['owner']}/{cached['name']}".lower() in repos
    folder = path.rsplit("/", 1)[-1].lower()
    return folder in {r.split("/", 1)[-1] for r in repos}


def config_differences(published: dict[str, Any], actual: dict[str, Any]) -> list[dict[str, Any]]:
    """Every key (dotted, nested objects walked) whose value differs, in the published order, then
    the added keys: `change` is `changed` (both values), `removed` (only the published value) or
    `added` (only the actual one). A value of another JSON type differs (`1` and `1.0`, `true`)."""
    want: dict[str, Any] = {}
    got: dict[str, Any] = {}
    _flatten("", published, want)
    _flatten("", actual, got)
    diffs = []
    for key in [*want, *(k for k in got if k not in want)]:
        if key not in got:
            diffs.append({"key": key, "published": _json_safe(want[key]), "change": "removed"})
        elif key not in want:
            diffs.append({"key": key, "actual": _json_safe(got[key]), "change": "added"})
        elif not _same(got[key], want[key]):
            diffs.append(
                {"key": key, "published": _json_safe(want[key]), "actual": _json_safe(got[key]), "change": "changed"}
            )
    return diffs


_COMPARED = ("dialect", "algorithm", "geometry", "model", "tensors")


def _differences(profile: Profile, draft: DraftToMatch) -> list[dict[str, Any]]:
    expected: dict[str, Any] = {}
    actual: dict[str, Any] = {}
    sections = draft.sections()
    for section in _COMPARED:
        if section in profile.data:
            _flatten(section, profile.data[section], expected)
            _flatten(section, sections[section], actual)
    diffs = []
    for key, want in expected.items():
        got = actual.get(key)
        if key.startswith("tensors.") and draft.tensors is None:
            continue
        if not _same(got, want):
            diffs.append({"key": key, "published": want, "actual": got})
    return diffs


# Matches that say the checkpoint is meant to be the published one (not a look-alike of its shape).
_BY_NAME = ("repo id", "folder name")


def profile_findings(match: ProfileMatch | None) -> list[Finding]:
    if match is None:
        return []
    findings = _release_findings(match)
    if match.matches:
        return findings
    shown = "; ".join(f"{d['key']} {d['actual']!r} (published {d['published']!r})" for d in match.differences[:6])
    return [
        make_finding(
            "DFT050",
            f"departs from the published {match.name} layout ({match.matched_by}): {shown}",
            "expected for a fine-tune or a re-export; otherwise compare with the published config",
            values={"profile": match.name, "differences": match.differences},
        ),
        *findings,
    ]


def _release_findings(match: ProfileMatch) -> list[Finding]:
    """DFT054: named like a published draft, but its config is none of the published revisions."""
    nearest = match.nearest_release
    if nearest is None or not match.config_differences or match.matched_by not in _BY_NAME:
        return []
    diffs = match.config_differences
    shown = "; ".join(_describe(d) for d in diffs[:6]) + (f"; and {len(diffs) - 6} more" if len(diffs) > 6 else "")
    known = f"{match.releases_known} published release" + ("s" if match.releases_known != 1 else "")
    return [
        make_finding(
            "DFT054",
            f"config.json is none of the {known} of {match.name} dflash-tools knows "
            f"(matched by {match.matched_by}); against the nearest, {nearest.label}: {shown}",
            "if this is a download of that repo, it is another revision: check which one you serve "
            "(--revision pins one); a re-export or an edited copy is expected to differ",
            keys=tuple(d["key"] for d in diffs),
            values={
                "profile": match.name,
                "nearest_release": nearest.to_dict(),
                "config_differences": diffs,
            },
            file="config.json",
        )
    ]


def _describe(difference: dict[str, Any]) -> str:
    key = difference["key"]
    if difference["change"] == "removed":
        return f"{key} absent (published {_short(difference['published'])})"
    if difference["change"] == "added":
        return f"{key} {_short(difference['actual'])} (not in the published config)"
    return f"{key} {_short(difference['actual'])} (published {_short(difference['published'])})"


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
