"""What a conversion did: the files it wrote or linked, backups, verification, push (the JSON document)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflash_tools.convert.plan import ConvertPlan
from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.findings import Finding, Severity
from dflash_tools.inspect import InspectReport

SCHEMA_VERSION = 1
BACKUP_SUFFIX = ".bak"


@dataclass(frozen=True)
class FileRecord(JsonDocument):
    path: str
    action: str  # "write" | "hardlink" | "copy" | "symlink" | "repack" | "omit" | planned: "link"
    bytes: int = 0
    detail: str = field(default="", metadata=json_rules(omit_empty=True))


@dataclass
class ConvertResult:
    plan: ConvertPlan
    mode: str  # "output" | "in-place" | "dry-run"
    output: Path | None
    written: bool = False
    files: list[FileRecord] = field(default_factory=list)
    after: InspectReport | None = None
    new_errors: list[Finding] = field(default_factory=list)
    backups: list[Path] = field(default_factory=list)
    push: PushResult | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.new_errors

    @property
    def remaining_errors(self) -> list[Finding]:
        """Error findings of the written checkpoint (new or not): what convert could not fix."""
        if self.after is None:
            return []
        return [f for f in self.after.findings if f.severity is Severity.ERROR]

    @property
    def bytes_copied(self) -> int:
        return sum(f.bytes for f in self.files if f.action in ("copy", "repack", "write"))

    @property
    def weight_bytes_copied(self) -> int:
        """Bytes of tensor data written (copies and repacks of .safetensors files)."""
        return sum(f.bytes for f in self.files if f.action in ("copy", "repack") and f.path.endswith(".safetensors"))

    @property
    def bytes_linked(self) -> int:
        return sum(f.bytes for f in self.files if f.action in ("hardlink", "symlink"))

    # Not a declaration: the command's document, its plan's keys and its own around them.
    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "command": "convert"}
        document.update(self.plan.to_dict())
        document.update(
            {
                "mode": self.mode,
                "output": str(self.output) if self.output is not None else None,
                "written": self.written,
                "files": [f.to_dict() for f in self.files],
                "bytes_copied": self.bytes_copied,
                "weight_bytes_copied": self.weight_bytes_copied,
                "bytes_linked": self.bytes_linked,
                "backups": [str(p) for p in self.backups],
                "verification": None,
                "push": self.push.to_dict() if self.push else None,
                "notes": list(self.notes),
                "ok": self.ok,
            }
        )
        if self.after is not None:
            document["verification"] = {
                "ok": not self.new_errors,
                "new_errors": [f.to_dict() for f in self.new_errors],
                "remaining_errors": sorted({f.code for f in self.remaining_errors}),
                "findings": [f.to_dict() for f in self.after.findings],
                "geometry": self.after.geometry.to_dict() if self.after.geometry else None,
            }
        return document


@dataclass(frozen=True)
class PushResult(JsonDocument):
    repo_id: str
    commit_url: str | None
    pr_url: str | None
