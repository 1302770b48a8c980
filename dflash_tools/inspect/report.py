"""`inspect` as a library call: source -> config + headers -> description -> geometry -> findings."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dflash_tools import dialects
from dflash_tools.draft.checks import check_config
from dflash_tools.draft.config_keys import check_config_keys, covered_paths
from dflash_tools.draft.description import Dialect, DraftDescription
from dflash_tools.draft.geometry import Geometry, resolve_geometry
from dflash_tools.draft.inspected import InspectedDraft
from dflash_tools.draft.profiles import (
    ProfileMatch,
    config_sha256,
    match_profile,
    profile_findings,
)
from dflash_tools.draft.sliding_window import check_sliding_window
from dflash_tools.draft.target import TargetDescription, check_own_layer_count, check_target, target_argument
from dflash_tools.draft.tensors import compare, expected_tensors, expected_totals, summarize
from dflash_tools.findings import Finding, Severity, has_errors, make_finding, sort_findings
from dflash_tools.reading.checkpoint import LoadedCheckpoint, optional_count
from dflash_tools.reading.safetensors_header import TensorHeader
from dflash_tools.reading.source import load_checkpoint

# 2: the engine columns name K `num_speculative_tokens` (was `draft_tokens`), as plan does
# (docs/json.md, "Versions").
SCHEMA_VERSION = 2
# Findings kept per source, errors first. A hostile checkpoint can raise hundreds of thousands
# (an index naming 10,000 shards); past this many, JSON counts the rest in `findings_omitted`
# and the human report ends the list with "... and N more".
MAX_FINDINGS = 200


@dataclass
class InspectReport:
    loaded: LoadedCheckpoint
    description: DraftDescription | None
    geometry: Geometry | None
    findings: list[Finding]
    target: TargetDescription | None = None
    profile: ProfileMatch | None = None
    # The config's dialect, detected once (known even when the config is too broken to describe
    # the draft); None when no dialect's markers match.
    dialect: Dialect | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Findings past MAX_FINDINGS, by severity ("error", "warning", "info"): counted, not kept.
    omitted: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings) and not self.omitted.get(Severity.ERROR.value)

    def severity_counts(self) -> dict[Severity, int]:
        """Every finding by severity, the omitted ones included."""
        counts = {s: self.omitted.get(s.value, 0) for s in Severity}
        for finding in self.findings:
            counts[finding.severity] += 1
        return counts

    @property
    def tensors(self) -> dict[str, TensorHeader]:
        return self.loaded.tensors

    # Not a declaration: the schema-versioned document, its parts composed from the loaded checkpoint.
    def to_dict(self, *, include_tensors: bool = False) -> dict[str, Any]:
        """The stable JSON document (`SCHEMA_VERSION`); the command's adds `command`, `exit_code`
        and an `ok` that follows `--fail-on` (`serving.inspect_sources`)."""
        desc, geometry, loaded = self.description, self.geometry, self.loaded
        document: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "source": loaded.source,
            "location": loaded.location,
            "source_kind": loaded.kind,
            "revision": loaded.revision,
            "commit": loaded.commit,
            "config_sha256": config_sha256(loaded.config_text),
            "dialect": self.dialect.value if self.dialect else None,
            "algorithm": desc.algorithm.value if desc else None,
            "geometry": geometry.to_dict() if geometry else None,
            "model": desc.model_fields() if desc else None,
            "tensors": None,
            "weights_inspected": loaded.weights_inspected,
            "findings": [f.to_dict() for f in self.findings],
            "findings_omitted": sum(self.omitted.values()),
            "ok": self.ok,
        }
        if loaded.weights_inspected:
            tensors = summarize(loaded.tensors).to_dict()
            tensors["files"] = len(loaded.shards)
            tensors["header_bytes_read"] = loaded.bytes_read
            document["tensors"] = tensors
        if desc is not None:
            count, parameters = expected_totals(expected_tensors(desc))
            document["expected_tensors"] = {"count": count, "parameters": parameters}
        if self.target is not None:
            document["target"] = self.target.to_dict()
        if self.profile is not None:
            document["profile"] = self.profile.to_dict()
        if include_tensors:
            document["tensor_table"] = [
                {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.num_bytes, "file": t.file}
                for t in sorted(loaded.tensors.values(), key=lambda t: _natural_key(t.name))
            ]
        document.update(self.extra)
        return document


def _natural_key(name: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in name.split(".")]


def describe(config: dict[str, Any], file: str = "config.json") -> tuple[DraftDescription | None, list[Finding]]:
    """Read a config dict into a description; failures become DFT002 / DFT006 findings. `file`: the
    name the config was read from (a JSON file given alone is not called config.json)."""
    return describe_as(config, dialects.detect(config), file)


def describe_as(
    config: dict[str, Any], dialect: Dialect | None, file: str = "config.json"
) -> tuple[DraftDescription | None, list[Finding]]:
    """`describe` of a config whose dialect was detected already (None: no dialect matched)."""
    try:
        desc = dialects.read_as(config, dialect)
    except dialects.UnknownDialect:
        return None, [
            make_finding(
                "DFT002",
                f"{file} matches no known draft dialect; looked for: " + "; ".join(dialects.markers()),
                "is this a draft checkpoint? DFlash, DFlash2 and DSpark drafts in z-lab, speculators, "
                "Open Spec or native DSpark form are supported",
                keys=("architectures", "speculators_model_type", "open_spec_config_version"),
            )
        ]
    except dialects.ConfigInvalid as exc:
        return None, list(exc.findings)
    return desc, list(desc.reader_findings)


def inspect_loaded(
    loaded: LoadedCheckpoint,
    *,
    target: TargetDescription | None = None,
    num_speculative_tokens: int | None = None,
) -> InspectReport:
    """The inspect walk of a checkpoint already read: the dialect detected once, the config
    described, the geometry, tensors, target and profile checked."""
    findings = list(loaded.findings)
    dialect: Dialect | None = None
    desc: DraftDescription | None = None
    geometry: Geometry | None = None
    if loaded.config is not None:
        dialect = dialects.detect(loaded.config)
        given_alone = loaded.kind == "local" and loaded.location.endswith(".json")
        file = Path(loaded.location).name if given_alone else "config.json"
        desc, read_findings = describe_as(loaded.config, dialect, file)
        if dialect is not None:
            # The table of engine-read keys owns type/range findings; a reader's own DFT006 for
            # the same key is the same news.
            table_findings = check_config_keys(loaded.config, dialect.spec)
            covered = covered_paths(table_findings)
            read_findings = [f for f in read_findings if not (f.code == "DFT006" and set(f.keys) & covered)]
            findings.extend(table_findings)
        findings.extend(read_findings)
    if desc is not None:
        geometry, geometry_findings = resolve_geometry(desc, num_speculative_tokens)
        findings.extend(geometry_findings)
        findings.extend(check_config(desc))
        if geometry is not None:
            findings.extend(check_sliding_window(desc, geometry.num_query_tokens))
        if loaded.weights_inspected:
            findings.extend(compare(desc, loaded.tensors))
        if target is not None:
            findings.extend(check_target(desc, target, loaded.tensors if loaded.weights_inspected else None))
        else:
            findings.extend(check_own_layer_count(desc))
    report = InspectReport(loaded, desc, geometry, [], target, dialect=dialect)
    if loaded.config is not None:
        # A config that describes no draft may still be a published release (by its sha256).
        inspected = None
        if desc is not None:
            tensors = summarize(loaded.tensors) if loaded.weights_inspected else None
            inspected = InspectedDraft(desc, geometry, tensors)
        report.profile = match_profile(loaded.source, inspected, config=loaded.config, config_text=loaded.config_text)
        findings.extend(profile_findings(report.profile))
    report.findings, report.omitted = cap_findings(finish_findings(loaded, findings))
    return report


def finish_findings(loaded: LoadedCheckpoint, findings: list[Finding]) -> list[Finding]:
    """Findings as a report holds them: SRC/OUT in hints filled in for this source, repeats
    dropped, errors first. Layers above inspect that add findings (the engine view) use it too,
    then `cap_findings`."""
    return sort_findings(_dedupe([_with_paths(f, _convert_source(loaded)) for f in findings]))


def cap_findings(findings: list[Finding], limit: int = MAX_FINDINGS) -> tuple[list[Finding], dict[str, int]]:
    """The first `limit` of severity-sorted findings, and the rest counted by severity."""
    omitted: dict[str, int] = {}
    for finding in findings[limit:]:
        omitted[finding.severity.value] = omitted.get(finding.severity.value, 0) + 1
    return findings[:limit], omitted


def _convert_source(loaded: LoadedCheckpoint) -> str:
    """What to hand `convert`: it works on folders, so a local file's source is its folder."""
    if loaded.kind == "local" and not Path(loaded.location).is_dir():
        parent = Path(loaded.source).parent
        return str(parent) if str(parent) != "." else "."
    return loaded.source


