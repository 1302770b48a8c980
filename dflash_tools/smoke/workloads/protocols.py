"""Sampling protocols (`configs/protocols/*.json`): how a measurement decodes, stated as data.

An acceptance length is only comparable to another measured under the same protocol: greedy
decoding accepts more drafts than sampling at T = 1, and a thinking answer differs from a plain
one. A run names its protocol, and a published reference names the one it was measured under
(`smoke.workloads.references`), so that a verdict can say "same protocol" or how the two differ.

A protocol file: `schema_version` 1, `name`, `description`, `source` (where its settings come
from), `temperature`, `top_p` (null: the server's default), `top_k` (null or 0: off), `chat`,
`chat_template_kwargs` (e.g. `{"enable_thinking": true}`), `max_tokens`, `num_prompts`,
`order` ("dataset": the first rows in the dataset's order; "shuffled-42": z-lab's benchmark
order, `random.Random(42)` over the row indices), `warmup` (requests sent first and not measured).

A protocol file is read like a preset (`plan.presets.read_json_file`: a regular file of at most
1 MiB, strict UTF-8, bounded values and nesting), and its counts are held to the ranges of the
command line's options (`smoke.limits.BOUNDS`: `num_prompts` as --num-prompts, `max_tokens` as
--max-tokens, `warmup` and `top_k` their own) when it is loaded, before any prompt is built.

Imports: `draft.profiles` (where the bundled configs live), `plan.presets` (the bounded reader),
`smoke.limits` (the ranges).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dflash_tools.documents import JsonDocument
from dflash_tools.draft.profiles import configs_dir
from dflash_tools.errors import UsageError
from dflash_tools.smoke.limits import BOUNDS

PROTOCOL_SCHEMA_VERSION = 1
ORDERS = ("dataset", "shuffled-42")
GREEDY = "greedy"


@dataclass(frozen=True)
class MeasurementProtocol(JsonDocument):
    name: str
    description: str = ""
    source: str = ""
    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    chat: bool = True
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    max_tokens: int | None = None
    num_prompts: int | None = None
    order: str = "dataset"
    warmup: int = 0

    json_keys: ClassVar[tuple[str, ...]] = (
        "name",
        "summary",
        "temperature",
        "top_p",
        "top_k",
        "chat",
        "chat_template_kwargs",
        "max_tokens",
        "num_prompts",
        "order",
        "warmup",
        "source",
    )
    json_properties: ClassVar[Mapping[str, str]] = {"summary": "summary()"}

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def enable_thinking(self) -> bool:
        return bool(self.chat_template_kwargs.get("enable_thinking", False))

    def summary(self) -> str:
        """`T=1, top-p 0.95, top-k 20, thinking on (reasoning xhigh)` or `greedy, thinking off`."""
        parts = ["greedy" if self.greedy else f"T={self.temperature:g}"]
        if self.top_p is not None and self.top_p < 1:
            parts.append(f"top-p {self.top_p:g}")
        if self.top_k:
            parts.append(f"top-k {self.top_k}")
        if self.chat:
            thinking = "thinking on" if self.enable_thinking else "thinking off"
            effort = self.chat_template_kwargs.get("reasoning_effort")
            parts.append(f"{thinking} (reasoning {effort})" if effort and self.enable_thinking else thinking)
        else:
            parts.append("raw completions")
        if self.max_tokens:
            parts.append(f"max {self.max_tokens} tokens")
        return ", ".join(parts)

    def sampling_fields(self) -> dict[str, Any]:
        """The OpenAI request fields of this protocol (vLLM and SGLang read the same names)."""
        fields: dict[str, Any] = {"temperature": self.temperature}
        if self.top_p is not None:
            fields["top_p"] = self.top_p
        if self.top_k:
            fields["top_k"] = self.top_k
        return fields


def greedy(*, chat: bool, enable_thinking: bool) -> MeasurementProtocol:
    """What a run without a protocol does: greedy, with the command line's chat and thinking."""
    return MeasurementProtocol(
        name=GREEDY,
        description="greedy decoding",
        temperature=0.0,
        chat=chat,
        chat_template_kwargs={"enable_thinking": enable_thinking} if chat else {},
    )


def protocols_dir() -> Path:
    return configs_dir() / "protocols"


