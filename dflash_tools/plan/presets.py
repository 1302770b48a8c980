"""Presets (`configs/presets/*.json`) and prompt sets (`configs/prompts/*.jsonl`, or `--prompts`).

A preset is a whole test plan: target, drafts, K, prompts, decoding limits, engine arguments and,
per draft, the acceptance floor with where that number comes from. Every bad input is a
`UsageError` naming the file and the key (or line).

Every file here is read through the hardened reader (a regular file of bounded size, strict
UTF-8, bounded values and nesting: `read_json_file`, `load_prompts`), and a preset is checked
against one schema (pydantic, strict) that names every bad field at once; the serving settings among its engine arguments are checked as
the command line's are (`checks.setting_problem`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dflash_tools.documents import JsonDocument
from dflash_tools.draft.model_limits import shown_integer
from dflash_tools.draft.profiles import configs_dir
from dflash_tools.errors import UsageError
from dflash_tools.plan.checks import INT64_MAX, setting_problem
from dflash_tools.reading.checkpoint import path_exists, read_small_file
from dflash_tools.reading.json_hazards import JsonRefused, json_values_bound, loads_bounded

PRESET_SCHEMA_VERSION = 1
DEFAULT_PROMPTS = "gsm8k-style.jsonl"


@dataclass(frozen=True)
class Floor(JsonDocument):
    """The acceptance a healthy draft must reach, and where the numbers come from."""

    mean_acceptance_length: float | None = None
    first_position_rate: float | None = None
    provenance: str = ""


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


# A preset is a few kilobytes and a few hundred values; these caps refuse a sparse terabyte or a
# file of a million empty lists before it is read (or parsed) whole.
MAX_PRESET_BYTES = 1024 * 1024
MAX_PRESET_VALUES = 100_000
# Prompts may be pre-tokenized (a few thousand ids a line): larger, but still bounded.
MAX_PROMPTS_BYTES = 64 * 1024 * 1024
MAX_PROMPTS_VALUES = 2_000_000
# One prompt (of --prompts, or one turn of a dataset row, smoke.workloads.datasets): the longest prompt of
# the five datasets smoke-test knows is a few kilobytes.
MAX_PROMPT_CHARS = 1024 * 1024
_PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def find_preset(name: str) -> Path:
    """A preset by name (`qwen3.8-27b-dflash2`) from configs/presets, or a path to a JSON file."""
    candidate = Path(name).expanduser()
    if candidate.suffix == ".json" and path_exists(candidate):
        return candidate  # read (and refused, if it is a folder or a FIFO) by `read_json_file`
    bundled = presets_dir() / f"{name}.json"
    if _PRESET_NAME.match(name) and bundled.is_file():
        return bundled
    known = ", ".join(list_presets()) or "none"
    raise UsageError(f"preset {name!r}: no such preset", f"bundled presets: {known}; or pass a path to a preset .json")


def read_json_file(
    path: Path, what: str, *, max_bytes: int = MAX_PRESET_BYTES, max_values: int = MAX_PRESET_VALUES
) -> Any:
    """A small JSON file of the user's (a preset; smoke-test's engine-argument files), read as
    inspect reads a config: a regular file (a FIFO or a device would never end), at most
    `max_bytes`, strict UTF-8, at most `max_values` values and MAX_CONFIG_DEPTH levels of nesting.
    Anything else is a UsageError naming `what` and the file."""
    try:
        data = read_small_file(path, max_bytes)
    except (OSError, ValueError) as exc:  # missing, a folder or FIFO, too large
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"{what} {path}: cannot read it: {reason}", "pass a JSON file") from None
    try:
        return loads_bounded(data, max_values=max_values)
    except JsonRefused as exc:
        raise UsageError(f"{what} {path}: cannot read JSON: {exc}", "fix the file") from None


# --- the preset schema -----------------------------------------------------------------------
# Strict: a string is not a number, a number not a bool, NaN not a number (pydantic's strict mode;
# keys it does not know are ignored, as before). Every problem is reported, one clause per field.

_Count = Annotated[int, Field(ge=1, le=INT64_MAX)]
_Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _FloorSchema(BaseModel):
    model_config = ConfigDict(strict=True)

    mean_acceptance_length: _Rate | None = None
    first_position_rate: _Rate | None = None
    provenance: str = ""


class _DraftSchema(BaseModel):
    model_config = ConfigDict(strict=True)

    draft: Annotated[str, Field(min_length=1)]
    label: str | None = None
    floor: _FloorSchema | None = None
    expect: dict[str, Any] = {}
    references: list[dict[str, Any]] = []
    revision: str | None = None


class _PresetSchema(BaseModel):
    model_config = ConfigDict(strict=True)

    schema_version: Literal[1]
    name: str | None = None
    description: str | None = None
    target: str | None = None
    drafts: Annotated[list[_DraftSchema], Field(min_length=1)]
    num_speculative_tokens: _Count | None = None
    prompts: str | None = None
    max_tokens: _Count | None = None
    num_prompts: _Count | None = None
    chat: bool | None = None
    enable_thinking: bool | None = None
    engine_args: dict[str, Any] = {}
    env: dict[str, str] = {}


_EXPECTED = {
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "an object",
    "list_type": "a list",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "finite_number": "a finite number",
}


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _problem(error: Any) -> str:
    """One pydantic error as a clause: `drafts[0].floor.mean_acceptance_length is 'four', not a number`."""
    path = _field_path(tuple(error["loc"]))
    kind = error["type"]
    if kind == "missing":
        return f"{path} is missing"
    shown = _shown(error.get("input"))
    if kind in _EXPECTED:
        return f"{path} is {shown}, not {_EXPECTED[kind]}"
    context = error.get("ctx") or {}
    if kind == "greater_than_equal":
        return f"{path} is {shown}, not {context.get('ge')} or more"
    if kind == "less_than_equal":
        return f"{path} is {shown}, more than {context.get('le'):,}, the largest an engine takes (a 64-bit integer)"
    if kind in ("string_too_short", "too_short"):
        return f"{path} is empty"
    if kind == "literal_error":
        return f"{path} is {shown}, expected {context.get('expected')}"
    return f"{path} is {shown}: {error['msg']}"


def _shown(value: Any) -> str:
    if isinstance(value, dict | list):
        return f"a JSON {'object' if isinstance(value, dict) else 'list'}"
    if isinstance(value, int) and not isinstance(value, bool):
        return shown_integer(value)
    text = json.dumps(value) if isinstance(value, str | float | bool) or value is None else repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _setting_problems(engine_args: dict[str, Any]) -> list[str]:
    """The engine arguments a plan reads as serving settings, checked as the command line's are."""
    return [
        f"engine_args.{name} {problem}"
        for name, value in engine_args.items()
        if (problem := setting_problem(name, value)) is not None
    ]


