"""The one JSON encoder of result dataclasses: a `to_dict()` written once, from the fields.

A result class derives from `JsonDocument`; its JSON object is its dataclass fields in their
declared order, then its `json_properties` (derived values, by attribute), each value encoded
as the documents always have: a nested result by its own `to_dict()`, an enum by its value, a
tuple as a list, a mapping and a list copied. A field says how it differs with `json_field(...)`
metadata (`field(metadata=json_rules(...))`): another JSON name, left out, left out when empty
(falsy), or its own encoding.

Hand-written over `dataclasses.asdict` (which copies deeply, renames nothing, and has no derived
values or omission rules) and over pydantic (a dependency, and a model class per result, for what
is 60 lines of the standard library). It imports nothing of ours: every layer may use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, ClassVar

_NAME = "json_name"
_OMIT = "json_omit"
_OMIT_EMPTY = "json_omit_empty"
_ENCODE = "json_encode"


def json_rules(
    *,
    name: str | None = None,
    omit: bool = False,
    omit_empty: bool = False,
    encode: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """A field's JSON rule, as its `dataclasses.field(metadata=...)` (a plain `field`, which mypy's
    dataclass plugin understands): `name` (its key), `omit` (never written), `omit_empty` (not
    written when falsy), `encode` (the value's JSON, instead of the default)."""
    metadata: dict[str, Any] = {}
    if name is not None:
        metadata[_NAME] = name
    if omit:
        metadata[_OMIT] = True
    if omit_empty:
        metadata[_OMIT_EMPTY] = True
    if encode is not None:
        metadata[_ENCODE] = encode
    return metadata


def encode(value: Any) -> Any:
    """One value as the documents write it."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and not isinstance(value, type):
        return to_dict()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {key: encode(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [encode(item) for item in value]
    return value


def document(instance: Any) -> dict[str, Any]:
    """A dataclass instance's JSON object (see the module's docstring)."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(instance):
        rules = field.metadata
        if rules.get(_OMIT):
            continue
        value = getattr(instance, field.name)
        if rules.get(_OMIT_EMPTY) and not value:
            continue
        out[rules.get(_NAME, field.name)] = rules[_ENCODE](value) if _ENCODE in rules else encode(value)
    for key, attribute in getattr(instance, "json_properties", {}).items():
        out[key] = encode(getattr(instance, attribute))
    return out


class JsonDocument:
    """A dataclass whose `to_dict()` is `document(self)`."""

    # Derived values written after the fields: JSON key -> attribute (a property).
    json_properties: ClassVar[Mapping[str, str]] = {}

    def to_dict(self) -> dict[str, Any]:
        return document(self)
