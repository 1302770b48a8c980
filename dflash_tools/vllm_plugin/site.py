"""One fingerprinted place in vLLM's source (a function the plugin wraps or relies on, or a class),
and how it is checked against a tree of vLLM's files.

Hashes are over `sources.normalize(text)` of the function's own lines (decorators excluded), so
they do not depend on the Python version that reads them.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from dflash_tools.documents import JsonDocument
from dflash_tools.vllm_plugin.sources import FunctionSource, SourceReader, find_function


@dataclass(frozen=True)
class Site:
    """A function (or, with `kind="class"`, a whole class body) and the sha256 of its source text.

    `patched` sites are wrapped by the plugin; the others are code the wrappers rely on, so a
    change to them must refuse too. `must_contain` names the lines the wrappers' logic depends on,
    so that a refusal can say what moved.
    """

    key: str
    path: str
    qualname: str
    sha256: str
    patched: bool
    why: str
    must_contain: tuple[str, ...] = ()
    kind: str = "function"  # "function" | "class"

    @property
    def module(self) -> str:
        return self.path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def find_class(module_text: str, qualname: str) -> FunctionSource | None:
    """A top-level class's whole text (decorators excluded), like `find_function` for functions."""
    try:
        tree = ast.parse(module_text)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == qualname:
            lines = module_text.splitlines()
            end = node.end_lineno or node.lineno
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            text = "\n".join(lines[node.lineno - 1 : end])
            return FunctionSource(qualname=qualname, text=text, first_line=first, def_line=node.lineno, last_line=end)
    return None


def find_site(text: str, site: Site) -> FunctionSource | None:
    return find_class(text, site.qualname) if site.kind == "class" else find_function(text, site.qualname)


@dataclass(frozen=True)
class SiteCheck(JsonDocument):
    site: Site
    status: str  # "match" | "changed" | "missing-file" | "missing-function"
    sha256: str | None = None
    missing_text: tuple[str, ...] = ()
    location: FunctionSource | None = None

    json_keys: ClassVar[tuple[str, ...]] = (
        "key",
        "path",
        "qualname",
        "patched",
        "status",
        "expected_sha256",
        "sha256",
        "line",
    )
    json_properties: ClassVar[Mapping[str, str]] = {
        "key": "site.key",
        "path": "site.path",
        "qualname": "site.qualname",
        "patched": "site.patched",
        "expected_sha256": "site.sha256",
        "line": "location.def_line",
    }

    @property
    def ok(self) -> bool:
        return self.status == "match"

    def describe(self) -> str:
        where = f"{self.site.path}:{self.site.qualname}"
        if self.status == "missing-file":
            return f"{where}: file not found"
        if self.status == "missing-function":
            return f"{where}: function not found"
        if self.status == "changed":
            extra = f" (no longer contains {self.missing_text[0]!r})" if self.missing_text else ""
            return f"{where}: source differs from the release's{extra}"
        return f"{where}: matches"


def check_site(site: Site, reader: SourceReader) -> SiteCheck:
    text = reader(site.path)
    if text is None:
        return SiteCheck(site, "missing-file")
    found = find_site(text, site)
    if found is None:
        return SiteCheck(site, "missing-function")
    missing = tuple(needle for needle in site.must_contain if needle not in found.text)
    status = "match" if found.sha256 == site.sha256 and not missing else "changed"
    return SiteCheck(site, status, found.sha256, missing, found)


def check_sites(reader: SourceReader, sites: tuple[Site, ...]) -> list[SiteCheck]:
    return [check_site(site, reader) for site in sites]