def validate_preset(data: Any, where: str) -> _PresetSchema:
    """The preset schema applied to parsed JSON; UsageError listing every bad field (file and key)."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: not a JSON object", "fix the preset file")
    problems: list[str] = []
    schema: _PresetSchema | None = None
    try:
        schema = _PresetSchema.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(error) for error in exc.errors()]
    raw_args = data.get("engine_args")
    if isinstance(raw_args, dict):
        problems += _setting_problems(raw_args)
    if schema is not None:
        for index, draft in enumerate(schema.drafts):
            if draft.floor is not None and not draft.floor.provenance.strip():
                problems.append(f"drafts[{index}].floor.provenance is missing")
    if problems:
        hint = "every floor states where its number comes from" if all("provenance" in p for p in problems) else ""
        raise UsageError(
            f"{where}: {'; '.join(problems)}", hint or 'fix the preset file (docs/smoke-test.md, "Presets")'
        )
    assert schema is not None
    return schema


def parse_floor(data: Any, where: str) -> Floor:
    """A floor object (a preset's, or one given elsewhere); UsageError naming `where` and the key."""
    try:
        floor = _FloorSchema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{where}.{_problem(error)}" for error in exc.errors())
        raise UsageError(problems, 'write it as {"mean_acceptance_length": 4.0, "provenance": "..."}') from None
    if not floor.provenance.strip():
        raise UsageError(f"{where}.provenance is missing", "every floor states where its number comes from")
    return _floor(floor)


def _floor(floor: _FloorSchema) -> Floor:
    return Floor(floor.mean_acceptance_length, floor.first_position_rate, floor.provenance)


def load_preset(name: str) -> Preset:
    """A preset by name or path, read through the hardened JSON reader and checked against the
    schema; every bad field is named in one UsageError."""
    path = find_preset(name)
    where = f"preset {path}"
    data = read_json_file(path, "preset")
    if isinstance(data, dict) and data.get("schema_version") != PRESET_SCHEMA_VERSION:
        raise UsageError(
            f"{where}: schema_version is {_shown(data.get('schema_version'))}, expected {PRESET_SCHEMA_VERSION}",
            "fix the preset file",
        )
    schema = validate_preset(data, where)
    return Preset(
        name=schema.name or path.stem,
        path=path,
        description=schema.description or "",
        target=schema.target,
        drafts=[
            DraftEntry(
                draft=item.draft,
                label=item.label,
                floor=_floor(item.floor) if item.floor is not None else None,
                expect=item.expect,
                references=item.references,
                revision=item.revision,
            )
            for item in schema.drafts
        ],
        num_speculative_tokens=schema.num_speculative_tokens,
        prompts=schema.prompts,
        max_tokens=schema.max_tokens,
        num_prompts=schema.num_prompts,
        chat=schema.chat,
        enable_thinking=schema.enable_thinking,
        engine_args=schema.engine_args,
        env=schema.env,
    )


def resolve_prompts_path(name: str | None, *, relative_to: Path | None = None) -> Path:
    """A prompts file: a path, or a name under configs/prompts (the preset's own folder first)."""
    name = name or DEFAULT_PROMPTS
    candidate = Path(name).expanduser()
    if path_exists(candidate):
        return candidate  # read (and refused, if it is a folder or a FIFO) by `load_prompts`
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
        # Bounded like a preset (a regular file, at most MAX_PROMPTS_BYTES): a FIFO or /dev/zero
        # given as --prompts would be read forever.
        # utf-8-sig: a byte-order mark some editors write is not part of the first prompt.
        text = read_small_file(path, MAX_PROMPTS_BYTES).decode("utf-8-sig")
    except (OSError, ValueError) as exc:  # missing, a folder or FIFO, too large, not UTF-8
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"prompts file {path}: cannot read it: {reason}", "pass a UTF-8 JSONL file") from None
    if json_values_bound(text) > MAX_PROMPTS_VALUES:
        raise UsageError(f"prompts file {path}: more than {MAX_PROMPTS_VALUES:,} JSON values", hint)
    texts: list[str] = []
    token_ids: list[list[int]] = []
    # JSON Lines end a record at "\n" only: str.splitlines() would also break at U+2028, U+2029
    # and U+0085, which JSON allows raw inside a string (docs/reliability.md, "JSON Lines").
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            value = loads_bounded(line, max_values=MAX_PROMPTS_VALUES)
        except JsonRefused as exc:
            raise UsageError(f"prompts file {path}: line {number} is {exc}", hint) from None
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
        if len(value) > MAX_PROMPT_CHARS:
            raise UsageError(
                f"prompts file {path}: line {number}: a prompt of {len(value):,} characters, more than "
                f"MAX_PROMPT_CHARS ({MAX_PROMPT_CHARS:,}, one prompt's cap)",
                "shorten it: a smoke test needs short prompts",
            )
        texts.append(value)
    if texts and token_ids:
        raise UsageError(f"prompts file {path}: mixes text prompts and prompt_token_ids", "use one kind per file")
    if token_ids:
        return PromptSet([], token_ids[:limit] if limit else token_ids)
    if not texts:
        raise UsageError(f"prompts file {path}: no prompts", hint)
    return PromptSet(texts[:limit] if limit else texts)
