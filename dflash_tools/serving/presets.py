"""Presets (`configs/presets/*.json`) and prompt sets (`configs/prompts/*.jsonl`, or `--prompts`).

A preset is a whole test plan: target, drafts, K, prompts, decoding limits, engine arguments and,
per draft, the acceptance floor with where that number comes from. Every bad input is a
`UsageError` naming the file and the key (or line).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflash_tools.draft.profiles import configs_dir
from dflash_tools.errors import UsageError

PRESET_SCHEMA_VERSION = 1
DEFAULT_PROMPTS = "gsm8k-style.jsonl"


@dataclass(frozen=True)
class Floor:
    """The acceptance a healthy draft must reach, and where the numbers come from."""

    mean_acceptance_length: float | None = None
    first_position_rate: float | None = None
    provenance: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "mean_acceptance_length": self.mean_acceptance_length,
            "first_position_rate": self.first_position_rate,
            "provenance": self.provenance,
        }


# Below these a run is a silent misconfiguration (layout, layer ids, vocabulary, causality,
# runner), whatever the draft: a working draft of any family clears them by far
# (docs/smoke-test.md, "Presets"; docs/rules.md, "Reference numbers").
SANITY_FLOOR = Floor(
    mean_acceptance_length=1.2,
    first_position_rate=0.3,
    provenance="sanity floor (docs/smoke-test.md): mean acceptance length above 1.2 and position-0 acceptance "
    "of at least 0.3; below that the draft is misconfigured",
)


@dataclass
class DraftEntry:
    """One draft of a test plan."""

    draft: str
    label: str | None = None
    floor: Floor | None = None
    expect: dict[str, Any] = field(default_factory=dict)
    references: list[dict[str, Any]] = field(default_factory=list)
    revision: str | None = None


@dataclass
class Preset:
    name: str
    path: Path
    description: str
    target: str | None
    drafts: list[DraftEntry]
    num_speculative_tokens: int | None
    prompts: str | None
    max_tokens: int | None
    num_prompts: int | None
    chat: bool | None
    enable_thinking: bool | None
    engine_args: dict[str, Any]
    env: dict[str, str]


def presets_dir() -> Path:
    return configs_dir() / "presets"


def prompts_dir() -> Path:
    return configs_dir() / "prompts"


def list_presets() -> list[str]:
    folder = presets_dir()
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def find_preset(name: str) -> Path:
    """A preset by name (`qwen3.8-27b-dflash2`) from configs/presets, or a path to a JSON file."""
    candidate = Path(name).expanduser()
    if candidate.suffix == ".json" and candidate.is_file():
        return candidate
    bundled = presets_dir() / f"{name}.json"
    if bundled.is_file():
        return bundled
    known = ", ".join(list_presets()) or "none"
    raise UsageError(f"preset {name!r}: no such preset", f"bundled presets: {known}; or pass a path to a preset .json")


def _positive_int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{where} is {value!r}, not a positive integer", "fix the preset")
    return value


def _optional(data: dict[str, Any], key: str, types: tuple[type, ...], where: str) -> Any:
    if key not in data or data[key] is None:
        return None
    value = data[key]
    if isinstance(value, bool) and bool not in types:
        raise UsageError(f"{where}: {key} is {value!r}", "fix the preset")
    if not isinstance(value, types):
        names = " or ".join(t.__name__ for t in types)
        raise UsageError(f"{where}: {key} is {type(value).__name__}, expected {names}", "fix the preset")
    return value


def _number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise UsageError(f"{where} is {value!r}, not a non-negative number", "fix the preset")
    return float(value)


def parse_floor(data: Any, where: str) -> Floor:
    if not isinstance(data, dict):
        raise UsageError(
            f"{where} is not an object", 'write it as {"mean_acceptance_length": 4.0, "provenance": "..."}'
        )
    provenance = data.get("provenance", "")
    if not isinstance(provenance, str) or not provenance.strip():
        raise UsageError(f"{where}.provenance is missing", "every floor states where its number comes from")
    return Floor(
        mean_acceptance_length=_number(data.get("mean_acceptance_length"), f"{where}.mean_acceptance_length"),
        first_position_rate=_number(data.get("first_position_rate"), f"{where}.first_position_rate"),
        provenance=provenance,
    )


def load_preset(name: str) -> Preset:
    path = find_preset(name)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"preset {path}: cannot read JSON ({exc})", "fix the preset file") from None
    where = f"preset {path}"
    if not isinstance(data, dict):
        raise UsageError(f"{where}: not a JSON object", "fix the preset file")
    if data.get("schema_version") != PRESET_SCHEMA_VERSION:
        raise UsageError(
            f"{where}: schema_version is {data.get('schema_version')!r}, expected {PRESET_SCHEMA_VERSION}",
            "fix the preset file",
        )
    raw_drafts = data.get("drafts")
    if not isinstance(raw_drafts, list) or not raw_drafts:
        raise UsageError(f"{where}: drafts must be a non-empty list", "fix the preset file")
    drafts = []
    for index, item in enumerate(raw_drafts):
        item_where = f"{where}: drafts[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("draft"), str) or not item["draft"]:
            raise UsageError(f"{item_where}.draft is missing", "each draft entry names a checkpoint")
        references = item.get("references", [])
        if not isinstance(references, list) or not all(isinstance(r, dict) for r in references):
            raise UsageError(f"{item_where}.references must be a list of objects", "fix the preset file")
        expect = item.get("expect", {})
        if not isinstance(expect, dict):
            raise UsageError(f"{item_where}.expect must be an object", "fix the preset file")
        drafts.append(
            DraftEntry(
                draft=item["draft"],
                label=_optional(item, "label", (str,), item_where),
                floor=parse_floor(item["floor"], f"{item_where}.floor") if "floor" in item else None,
                expect=expect,
                references=references,
                revision=_optional(item, "revision", (str,), item_where),
            )
        )
    k = data.get("num_speculative_tokens")
    engine_args = _optional(data, "engine_args", (dict,), where) or {}
    env = _optional(data, "env", (dict,), where) or {}
    if not all(isinstance(v, str) for v in env.values()):
        raise UsageError(f"{where}: env values must be strings", "fix the preset file")
    max_tokens = data.get("max_tokens")
    num_prompts = data.get("num_prompts")
    return Preset(
        name=str(data.get("name") or path.stem),
        path=path,
        description=str(data.get("description") or ""),
        target=_optional(data, "target", (str,), where),
        drafts=drafts,
        num_speculative_tokens=_positive_int(k, f"{where}: num_speculative_tokens") if k is not None else None,
        prompts=_optional(data, "prompts", (str,), where),
        max_tokens=_positive_int(max_tokens, f"{where}: max_tokens") if max_tokens is not None else None,
        num_prompts=_positive_int(num_prompts, f"{where}: num_prompts") if num_prompts is not None else None,
        chat=_optional(data, "chat", (bool,), where),
        enable_thinking=_optional(data, "enable_thinking", (bool,), where),
        engine_args=engine_args,
        env=env,
    )


def resolve_prompts_path(name: str | None, *, relative_to: Path | None = None) -> Path:
    """A prompts file: a path, or a name under configs/prompts (the preset's own folder first)."""
    name = name or DEFAULT_PROMPTS
    candidate = Path(name).expanduser()
    if candidate.is_file():
        return candidate
    for folder in ([relative_to] if relative_to else []) + [prompts_dir()]:
        if (folder / name).is_file():
            return folder / name
    raise UsageError(f"prompts file {name}: not found", f"pass --prompts FILE (JSONL) or a name in {prompts_dir()}")


@dataclass
class PromptSet:
    """Prompts as text, or pre-tokenized (`token_ids`, then `texts` is empty)."""

    texts: list[str]
    token_ids: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.token_ids) if self.token_ids is not None else len(self.texts)


