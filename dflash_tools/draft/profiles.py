"""Known published checkpoints (configs/profiles/*.json): "matches z-lab/... " or where it departs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from dflash_tools.findings import Finding, make_finding


def configs_dir() -> Path:
    """configs/ in a checkout, or its copy inside the installed wheel."""
    package = Path(__file__).parent.parent
    packaged = package / "_configs"
    return packaged if packaged.is_dir() else package.parent / "configs"


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


@dataclass
class ProfileMatch:
    name: str
    matched_by: str  # "repo id" or "dimensions"
    differences: list[dict[str, Any]] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "matched_by": self.matched_by,
            "matches": self.matches,
            "differences": self.differences,
        }


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else key, inner, out)
    else:
        out[prefix] = value


def match_profile(source: str, report: dict[str, Any]) -> ProfileMatch | None:
    """Compare a report (the JSON document) with the profile of the same repo, else same dimensions."""
    repo = source.removeprefix("hf://")
    candidates = [p for p in load_profiles() if p.name == repo]
    matched_by = "repo id"
    if not candidates:
        model = report.get("model") or {}
        key = (
            report.get("algorithm"),
            model.get("hidden_size"),
            model.get("num_hidden_layers"),
            model.get("vocab_size"),
        )
        candidates = [p for p in load_profiles() if p.fingerprint == key]
        matched_by = "dimensions"
        if not candidates:
            return None
        # Among same-dimension profiles prefer the one with the fewest differences.
        candidates.sort(key=lambda p: len(_differences(p, report)))
    profile = candidates[0]
    return ProfileMatch(profile.name, matched_by, _differences(profile, report))


_COMPARED = ("dialect", "algorithm", "geometry", "model", "tensors")


def _differences(profile: Profile, report: dict[str, Any]) -> list[dict[str, Any]]:
    expected: dict[str, Any] = {}
    actual: dict[str, Any] = {}
    for section in _COMPARED:
        if section in profile.data:
            _flatten(section, profile.data[section], expected)
            _flatten(section, report.get(section), actual)
    diffs = []
    for key, want in expected.items():
        got = actual.get(key)
        if key.startswith("tensors.") and report.get("weights_inspected") is False:
            continue
        if got != want:
            diffs.append({"key": key, "published": want, "actual": got})
    return diffs


def profile_findings(match: ProfileMatch | None) -> list[Finding]:
    if match is None or match.matches:
        return []
    shown = "; ".join(f"{d['key']} {d['actual']!r} (published {d['published']!r})" for d in match.differences[:6])
    return [
        make_finding(
            "DFT050",
            f"departs from the published {match.name} layout ({match.matched_by}): {shown}",
            "expected for a fine-tune or a re-export; otherwise compare with the published config",
            values={"profile": match.name, "differences": match.differences},
        )
    ]