def list_protocols() -> list[str]:
    folder = protocols_dir()
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def _number(data: dict[str, Any], key: str, where: str, *, default: float | None, low: float, high: float) -> Any:
    value = data.get(key, default)
    if value is None and default is None:
        return None  # null: the server's default (top_p)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"{where}: {key} is {value!r}, not a number", "fix the protocol file")
    if not low <= value <= high:
        raise UsageError(f"{where}: {key} is {value!r}, outside [{low:g}, {high:g}]", "fix the protocol file")
    return value


# A protocol's counts and the option whose range each takes (`smoke.limits.BOUNDS`).
_COUNT_BOUNDS = {"num_prompts": "--num-prompts", "max_tokens": "--max-tokens", "warmup": "warmup", "top_k": "top_k"}


def _count(data: dict[str, Any], key: str, where: str) -> int | None:
    """A count of the protocol (None when absent), in the range of its command-line option."""
    value = data.get(key)
    if value is None:
        return None
    bound = BOUNDS[_COUNT_BOUNDS[key]]
    if isinstance(value, bool) or not isinstance(value, int) or not bound.low <= value <= bound.high:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise UsageError(f"{where}: {key} is {shown}, not {bound.describe()}", "fix the protocol file")
    return value


def parse_protocol(data: Any, where: str) -> MeasurementProtocol:
    if not isinstance(data, dict):
        raise UsageError(f"{where}: not a JSON object", "fix the protocol file")
    version = data.get("schema_version")
    # Strict: `true == 1` in Python, and a float 1.0 is not a schema version either.
    if type(version) is not int or version != PROTOCOL_SCHEMA_VERSION:
        shown = repr(version) if len(repr(version)) <= 40 else repr(version)[:37] + "..."
        raise UsageError(
            f"{where}: schema_version is {shown}, expected {PROTOCOL_SCHEMA_VERSION}", "fix the protocol file"
        )
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{where}: name is missing", "fix the protocol file")
    kwargs = data.get("chat_template_kwargs", {})
    if not isinstance(kwargs, dict):
        raise UsageError(f"{where}: chat_template_kwargs is not an object", "fix the protocol file")
    order = data.get("order", "dataset")
    if order not in ORDERS:
        raise UsageError(f"{where}: order is {order!r}, not one of {', '.join(ORDERS)}", "fix the protocol file")
    chat = data.get("chat", True)
    if not isinstance(chat, bool):
        raise UsageError(f"{where}: chat is {chat!r}, not true or false", "fix the protocol file")
    text = {key: data.get(key, "") for key in ("description", "source")}
    if not all(isinstance(value, str) for value in text.values()):
        raise UsageError(f"{where}: description and source must be text", "fix the protocol file")
    top_k = _count(data, "top_k", where)
    max_tokens = _count(data, "max_tokens", where)
    return MeasurementProtocol(
        name=name,
        description=text["description"],
        source=text["source"],
        temperature=float(_number(data, "temperature", where, default=0.0, low=0.0, high=10.0)),
        top_p=_number(data, "top_p", where, default=None, low=0.0, high=1.0),
        top_k=top_k or None,
        chat=chat,
        chat_template_kwargs=dict(kwargs),
        max_tokens=max_tokens or None,
        num_prompts=_count(data, "num_prompts", where),
        order=order,
        warmup=_count(data, "warmup", where) or 0,
    )


def load_protocol(name: str | os.PathLike[str]) -> MeasurementProtocol:
    """A bundled protocol by name (`greedy`, `zlab-card`), or a path to a protocol .json file."""
    from dflash_tools.plan.presets import read_json_file

    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str) or not name.strip() or "\0" in name:
        shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
        raise UsageError(
            f"protocol is {shown} ({type(name).__name__}), not a protocol name or file",
            "pass a bundled protocol's name (greedy, zlab-card) or a path to a .json file",
        )
    candidate = Path(name).expanduser()
    if candidate.suffix == ".json" and (candidate.exists() or candidate.is_symlink()):
        path = candidate  # a FIFO, a folder or a sparse terabyte is refused by the bounded reader
    else:
        path = protocols_dir() / f"{name}.json"
        if "/" in name or "\\" in name or not path.is_file():
            known = ", ".join(list_protocols()) or "none"
            raise UsageError(
                f"protocol {name!r}: no such protocol", f"bundled protocols: {known}; or pass a .json file"
            )
    return parse_protocol(read_json_file(path, "protocol"), f"protocol {path}")