def _token_ids(value: Any) -> list[int] | None:
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        return None
    return value


def load_prompts(path: Path, limit: int | None = None) -> PromptSet:
    """JSONL, one prompt per line: {"prompt": "..."}, a bare JSON string, or
    {"prompt_token_ids": [...]} (a target without a tokenizer); one kind per file."""
    hint = 'write one {"prompt": "..."} (or {"prompt_token_ids": [...]}) per line'
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"prompts file {path}: cannot read ({exc})", "pass a UTF-8 JSONL file") from None
    texts: list[str] = []
    token_ids: list[list[int]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise UsageError(f"prompts file {path}: line {number} is not JSON ({exc.args[0]})", hint) from None
        if isinstance(value, dict) and "prompt_token_ids" in value:
            ids = _token_ids(value["prompt_token_ids"])
            if ids is None:
                raise UsageError(
                    f"prompts file {path}: line {number}: prompt_token_ids is not a list of token ids", hint
                )
            token_ids.append(ids)
            continue
        if isinstance(value, dict):
            value = value.get("prompt")
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"prompts file {path}: line {number}: prompt is missing or empty", hint)
        texts.append(value)
    if texts and token_ids:
        raise UsageError(f"prompts file {path}: mixes text prompts and prompt_token_ids", "use one kind per file")
    if token_ids:
        return PromptSet([], token_ids[:limit] if limit else token_ids)
    if not texts:
        raise UsageError(f"prompts file {path}: no prompts", hint)
    return PromptSet(texts[:limit] if limit else texts)
