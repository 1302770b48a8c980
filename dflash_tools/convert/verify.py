"""Verify: inspect the staged output and refuse it if it has errors the source did not have."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from dflash_tools.convert.plan import ConvertPlan
from dflash_tools.errors import OperationError
from dflash_tools.findings import Finding, Severity
from dflash_tools.inspect import InspectReport, inspect_loaded
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.reading.local import load_following_links


class VerificationFailed(OperationError):
    """The staged output had error findings the source did not have; nothing was written."""

    def __init__(self, message: str, hint: str, findings: list[Finding]) -> None:
        super().__init__(message, hint)
        self.findings = findings


def verify_staged(
    plan: ConvertPlan, stage: Path, shown_as: Path, symlinked: set[str] | None = None
) -> tuple[InspectReport, list[Finding]]:
    staged = _load_staged(stage, shown_as, symlinked or set())
    after = inspect_loaded(staged, target=plan.target)
    return after, new_error_findings(plan.before.findings, after.findings)


def _load_staged(stage: Path, shown_as: Path, symlinked: set[str]) -> LoadedCheckpoint:
    """The staged output as inspect reads it, except that files this run symlinked are read through.

    `inspect` reports any weight file that resolves outside its folder (DFT004) and skips it; with
    `--link-mode symlink` that is every unchanged shard, by request, so the verification reads
    those headers through the link and judges the content.
    """
    return load_following_links(stage, str(shown_as), symlinked)


def new_error_findings(before: list[Finding], after: list[Finding]) -> list[Finding]:
    """Errors in `after` beyond those `before` had, counted per code (keys differ across dialects)."""
    budget = Counter(f.code for f in before if f.severity is Severity.ERROR)
    out = []
    for finding in after:
        if finding.severity is not Severity.ERROR:
            continue
        if budget[finding.code] > 0:
            budget[finding.code] -= 1
            continue
        out.append(finding)
    return out


def refuse_unverified(new_errors: list[Finding]) -> VerificationFailed:
    summary = "; ".join(f"{f.code}: {f.message}" for f in new_errors[:3])
    more = f" (and {len(new_errors) - 3} more)" if len(new_errors) > 3 else ""
    return VerificationFailed(
        f"the converted checkpoint would have errors the source does not have: {summary}{more}; nothing was written",
        "check the flags you passed (for example --block-size against the weights), or rerun with --dry-run "
        "to see the config; if the flags are right, this is a bug in dflash-tools",
        new_errors,
    )
