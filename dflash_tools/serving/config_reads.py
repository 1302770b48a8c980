"""Reading a draft config the way an engine does: a key's locations in order, its numbers as the
engine converts them. Plain functions of a config dict and a `KeyRead` rule; no engine imported."""

from __future__ import annotations

import math
from typing import Any

from dflash_tools.draft.config_paths import find_path
from dflash_tools.draft.model_limits import within_limit
from dflash_tools.draft.target import text_value
from dflash_tools.engine_rules import KeyRead


def num_hidden_layers(config: dict[str, Any]) -> Any:
    """A config's layer count as the engines read it: text_config's when it has one, else the top
    level's (the same rule as a target's, `draft.target.text_value`). A count beyond any model's
    (`model_limits`) is None, not stated: the views derive layer ids per draft layer, and inspect
    already has a DFT006 for it."""
    return within_limit("num_hidden_layers", text_value(config, "num_hidden_layers")[0])


# Reading a key the engine's way
# --------------------------------------------------------------------------------------------


def lookup(config: dict[str, Any], rule: KeyRead | None) -> tuple[Any, str | None]:
    """(value, location) from the first of the rule's locations that is present; (None, None)
    when none is. A location present with null stops the search, as the engines' `dict.get`
    with a fallback does, unless the rule says the engine skips null and empty values
    (`KeyRead.empty_is_absent`)."""
    if rule is None:
        return None, None
    for location in rule.locations:
        present, value = find_path(config, location)
        if present and rule.empty_is_absent and (value is None or value == [] or value == {}):
            continue
        if present:
            return value, location
    return None, None


def source_name(location: str | None) -> str:
    if location is None:
        return "default"
    head = location.split(".", 1)[0]
    return head if "." in location else "top-level"


def as_int(value: Any) -> int | None:
    """An integer as the engines accept one (`int(value)` of a JSON number or numeric string)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def int_list(value: Any) -> list[int] | None:
    if not isinstance(value, list | tuple) or not value:
        return None
    ids = [as_int(item) for item in value]
    return [i for i in ids if i is not None] if all(i is not None for i in ids) else None
