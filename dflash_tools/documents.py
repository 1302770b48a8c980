"""The one JSON encoder of result dataclasses: a `to_dict()` written once, from the fields.

A result class derives from `JsonDocument`; its JSON object is its dataclass fields in their
declared order, then its `json_properties` (derived values, by attribute, or by a dotted path of
attributes through nested objects: `site.path`, None where a step is None, `launch.shell()` a
method's answer; a mapping of such paths is a nested object), each value encoded
as the documents always have: a nested result by its own `to_dict()`, an enum by its value, a
tuple as a list, a mapping and a list copied, a path as its string. A field says how it differs
with `json_rules(...)` metadata (`field(metadata=json_rules(...))`): another JSON name, left out,
left out when empty (falsy) or when None, its own encoding, or (a mapping) its items written as
the document's own keys, in its place (`inline`). A class whose keys are not its
fields in order, or only some of them, names its keys in `json_keys`: the document is those keys,
in that order (a field or property not named is left out).

Hand-written over `dataclasses.asdict` (which copies deeply, renames nothing, and has no derived
values or omission rules) and over pydantic (a dependency, and a model class per result, for what
is 100-odd lines of the standard library). It imports nothing of ours: every layer may use it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, ClassVar

_NAME = "json_name"
_OMIT = "json_omit"
_OMIT_EMPTY = "json_omit_empty"
_OMIT_NONE = "json_omit_none"
_INLINE = "json_inline"
_ENCODE = "json_encode"


def json_rules(
    *,
    name: str | None = None,
    omit: bool = False,
    omit_empty: bool = False,
    omit_none: bool = False,
    encode: Callable[[Any], Any] | None = None,
    inline: bool = False,
) -> dict[str, Any]:
    """A field's JSON rule, as its `dataclasses.field(metadata=...)` (a plain `field`, which mypy's
    dataclass plugin understands): `name` (its key), `omit` (never written), `omit_empty` (not
    written when falsy), `omit_none` (not written when None), `encode` (the value's JSON, instead
    of the default), `inline` (a mapping's items written as the document's own keys; one that is
    already there keeps its place and takes the item's value, as `{**items}` does)."""
    metadata: dict[str, Any] = {}
    if name is not None:
        metadata[_NAME] = name
    if omit:
        metadata[_OMIT] = True
    if omit_empty:
        metadata[_OMIT_EMPTY] = True
    if omit_none:
        metadata[_OMIT_NONE] = True
    if encode is not None:
        metadata[_ENCODE] = encode
    if inline:
        metadata[_INLINE] = True
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
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def attribute(instance: Any, path: str) -> Any:
    """`instance.a.b` for the path `a.b`; None where a step is None (an optional nested result). A
    step `name()` calls that method, without arguments."""
    value = instance
    for step in path.split("."):
        if value is None:
            return None
        value = getattr(value, step.removesuffix("()"))
        if step.endswith("()"):
            value = value()
    return value


def _derived(instance: Any, paths: Mapping[str, Any]) -> dict[str, Any]:
    """The values `json_properties` names: a path's encoded value, or a nested object of them."""
    return {
        key: _derived(instance, path) if isinstance(path, Mapping) else encode(attribute(instance, path))
        for key, path in paths.items()
    }


def document(instance: Any) -> dict[str, Any]:
    """A dataclass instance's JSON object (see the module's docstring)."""
    keys = getattr(instance, "json_keys", ())
    out: dict[str, Any] = {}
    for field in dataclasses.fields(instance):
        rules = field.metadata
        if rules.get(_OMIT) or (keys and rules.get(_NAME, field.name) not in keys):
            continue
        value = getattr(instance, field.name)
        if (rules.get(_OMIT_EMPTY) and not value) or (rules.get(_OMIT_NONE) and value is None):
            continue
        written = rules[_ENCODE](value) if _ENCODE in rules else encode(value)
        if rules.get(_INLINE):
            out.update(written)
        else:
            out[rules.get(_NAME, field.name)] = written
    properties = getattr(instance, "json_properties", {})
    out.update(_derived(instance, {key: path for key, path in properties.items() if not keys or key in keys}))
    return {key: out[key] for key in keys if key in out} if keys else out


class JsonDocument:
    """A dataclass whose `to_dict()` is `document(self)`."""

    # Derived values written after the fields: JSON key -> attribute (a property), a dotted path
    # of attributes (`site.path`: None where a step is None; `diff()` calls the method), or a
    # mapping of those (a nested object).
    json_properties: ClassVar[Mapping[str, Any]] = {}
    # When set, the document's keys in their order (fields by JSON name, and properties); any
    # other is left out. Empty: every field in declared order, then the properties.
    json_keys: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        return document(self)
