"""Dotted paths into a config.json (`dflash_config.block_size`, `speculators_config.proposal_methods`):
read one, read several, write one. The one home of these three walks: the config-key table, the
dialects' readers and writers, the engine views and smoke-test's vLLM overlay all use them.

A path names nested objects only (no list index): a key on the way that is missing, or a value on
the way that is not an object, means the path is absent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def find_path(config: dict[str, Any], path: str) -> tuple[bool, Any]:
    """(present, value) at `path`; (False, None) when it is absent. A null value is present."""
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def values_at(config: dict[str, Any], paths: Iterable[str]) -> dict[str, Any]:
    """The value at each path of `paths` that `config` has, in the order given."""
    out: dict[str, Any] = {}
    for path in paths:
        present, value = find_path(config, path)
        if present:
            out[path] = value
    return out


def set_path(config: dict[str, Any], path: str, value: Any) -> None:
    """Write `value` at `path`, making the objects on the way (a value on the way that is not an
    object is replaced by one)."""
    node = config
    *parents, last = path.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[last] = value
