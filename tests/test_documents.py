"""The one JSON encoder of results (`dflash_tools.documents`): the rules a class declares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dflash_tools.documents import JsonDocument, json_rules


@dataclass
class Inner(JsonDocument):
    name: str

    def shout(self) -> str:
        return self.name.upper()


@dataclass
class Outer(JsonDocument):
    inner: Inner | None
    where: Path
    gone: str | None = field(default=None, metadata=json_rules(omit_none=True))
    extra: dict[str, Any] = field(default_factory=dict, metadata=json_rules(inline=True))

    json_properties: ClassVar[Mapping[str, Any]] = {
        "loud": "inner.shout()",
        "nested": {"name": "inner.name"},
    }


@dataclass
class Picked(JsonDocument):
    a: int
    b: int
    hidden: int = 0

    json_keys: ClassVar[tuple[str, ...]] = ("b", "sum", "a")
    json_properties: ClassVar[Mapping[str, str]] = {"sum": "total"}

    @property
    def total(self) -> int:
        return self.a + self.b


def test_omit_none_inline_paths_and_nested_objects() -> None:
    document = Outer(Inner("x"), Path("/d"), extra={"k": 1}).to_dict()
    assert list(document) == ["inner", "where", "k", "loud", "nested"]
    assert document == {"inner": {"name": "x"}, "where": "/d", "k": 1, "loud": "X", "nested": {"name": "x"}}
    # A None on the way is None, not an error; a value that is set is written.
    assert Outer(None, Path("/d"), gone="g").to_dict()["loud"] is None
    assert Outer(None, Path("/d"), gone="g").to_dict()["gone"] == "g"


def test_json_keys_orders_and_selects() -> None:
    document = Picked(1, 2, hidden=5).to_dict()
    assert list(document.items()) == [("b", 2), ("sum", 3), ("a", 1)]
