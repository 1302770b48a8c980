"""One fingerprinted place in vLLM's source: a function the plugin wraps or relies on, or a class."""

from __future__ import annotations

from dataclasses import dataclass


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