def _with_paths(finding: Finding, source: str) -> Finding:
    """Hints are written with SRC/OUT placeholders; fill in this source and a suggested output."""
    if "SRC" not in finding.hint:
        return finding
    name = source.removeprefix("hf://").rstrip("/")
    name = name or "."
    out = "./" + (name.rsplit("/", 1)[-1] or "draft").removeprefix("example:") + "-normalized"
    if name == ".":  # the current folder: the result goes beside it, not inside it
        out = "../" + (Path.cwd().name or "draft") + "-normalized"
    hint = finding.hint.replace("SRC", shlex.quote(name)).replace("OUT", shlex.quote(out))
    return replace(finding, hint=hint)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str]] = set()
    out = []
    for finding in findings:
        key = (finding.code, finding.message)
        if key not in seen:
            seen.add(key)
            out.append(finding)
    return out


def inspect_checkpoint(
    source: str | os.PathLike[str],
    *,
    target: str | os.PathLike[str] | TargetDescription | None = None,
    num_speculative_tokens: int | None = None,
    revision: str | None = None,
    token: str | None = None,
    target_revision: str | None = None,
    timeout: float | None = None,
) -> InspectReport:
    """Inspect one checkpoint, without the engine views: the walk the layers below `serving` use.
    The command's own call, with `engines`, is `dflash_tools.inspect_checkpoint`
    (`serving.inspect_sources`). Raises SourceError when the draft or target cannot be reached,
    and UsageError for an argument of the wrong type (a source that is not a str or a path, ...)."""
    k = optional_count(num_speculative_tokens, "num_speculative_tokens")
    loaded = load_checkpoint(source, revision=revision, token=token, timeout=timeout)
    target_spec = target_argument(target, revision=target_revision, token=token, timeout=timeout)
    return inspect_loaded(loaded, target=target_spec, num_speculative_tokens=k)
