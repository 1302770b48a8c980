"""The corpus of real `config.json` files (tests/corpus/README.md): each entry and what is known of it.

`provenance.json` has one row per file: where the draft is published (`repo`, `revision`), the
file's `sha256` and `bytes`, the sha256 a public source states for the published file
(`published_sha256`), how the bytes were obtained (`how`, `fidelity`) and where (`found_in`).
Three classes, one folder each: `published` (the published file's bytes), `edited` (copies that
their source reduced, reflowed or rebuilt from a dict: real keys and values, not the published
bytes) and `unpublished` (users' own checkpoints, never on the Hub).

The engine tiers import this module too, so it imports nothing of the tests' own set-up.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).parent
CLASSES = ("published", "edited", "unpublished", "framework")


@dataclass(frozen=True)
class Entry:
    dir: str  # "<class>/<folder>"
    klass: str
    repo: str | None
    revision: str | None
    sha256: str
    size: int
    published_sha256: str | None
    architecture: str | None
    how: str
    found_in: tuple[dict[str, Any], ...]

    @property
    def folder(self) -> Path:
        return CORPUS / self.dir

    @property
    def config_path(self) -> Path:
        return self.folder / "config.json"

    @property
    def verified(self) -> bool:
        """The bytes hash to the sha256 a public source states for the published file."""
        return self.published_sha256 is not None and self.published_sha256 == self.sha256

    def config(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.config_path.read_text(encoding="utf-8"))
        return loaded

    def file_sha256(self) -> str:
        return hashlib.sha256(self.config_path.read_bytes()).hexdigest()


def load_entries() -> tuple[Entry, ...]:
    rows = json.loads((CORPUS / "provenance.json").read_text(encoding="utf-8"))
    return tuple(
        Entry(
            dir=row["dir"],
            klass=row["class"],
            repo=row["repo"],
            revision=row["revision"],
            sha256=row["sha256"],
            size=row["bytes"],
            published_sha256=row["published_sha256"],
            architecture=row["architecture"],
            how=row["how"],
            found_in=tuple(row["found_in"]),
        )
        for row in rows
    )


ENTRIES = load_entries()
BY_DIR = {entry.dir: entry for entry in ENTRIES}

# Files that the tool cannot read yet, and why (none today). Their tests are strict xfails, so
# they fail (XPASS) the day the tool reads them, and the entry here is then deleted.
PENDING_ARCHITECTURES: dict[str, str] = {}
