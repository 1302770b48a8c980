"""`convert` as a library: normalize a draft checkpoint, or translate it between z-lab and speculators.

    plan = plan_conversion("./draft")                  # reads config + headers, writes nothing
    plan.changed, plan.diff(), plan.decisions
    result = convert_checkpoint("./draft", "./out")    # staged, verified, renamed into place

The pipeline: read (config + safetensors headers) -> decide the geometry (SPEC §2: explicit,
inferred or default; conflicts refused with the flag that settles them) -> render the config
(same dialect: `normalize`; across dialects: the target dialect's writer) -> decide tensor edits
(drops, prefix renames) -> build the output in a staging folder next to the destination (config
written faithfully, untouched weights hard-linked or copied, edited shards repacked by streaming)
-> inspect the staged output and refuse it if it has error findings the source did not have ->
rename it into place. The source is never written, except with `in_place=True` (a plain local
folder only; backups kept).
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import stat
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dflash_tools import __version__, dialects
from dflash_tools.description import Algorithm, Dialect, DraftDescription, ValueSource
from dflash_tools.dialects import speculators as speculators_dialect
from dflash_tools.dialects import zlab as zlab_dialect
from dflash_tools.errors import OperationError, SourceError, UsageError
from dflash_tools.fileops import (
    LinkMode,
    atomic_write,
    atomic_write_bytes,
    atomic_write_text,
    cleanup_on_error,
    contains,
    dumps_like,
    fsync_dir,
    in_hf_cache,
    is_empty_dir,
    make_staging_dir,
    pause_point,
    place_file,
    publish_dir,
    remove_tree,
    same_json,
)
from dflash_tools.findings import Finding, Severity
from dflash_tools.geometry import Geometry, layout_name, resolve_geometry, sample_from_anchor_key
from dflash_tools.inspect import InspectReport, inspect_loaded
from dflash_tools.locking import folder_lock, writing_in_place, writing_output
from dflash_tools.repack import TensorEdits, plan_repack, rewrite_index, write_repacked
from dflash_tools.safetensors_header import read_local_header
from dflash_tools.source import (
    CONFIG_NAME,
    INDEX_NAME,
    LoadedCheckpoint,
    add_shard,
    check_index_against_shards,
    load_checkpoint,
    load_local,
    read_index,
    read_small_file,
    safe_shard_name,
)
from dflash_tools.target import TargetSpec, load_target
from dflash_tools.tensors import Requirement, expected_tensors

SCHEMA_VERSION = 1
# Cross-dialect outputs carry the source config under this key, so converting back restores it
# exactly (key order, auto_map, token ids, versions...). Engines and both dialects' loaders
# ignore unknown top-level keys.
RESTORE_KEY = "dflash_tools_restore"
TARGET_FAMILIES = ("zlab", "speculators")
BACKUP_SUFFIX = ".bak"
# Longest first: `model.draft_model.x` must lose both parts.
_TENSOR_PREFIXES = ("model.draft_model.", "draft_model.", "model.")
_WRITERS = {"zlab": zlab_dialect, "speculators": speculators_dialect}


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """How one value of the output was decided: kept, defaulted, inferred, set by a flag, fixed."""

    key: str
    value: Any
    source: str  # "explicit" | "inferred" | "default" | "flag" | "fixed" | "mapped"
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "source": self.source, "message": self.message}


@dataclass(frozen=True)
class TensorChange:
    name: str
    action: str  # "drop" | "rename"
    file: str
    reason: str
    new_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "action": self.action, "file": self.file, "reason": self.reason}
        if self.new_name is not None:
            out["new_name"] = self.new_name
        return out


@dataclass
class ConvertPlan:
    """Everything `convert` will do, decided before anything is written."""

    loaded: LoadedCheckpoint
    before: InspectReport
    description: DraftDescription
    output_dialect: Dialect
    geometry: Geometry
    config: dict[str, Any]
    config_text: str
    decisions: list[Decision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tensor_changes: list[TensorChange] = field(default_factory=list)
    target: TargetSpec | None = None
    output_geometry: Geometry | None = None  # what the written config says, as inspect reads it

    @property
    def original_text(self) -> str:
        return self.loaded.config_text or ""

    @property
    def cross_dialect(self) -> bool:
        return self.output_dialect.family != self.description.dialect.family

    @property
    def config_changed(self) -> bool:
        return self.config_text != self.original_text

    @property
    def edits(self) -> TensorEdits:
        return TensorEdits(
            drop=frozenset(c.name for c in self.tensor_changes if c.action == "drop"),
            rename={c.name: c.new_name for c in self.tensor_changes if c.action == "rename" and c.new_name},
        )

    @property
    def changed(self) -> bool:
        return self.config_changed or bool(self.tensor_changes)

    def changed_keys(self) -> list[str]:
        """Dotted paths of every config value added, removed or changed."""
        return _changed_paths(self.loaded.config or {}, self.config)

    def diff(self) -> str:
        """Unified diff of config.json (empty when it does not change)."""
        return "".join(
            difflib.unified_diff(
                self.original_text.splitlines(keepends=True),
                self.config_text.splitlines(keepends=True),
                fromfile=f"a/{CONFIG_NAME}",
                tofile=f"b/{CONFIG_NAME}",
            )
        )

    def to_dict(self) -> dict[str, Any]:
        before = self.before.geometry
        return {
            "source": self.loaded.source,
            "source_kind": self.loaded.kind,
            "location": self.loaded.location,
            "commit": self.loaded.commit,
            "dialect": {"before": self.description.dialect.value, "after": self.output_dialect.value},
            "algorithm": self.description.algorithm.value,
            "geometry": {
                "before": before.to_dict() if before else None,
                "after": (self.output_geometry or self.geometry).to_dict(),
            },
            "decisions": [d.to_dict() for d in self.decisions],
            "warnings": list(self.warnings),
            "config": {"changed": self.config_changed, "changed_keys": self.changed_keys(), "diff": self.diff()},
            "tensors": {"changes": [c.to_dict() for c in self.tensor_changes]},
            "changed": self.changed,
        }


@dataclass(frozen=True)
class FileRecord:
    path: str
    action: str  # "write" | "hardlink" | "copy" | "symlink" | "repack" | "omit" | planned: "link"
    bytes: int = 0
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "action": self.action, "bytes": self.bytes}
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    commit_url: str | None
    pr_url: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"repo_id": self.repo_id, "commit_url": self.commit_url, "pr_url": self.pr_url}


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
    def bytes_copied(self) -> int:
        return sum(f.bytes for f in self.files if f.action in ("copy", "repack", "write"))

    @property
    def weight_bytes_copied(self) -> int:
        """Bytes of tensor data written (copies and repacks of .safetensors files)."""
        return sum(f.bytes for f in self.files if f.action in ("copy", "repack") and f.path.endswith(".safetensors"))

    @property
    def bytes_linked(self) -> int:
        return sum(f.bytes for f in self.files if f.action in ("hardlink", "symlink"))

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
                "findings": [f.to_dict() for f in self.after.findings],
                "geometry": self.after.geometry.to_dict() if self.after.geometry else None,
            }
        return document


class VerificationFailed(OperationError):
    """The staged output had error findings the source did not have; nothing was written."""

    def __init__(self, message: str, hint: str, findings: list[Finding]) -> None:
        super().__init__(message, hint)
        self.findings = findings


# --------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------


def plan_conversion(
    source: str | LoadedCheckpoint,
    *,
    to: str | None = None,
    block_size: int | None = None,
    sample_from_anchor: bool | None = None,
    target: str | TargetSpec | None = None,
    force: bool = False,
    revision: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
) -> ConvertPlan:
    """Decide the output config and tensor edits; reads config and headers only, writes nothing.

    Raises SourceError (unreachable source), UsageError (bad option values) or OperationError
    (a refused conversion: the message says why and which flag settles it).
    """
    if to is not None and to not in TARGET_FAMILIES:
        raise UsageError(f"--to {to}: expected one of {', '.join(TARGET_FAMILIES)}", "drop --to to keep the dialect")
    if block_size is not None and block_size < 1:
        raise UsageError(f"--block-size {block_size}: must be a positive integer", "pass the trained block size")
    loaded = (
        source
        if isinstance(source, LoadedCheckpoint)
        else load_checkpoint(source, revision=revision, token=token, timeout=timeout)
    )
    loaded = _follow_cache_links(loaded)
    target_spec = load_target(target, token=token, timeout=timeout) if isinstance(target, str) else target
    before = inspect_loaded(loaded, target=target_spec)
    name = loaded.source
    if loaded.config is None:
        reason = next((f.message for f in before.findings if f.code == "DFT001"), f"{CONFIG_NAME} is unusable")
        raise SourceError(f"{name}: cannot convert: {reason}", "restore config.json, then run convert again")
    too_deep = next((f for f in before.findings if f.code == "DFT062"), None)
    if too_deep is not None:
        # Every writer walks the config recursively; refuse before one of them hits the stack limit.
        raise SourceError(f"{name}: cannot convert: {too_deep.message}", too_deep.hint)
    desc = before.description
    if desc is None:
        reason = next(
            (f.message for f in before.findings if f.code in ("DFT002", "DFT006")), "the config cannot be read"
        )
        raise OperationError(f"{name}: cannot convert: {reason}", "run `dflash-tools inspect` on it for details")

    family = desc.dialect.family
    destination = to or family
    cross = destination != family
    if cross:
        _check_cross_dialect(desc, destination)

    decisions: list[Decision] = []
    warnings: list[str] = []
    geometry = decide_geometry(
        desc, block_size, sample_from_anchor, force=force, decisions=decisions, warnings=warnings
    )

    if not cross:
        config = dialects.normalize(desc, geometry)
        if target_spec is not None and family == "speculators":
            _fill_missing_verifier(config, target_spec, decisions)
        config_text = dumps_like(config, loaded.config_text)
    else:
        config = _render_cross(loaded.config, desc, destination, geometry, target_spec, decisions, warnings)
        config_text = dumps_like(config, None, style_from=loaded.config_text)

    output_desc, problems = _describe(config)
    if output_desc is None:  # pragma: no cover - every writer output is readable by its reader
        raise OperationError(f"internal error: the converted config cannot be read back ({problems})")
    plan = ConvertPlan(
        loaded=loaded,
        before=before,
        description=desc,
        output_dialect=output_desc.dialect,
        geometry=geometry,
        config=config,
        config_text=config_text,
        decisions=decisions,
        warnings=warnings,
        target=target_spec,
        output_geometry=resolve_geometry(output_desc)[0],
    )
    plan.tensor_changes = _tensor_changes(loaded, output_desc, destination, cross)
    if not loaded.weights_inspected:
        warnings.append("weights were not inspected (no safetensors headers): only config.json is converted")
    return plan


def _follow_cache_links(loaded: LoadedCheckpoint) -> LoadedCheckpoint:
    """A local Hugging Face snapshot folder, with its blob links read through (see load_following_links)."""
    folder = loaded.local_dir
    if loaded.kind != "local" or folder is None or not Path(loaded.location).is_dir() or not in_hf_cache(folder):
        return loaded
    return load_following_links(folder, loaded.source)


def _describe(config: dict[str, Any]) -> tuple[DraftDescription | None, str]:
    try:
        return dialects.read(config), ""
    except (dialects.UnknownDialect, dialects.ConfigInvalid) as exc:
        return None, str(exc)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _fmt(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={json.dumps(value)}" for key, value in values.items())


def _sfa_flag(value: bool) -> str:
    return "--sample-from-anchor" if value else "--no-sample-from-anchor"


def decide_geometry(
    desc: DraftDescription,
    block_size: int | None,
    sample_from_anchor: bool | None,
    *,
    force: bool = False,
    decisions: list[Decision] | None = None,
    warnings: list[str] | None = None,
) -> Geometry:
    """B and SFA for the output, with how each was decided (SPEC §2, §8).

    The flags replace the file's statements, then `geometry.resolve_geometry` decides exactly as
    `inspect` does; this function only adds convert's policy on top: explicit values that
    disagree with each other are refused with the flag that settles them, a flag that
    contradicts an explicit value needs `force`, and defaults and inferences become decisions.
    """
    decisions = decisions if decisions is not None else []
    warnings = warnings if warnings is not None else []
    family = desc.dialect.family
    proposals = [p for p in (desc.proposal_speculative_tokens or []) if _positive_int(p)]
    stated_blocks = {k: v for k, v in desc.block_size_values.items() if _positive_int(v)}
    stated_layouts = {k: v for k, v in desc.sample_from_anchor_values.items() if isinstance(v, bool)}

    probe = desc
    if block_size is not None:
        if stated_blocks and block_size not in stated_blocks.values() and not force:
            raise OperationError(
                f"--block-size {block_size} contradicts {_fmt(stated_blocks)} in {CONFIG_NAME}",
                f"add --force if the draft was really trained with block size {block_size} (the file is wrong)",
            )
        values = desc.block_size_values
        # Compared one by one: a hostile value may be a list, which a set cannot hold.
        replaced = f" (replaces {_fmt(values)})" if any(not same_json(v, block_size) for v in values.values()) else ""
        decisions.append(
            Decision("block_size", block_size, "flag", f"block_size = {block_size} from --block-size{replaced}")
        )
        if (
            not stated_blocks
            and family == "speculators"
            and proposals
            and all(p not in (block_size, block_size - 1) for p in proposals)
        ):
            warnings.append(
                f"--block-size {block_size} disagrees with speculators_config.proposal_methods[*].speculative_tokens = "
                f"{proposals}, which a draft of block size {block_size} would store as {block_size - 1} or {block_size}; "
                "the proposal count is rewritten to match"
            )
        probe = replace(probe, block_size_values={"block_size": block_size})
    if sample_from_anchor is not None:
        if stated_layouts and sample_from_anchor not in stated_layouts.values() and not force:
            raise OperationError(
                f"{_sfa_flag(sample_from_anchor)} contradicts {_fmt(stated_layouts)} in {CONFIG_NAME}",
                f"add --force if the draft was really trained {layout_name(sample_from_anchor)} (the file is wrong)",
            )
        values = desc.sample_from_anchor_values
        replaced = (
            f" (replaces {_fmt(values)})"
            if values and set(map(repr, values.values())) != {repr(sample_from_anchor)}
            else ""
        )
        decisions.append(
            Decision(
                "sample_from_anchor",
                sample_from_anchor,
                "flag",
                f"sample_from_anchor = {str(sample_from_anchor).lower()} from {_sfa_flag(sample_from_anchor)}{replaced}",
            )
        )
        evidence_block = block_size or next(iter(stated_blocks.values()), None)
        if (
            sample_from_anchor
            and family == "speculators"
            and not stated_layouts
            and evidence_block is not None
            and proposals
            and all(p == evidence_block - 1 for p in proposals)
        ):
            warnings.append(
                f"--sample-from-anchor contradicts the evidence: speculators_config.proposal_methods[*]."
                f"speculative_tokens = {evidence_block - 1} = block_size - 1 is what a bonus-anchor draft stores; "
                f"it is rewritten to {evidence_block}"
            )
        probe = replace(probe, sample_from_anchor_values={sample_from_anchor_key(family): sample_from_anchor})

    geometry, findings = resolve_geometry(probe)
    _refuse_ambiguity(probe, findings)
    if geometry is None:
        absent = next((f for f in findings if f.code == "DFT010"), None)
        raise OperationError(
            absent.message if absent else "the block size cannot be established",
            "pass --block-size N with the block size the draft was trained with",
        )
    block, sfa, k_max = geometry.block_size, geometry.sample_from_anchor, geometry.max_speculative_tokens
    if block_size is None and geometry.block_size_source is ValueSource.DEFAULT:
        decisions.append(
            Decision(
                "block_size",
                block,
                "default",
                f"block_size is absent: speculators' class default {block} is written explicitly; "
                "pass --block-size N if the draft was trained with another block size",
            )
        )
    elif block_size is None and geometry.block_size_source is ValueSource.INFERRED:
        decisions.append(
            Decision(
                "block_size",
                block,
                "inferred",
                f"block_size = {block}, from speculative_config.speculative_tokens = {proposals[0]} and "
                f"sample_from_anchor = {str(sfa).lower()}",
            )
        )
    if sample_from_anchor is None and geometry.sample_from_anchor_source is not ValueSource.EXPLICIT:
        source = geometry.sample_from_anchor_source
        if source is ValueSource.INFERRED and stated_layouts:
            why = f"found only at {', '.join(stated_layouts)}"
        elif source is ValueSource.INFERRED:
            why = "absent; the proposal count (block_size - 1) says bonus-anchor"
        else:
            why = f"absent; {desc.dialect.value} defaults to {str(sfa).lower()}"
        decisions.append(
            Decision(
                "sample_from_anchor",
                sfa,
                source.value,
                f"sample_from_anchor = {str(sfa).lower()} ({why}), now written explicitly; "
                f"pass {_sfa_flag(not sfa)} if the draft was trained {layout_name(not sfa)}",
            )
        )
    if family == "speculators":
        for index, tokens in enumerate(desc.proposal_speculative_tokens or []):
            if tokens == k_max:
                continue
            key = f"speculators_config.proposal_methods[{index}].speculative_tokens"
            why = (
                "files written before April 2026 stored block_size here by mistake"
                if tokens == block and not sfa
                else "it must equal the trained K_max"
            )
            decisions.append(Decision(key, k_max, "fixed", f"{key}: {json.dumps(tokens)} -> {k_max} ({why})"))
    if family == "open-spec" and proposals and proposals[0] != k_max:
        decisions.append(
            Decision(
                "speculative_config.speculative_tokens",
                k_max,
                "fixed",
                f"speculative_config.speculative_tokens: {proposals[0]} -> {k_max} (K_max of block_size {block})",
            )
        )
    return geometry


def _refuse_ambiguity(probe: DraftDescription, findings: list[Finding]) -> None:
    """Explicit values that conflict, or are not values at all: only the user can settle them."""
    block_keys = set(probe.block_size_values)
    layout_keys = set(probe.sample_from_anchor_values)
    for finding in findings:
        keys = set(finding.keys)
        if finding.code in ("DFT006", "DFT010") and keys and keys <= layout_keys:
            raise OperationError(
                finding.message,
                "pass --sample-from-anchor (anchor-first) or --no-sample-from-anchor (bonus-anchor): "
                "the layout the draft was trained with",
            )
        if finding.code == "DFT010" and keys and keys <= block_keys:
            stated = sorted({v for v in probe.block_size_values.values() if _positive_int(v)})
            one_of = f" (one of {stated})" if len(stated) > 1 else ""
            raise OperationError(
                finding.message, f"pass --block-size N with the block size the draft was trained with{one_of}"
            )


def _check_cross_dialect(desc: DraftDescription, destination: str) -> None:
    """Refuse every translation that would change behaviour without saying so (SPEC §3)."""
    family = desc.dialect.family
    if family not in TARGET_FAMILIES or desc.algorithm not in (Algorithm.DFLASH, Algorithm.DFLASH2):
        raise OperationError(
            f"--to {destination}: cross-dialect conversion covers z-lab <-> speculators DFlash and DFlash2 drafts, "
            f"and this is a {desc.dialect.value} draft",
            "drop --to to normalize it in its own dialect",
        )
    vocab, draft_vocab = desc.decoder.vocab_size, desc.draft_vocab_size
    if desc.algorithm is Algorithm.DFLASH2 and desc.reduced_vocabulary:
        raise OperationError(
            f"DFlash2 needs the full target vocabulary, but draft_vocab_size {draft_vocab} != vocab_size {vocab}: "
            "no dialect can serve this draft as it stands",
            "re-export the draft with the full vocabulary (or, if it is full, set draft_vocab_size to vocab_size)",
        )
    if destination == "zlab" and desc.reduced_vocabulary:
        absent = "draft_vocab_size" not in desc.raw_config
        raise OperationError(
            f"reduced vocabulary (draft_vocab_size {draft_vocab}"
            + (" by speculators' class default, the key is absent" if absent else "")
            + f", vocab_size {vocab}, d2t map) has no z-lab equivalent: z-lab drafts predict the full vocabulary",
            f'if the draft predicts the full vocabulary, add "draft_vocab_size": {vocab} first; '
            "otherwise keep it in speculators form (drop --to zlab)"
            if absent
            else "keep it in speculators form (drop --to zlab)",
        )
    if desc.dflash2 is not None:
        for key in zlab_dialect.DFLASH2_SCALARS:
            value = getattr(desc.dflash2, key)
            if zlab_dialect.scalar_is_default(key, value):
                continue
            if destination == "speculators":
                raise OperationError(
                    f"dflash_config.{key} = {value} has no speculators equivalent (speculators and vLLM's "
                    "speculators path ignore it): the converted draft would behave differently",
                    "keep it in z-lab form (drop --to speculators)",
                )
            raise OperationError(
                f"{key} = {value} is stored but speculators never applied it, and z-lab would: "
                "the converted draft would behave differently",
                f"remove {key} from config.json if the draft was trained without it, then convert again",
            )
    if destination == "speculators" and desc.is_causal is True:
        layer_types = desc.decoder.layer_types
        if layer_types is None or "full_attention" in layer_types:
            raise OperationError(
                "is_causal: true makes every layer causal, and speculators has no form for causal "
                "full-attention layers (its full-attention layers are always bidirectional)",
                "keep it in z-lab form (drop --to speculators)",
            )


def _verifier_record(target: TargetSpec | None) -> dict[str, Any] | None:
    if target is None:
        return None
    return {"architectures": list(target.architectures), "name_or_path": target.source}


def _fill_missing_verifier(config: dict[str, Any], target: TargetSpec, decisions: list[Decision]) -> None:
    spec = config.get("speculators_config")
    if not isinstance(spec, dict):
        return
    verifier = spec.get("verifier")
    if isinstance(verifier, dict) and verifier.get("name_or_path"):
        return
    spec["verifier"] = _verifier_record(target)
    decisions.append(
        Decision(
            "speculators_config.verifier", target.source, "flag", f"verifier recorded from --target {target.source}"
        )
    )


def _render_cross(
    source_config: dict[str, Any],
    desc: DraftDescription,
    destination: str,
    geometry: Geometry,
    target: TargetSpec | None,
    decisions: list[Decision],
    warnings: list[str],
) -> dict[str, Any]:
    stripped = {k: v for k, v in source_config.items() if k != RESTORE_KEY}
    plain = dialects.read(stripped)
    record = source_config.get(RESTORE_KEY)
    base: dict[str, Any] | None = None
    record_dialect = ""
    if isinstance(record, dict) and isinstance(record.get("config"), dict) and isinstance(record.get("dialect"), str):
        try:
            record_family = Dialect(record["dialect"]).family
        except ValueError:
            record_family = None
        if record_family == destination:
            base = record["config"]
            record_dialect = record["dialect"]
    writer = _WRITERS[destination]
    config: dict[str, Any] = writer.render(
        plain,
        geometry,
        base_config=base,
        verifier=_verifier_record(target),
        num_target_layers=target.num_hidden_layers if target is not None else None,
    )
    if base is not None:
        decisions.append(
            Decision(
                RESTORE_KEY,
                None,
                "mapped",
                f"restored the original {record_dialect} config kept by an earlier conversion",
            )
        )
    else:
        config[RESTORE_KEY] = {
            "dialect": desc.dialect.value,
            "written_by": f"dflash-tools {__version__}",
            "config": stripped,
        }
        decisions.append(
            Decision(
                RESTORE_KEY,
                desc.dialect.value,
                "mapped",
                f"the source config is kept under {RESTORE_KEY}, so converting back restores it exactly",
            )
        )
    shift = "+1" if destination == "speculators" else "-1"
    decisions.append(
        Decision(
            "layer ids",
            [i + 1 for i in desc.target_layer_ids] if destination == "speculators" else list(desc.target_layer_ids),
            "mapped",
            f"layer ids shifted by {shift}: z-lab dflash_config.target_layer_ids {list(desc.target_layer_ids)} <-> "
            f"speculators aux_hidden_state_layer_ids {[i + 1 for i in desc.target_layer_ids]}",
        )
    )
    if destination == "speculators":
        non_causal = desc.is_causal is False
        origin = (
            "is_causal: false"
            if desc.is_causal is False
            else "no is_causal (sliding layers causal, full layers bidirectional)"
        )
        decisions.append(
            Decision(
                "sliding_window_non_causal",
                non_causal,
                "mapped",
                f"sliding_window_non_causal = {str(non_causal).lower()} from z-lab {origin}",
            )
        )
        layer_types = desc.decoder.layer_types
        if not non_causal and (layer_types is None or "full_attention" in layer_types):
            warnings.append(
                "the speculators form has sliding_window_non_causal = false with full-attention layers: "
                "vLLM 0.33 runs those layers causally (DFT040); serve the z-lab form to keep them bidirectional"
            )
        if target is None:
            warnings.append("no --target: speculators_config.verifier is left empty; pass --target to record it")
        else:
            decisions.append(
                Decision(
                    "speculators_config.verifier",
                    target.source,
                    "flag",
                    f"verifier recorded from --target {target.source}",
                )
            )
    else:
        non_causal = speculators_dialect.sliding_window_non_causal(desc)
        how = (
            "explicit" if desc.sliding_window_non_causal is not None else f"speculators {desc.algorithm.value} default"
        )
        decisions.append(
            Decision(
                "is_causal",
                False if non_causal else None,
                "mapped",
                f"sliding_window_non_causal = {str(non_causal).lower()} ({how}) -> "
                + (
                    "is_causal: false (every layer bidirectional)" if non_causal else "no is_causal (per-layer default)"
                ),
            )
        )
        if target is not None:
            decisions.append(
                Decision(
                    "num_target_layers",
                    target.num_hidden_layers,
                    "flag",
                    f"num_target_layers from --target {target.source}",
                )
            )
    return config


def _tensor_changes(
    loaded: LoadedCheckpoint, output_desc: DraftDescription, destination: str, cross: bool
) -> list[TensorChange]:
    expected = {t.name for t in expected_tensors(output_desc) if t.requirement is not Requirement.FORBIDDEN}
    changes: list[TensorChange] = []
    taken = set(loaded.tensors)
    for name, tensor in loaded.tensors.items():
        if name.startswith("verifier_"):
            changes.append(
                TensorChange(
                    name,
                    "drop",
                    tensor.file,
                    "verifier-owned tensor from an older speculators save; vLLM cannot load it",
                )
            )
            continue
        if cross and destination == "zlab" and name == "embed_tokens.weight":
            changes.append(
                TensorChange(
                    name,
                    "drop",
                    tensor.file,
                    "z-lab drafts use the target's embeddings; older speculators saves carried a copy",
                )
            )
            continue
        for prefix in _TENSOR_PREFIXES:
            if name.startswith(prefix):
                stripped = name[len(prefix) :]
                if stripped in expected and stripped not in taken:
                    taken.add(stripped)
                    changes.append(
                        TensorChange(
                            name,
                            "rename",
                            tensor.file,
                            f"DFlash loaders expect un-prefixed names (no {prefix!r})",
                            stripped,
                        )
                    )
                break
    return changes


def _changed_paths(before: Any, after: Any, prefix: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        paths: list[str] = []
        for key in list(before) + [k for k in after if k not in before]:
            path = f"{prefix}{key}"
            if key not in after or key not in before:
                paths.append(path)
            elif not same_json(before[key], after[key]):
                paths.extend(_changed_paths(before[key], after[key], path + "."))
        return paths
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        paths = []
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            if not same_json(old, new):
                nested = _changed_paths(old, new, f"{prefix.rstrip('.')}[{index}].")
                paths.extend(nested)
        return paths
    return [prefix.rstrip(".")]


# --------------------------------------------------------------------------------------------
# Executing a plan
# --------------------------------------------------------------------------------------------


def convert_checkpoint(
    source: str,
    output: str | Path | None = None,
    *,
    in_place: bool = False,
    to: str | None = None,
    block_size: int | None = None,
    sample_from_anchor: bool | None = None,
    target: str | TargetSpec | None = None,
    force: bool = False,
    backup: bool = True,
    link_mode: LinkMode | str = LinkMode.AUTO,
    dry_run: bool = False,
    revision: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
    push_to_hub: str | None = None,
    create_pr: bool = True,
    commit_message: str | None = None,
) -> ConvertResult:
    """Convert `source` into `output` (a new folder), or rewrite it `in_place`.

    `dry_run` decides everything (including the refusals about the output) and writes nothing.
    With `push_to_hub`, the result is uploaded as a pull request (or a direct commit with
    `create_pr=False`). Raises UsageError for option mistakes and output locations that cannot
    be used, OperationError for refused conversions and failed verification or upload.
    """
    with contextlib.ExitStack() as locks:
        mode = LinkMode(link_mode)
        if in_place and output is not None:
            raise UsageError("--in-place and -o/--output exclude each other", "pass one of them")
        if not in_place and output is None and not dry_run:
            raise UsageError("no output given", "pass -o OUT (a new folder), --in-place, --dry-run or --check")
        source_dir = Path(source).expanduser().absolute()
        if not dry_run and source_dir.is_dir():
            # Held until the run ends: planning, writing and verifying see one state of the folder.
            if in_place:
                locks.enter_context(writing_in_place(source_dir, may_write_beside=not in_hf_cache(source_dir)))
            else:
                locks.enter_context(folder_lock(source_dir, exclusive=False))
        recovered = finish_interrupted_swap(Path(source)) if in_place and not dry_run else []
        loaded = _follow_cache_links(load_checkpoint(source, revision=revision, token=token, timeout=timeout))
        if not dry_run:
            # A plan (--dry-run, --check) works on a lone config.json too; writing needs the folder.
            _require_folder(loaded)
            _require_cached_weights(loaded)
        plan = plan_conversion(
            loaded,
            to=to,
            block_size=block_size,
            sample_from_anchor=sample_from_anchor,
            target=target,
            force=force,
            token=token,
            timeout=timeout,
        )
        destination: Path | None
        if in_place:
            destination = _check_in_place(loaded, plan, backup=backup, force=force)
        elif output is not None:
            destination = _check_output(Path(output), loaded, force=force)
            if not dry_run:
                locks.enter_context(writing_output(destination))
                # Checked again under the lock: another run may have written OUT meanwhile.
                destination = _check_output(Path(output), loaded, force=force)
        else:
            destination = None
        run_mode = "dry-run" if dry_run else ("in-place" if in_place else "output")
        result = ConvertResult(plan=plan, mode=run_mode, output=destination)
        if recovered:
            result.notes.append(
                "finished an interrupted in-place conversion: shards "
                + ", ".join(recovered)
                + " took their final names"
            )
        if dry_run:
            result.files = planned_files(plan)
            return result
        if in_place and not plan.changed:
            result.notes.append("already normalized: nothing to write")
        else:
            assert destination is not None
            local = _local_checkpoint(loaded, token=token)
            if in_place:
                _run_in_place(plan, local, destination, result, backup=backup)
            else:
                if local.kind == "example" and mode is LinkMode.AUTO:
                    # Never tie a user's folder to files inside the installed package.
                    mode = LinkMode.COPY
                _run_to_output(plan, local, destination, result, mode, force=force)
        if push_to_hub:
            assert destination is not None
            result.push = push_folder(
                destination,
                push_to_hub,
                create_pr=create_pr,
                token=token,
                commit_message=commit_message or default_commit_message(plan),
                commit_description=commit_description(plan),
            )
        return result


def _require_folder(loaded: LoadedCheckpoint) -> None:
    if loaded.kind == "local" and not Path(loaded.location).is_dir():
        raise UsageError(
            f"{loaded.source}: convert works on a checkpoint folder, not a single file",
            "pass the folder that holds config.json and the weights",
        )


def _check_output(output: Path, loaded: LoadedCheckpoint, *, force: bool) -> Path:
    destination = output.expanduser().absolute()
    if destination.is_symlink() or (destination.exists() and not destination.is_dir()):
        raise UsageError(f"{output}: exists and is not a folder", "pass a new folder name to -o")
    if in_hf_cache(destination):
        raise UsageError(
            f"{output} is inside the Hugging Face cache, which must never be written to",
            "pass an output folder outside the cache",
        )
    if loaded.local_dir is not None and loaded.kind != "hub":
        source_dir = loaded.local_dir
        if contains(source_dir, destination) or contains(destination, source_dir):
            raise UsageError(
                f"{output} is the source folder, inside it, or contains it",
                "pass an output folder beside the source, or use --in-place to rewrite the source itself",
            )
    if destination.is_dir() and not is_empty_dir(destination) and not force:
        raise UsageError(
            f"{output} exists and is not empty",
            "pass another -o folder, or --force to replace it (the old content is removed once the new one is complete)",
        )
    return destination


def _check_in_place(loaded: LoadedCheckpoint, plan: ConvertPlan, *, backup: bool, force: bool) -> Path:
    if loaded.kind == "hub":
        raise UsageError(
            f"--in-place on Hub repo {loaded.source}: its files live in the Hugging Face cache, which must never be written to",
            "pass -o OUT to write a converted copy (and --push-to-hub to propose it upstream)",
        )
    if loaded.kind == "example" or loaded.local_dir is None:
        raise UsageError(
            f"--in-place on {loaded.source}: not a folder of yours", "pass -o OUT to write a converted copy"
        )
    folder = loaded.local_dir.absolute()
    if in_hf_cache(folder):
        raise UsageError(
            f"--in-place on {loaded.source}: it is inside the Hugging Face cache (files there are links into shared blobs)",
            "pass -o OUT to write a converted copy outside the cache",
        )
    if any(in_hf_cache(p) for p in folder.iterdir() if p.is_symlink()):
        raise UsageError(
            f"--in-place on {loaded.source}: its files are links into the Hugging Face cache",
            "pass -o OUT to write a converted copy",
        )
    if not os.access(folder, os.W_OK):
        raise UsageError(f"--in-place on {loaded.source}: the folder is not writable", "pass -o OUT instead")
    if backup and not force:
        for name in _files_replaced_in_place(plan):
            backup_path = folder / (name + BACKUP_SUFFIX)
            if backup_path.exists() or backup_path.is_symlink():
                raise UsageError(
                    f"{backup_path} already exists (a backup from an earlier run)",
                    "move it away, or pass --force to overwrite it (or --no-backup)",
                )
    return folder


def _files_replaced_in_place(plan: ConvertPlan) -> list[str]:
    names = [CONFIG_NAME] if plan.config_changed else []
    edited = sorted({c.file for c in plan.tensor_changes})
    names += edited
    if edited and plan.loaded.local_dir is not None and (plan.loaded.local_dir / INDEX_NAME).is_file():
        names.append(INDEX_NAME)
    return names


def planned_files(plan: ConvertPlan) -> list[FileRecord]:
    """What a run would do with config.json, the index and every shard (a dry run's answer)."""
    files = [FileRecord(CONFIG_NAME, "write" if plan.config_changed else "link", len(plan.config_text.encode()))]
    edits = plan.edits
    if not edits.empty and plan.loaded.shards and len(plan.loaded.shards) > 1:
        files.append(FileRecord(INDEX_NAME, "write", 0, "weight_map updated"))
    for shard in plan.loaded.shards:
        size = shard.file_size or shard.data_start + sum(t.num_bytes for t in shard.tensors.values())
        if edits.touches(shard.tensors):
            kept = [n for n in shard.tensors if n not in edits.drop]
            if not kept:
                files.append(FileRecord(shard.file, "omit", 0, "every tensor dropped"))
                continue
            repack = plan_repack(shard, edits)
            files.append(FileRecord(shard.file, "repack", repack.data_bytes, f"{len(repack.dropped)} dropped"))
        else:
            files.append(FileRecord(shard.file, "link", size))
    return files


def _local_checkpoint(loaded: LoadedCheckpoint, *, token: str | None) -> LoadedCheckpoint:
    """The source as a local folder with its headers (a Hub repo is downloaded into the cache)."""
    if loaded.kind != "hub":
        return loaded
    try:
        folder = _download_snapshot(loaded.source, loaded.commit or loaded.revision, token)
    except Exception as exc:
        raise SourceError(
            f"{loaded.location}: downloading the checkpoint failed: {type(exc).__name__}: {_one_line(str(exc))}",
            "check the network (or HF_HUB_OFFLINE with a complete cached snapshot) and run again",
        ) from None
    # Snapshot files are links into the cache's blobs: read them through the links.
    local = load_following_links(folder, loaded.source)
    local.kind = "hub"
    if set(local.tensors) != set(loaded.tensors) or local.config != loaded.config:
        raise OperationError(
            f"{loaded.location}: the downloaded files differ from the ones inspected",
            "the repo changed while converting: run convert again",
        )
    return local


def _download_snapshot(repo_id: str, revision: str | None, token: str | None) -> Path:
    """Every file of the revision, in the Hugging Face cache; returns the snapshot folder."""
    from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download

    if constants.HF_HUB_OFFLINE:
        return Path(snapshot_download(repo_id, revision=revision, token=token, local_files_only=True))
    info = HfApi(token=token).model_info(repo_id, revision=revision, token=token)
    pinned = info.sha or revision
    names = sorted(s.rfilename for s in info.siblings or [])
    if CONFIG_NAME not in names:
        names.append(CONFIG_NAME)
    snapshot: Path | None = None
    for name in names:
        path = Path(hf_hub_download(repo_id, name, revision=pinned, token=token))
        if name == CONFIG_NAME:
            snapshot = path.parent
    assert snapshot is not None
    return snapshot


def _one_line(text: str, limit: int = 240) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _source_files(folder: Path) -> list[str]:
    """Relative paths of every file to carry over, hidden entries (.cache, .git, staging) excluded."""
    _refuse_escaping_index(folder)
    out: list[str] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(root) / name
            if path.is_symlink() and not path.exists():
                continue  # a dangling link carries nothing
            _refuse_unsafe_source_file(folder, path)
            out.append(path.relative_to(folder).as_posix())
    return out


def _refuse_escaping_index(folder: Path) -> None:
    """An index naming `../x` or `/abs` would make OUT load files from outside OUT: refuse it."""
    try:
        index = json.loads(read_small_file(folder / INDEX_NAME).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return  # absent or unreadable: inspect reports it, and there is nothing to follow
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    for shard in weight_map.values() if isinstance(weight_map, dict) else ():
        problem = safe_shard_name(shard)
        if problem:
            raise OperationError(
                f"{folder / INDEX_NAME}: {problem}: refusing to write an index that points outside the output",
                "fix the index so that every shard is a file inside the checkpoint folder",
            )


def _refuse_unsafe_source_file(folder: Path, path: Path) -> None:
    """Only regular files of the checkpoint itself are carried over.

    A device or FIFO would be read forever (a link to /dev/zero fills the disk), and a link out
    of the folder would carry any file of the user's into OUT and on to --push-to-hub. Links
    from a Hugging Face snapshot into its cache's blobs are what a snapshot is made of.
    """
    name = path.relative_to(folder).as_posix()
    if not path.is_file():
        raise OperationError(
            f"{folder / name} is not a regular file (a device, FIFO or socket): convert carries only regular files",
            "remove it from the checkpoint folder",
        )
    if path.is_symlink() and not contains(folder, path):
        target = Path(os.path.realpath(path))
        if not (in_hf_cache(folder) and (in_hf_cache(target) or _is_blob_of(folder, target))):
            raise OperationError(
                f"{folder / name} links outside the checkpoint folder (to {target}): refusing to carry it into the output",
                "replace the link with the file itself, or remove it",
            )


def _is_blob_of(snapshot: Path, target: Path) -> bool:
    """`target` is a blob of the cache repo that `snapshot` (…/snapshots/<commit>) belongs to.

    Cache layouts also live outside HF_HUB_CACHE (another cache dir, a copied cache), where the
    path pattern is the only evidence.
    """
    repo = Path(os.path.realpath(snapshot)).parent.parent
    return target.parent.name == "blobs" and target.parent.parent == repo


def _file_mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _build(plan: ConvertPlan, local: LoadedCheckpoint, stage: Path, mode: LinkMode, result: ConvertResult) -> None:
    """Fill `stage` with the converted checkpoint (nothing outside it is written)."""
    assert local.local_dir is not None
    source_dir = local.local_dir
    edits = plan.edits
    shards = {s.file: s for s in local.shards}
    removed_bytes = sum(t.num_bytes for s in local.shards for n, t in s.tensors.items() if n in edits.drop)
    fallback_noted = False
    pause_point("staged")
    for relative in _source_files(source_dir):
        source = source_dir / relative
        target = stage / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if relative == CONFIG_NAME:
            atomic_write_text(target, plan.config_text, mode=_file_mode(source))
            result.files.append(FileRecord(relative, "write", len(plan.config_text.encode())))
            pause_point("config-written")
            continue
        if relative == INDEX_NAME and not edits.empty:
            text = source.read_text(encoding="utf-8")
            index = rewrite_index(json.loads(text), edits, removed_bytes)
            new_text = dumps_like(index, text)
            atomic_write_text(target, new_text, mode=_file_mode(source))
            result.files.append(FileRecord(relative, "write", len(new_text.encode()), "weight_map updated"))
            continue
        shard = shards.get(relative)
        if shard is not None and edits.touches(shard.tensors):
            repack = plan_repack(shard, edits)
            if not repack.kept:
                result.files.append(FileRecord(relative, "omit", 0, "every tensor dropped"))
                continue

            def write(handle: Any, repack: Any = repack, source: Path = source) -> None:
                write_repacked(source, handle, repack, on_run=lambda index: pause_point("repacking"))

            atomic_write(target, write, mode=_file_mode(source))
            detail = ", ".join(
                [f"dropped {n}" for n in repack.dropped] + [f"renamed {a} -> {b}" for a, b in repack.renamed]
            )
            result.files.append(FileRecord(relative, "repack", repack.data_bytes, detail))
            continue
        placed = place_file(source, target, mode)
        size = target.stat().st_size
        if placed.fallback_reason and not fallback_noted:
            fallback_noted = True
            result.notes.append(f"hard links are not possible here ({placed.fallback_reason}): files were copied")
        result.files.append(FileRecord(relative, placed.method, size))
    if CONFIG_NAME not in {f.path for f in result.files}:  # pragma: no cover - a source always has one
        atomic_write_text(stage / CONFIG_NAME, plan.config_text)
        result.files.append(FileRecord(CONFIG_NAME, "write", len(plan.config_text.encode())))
    fsync_dir(stage)
    pause_point("built")


def _verify(
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


def load_following_links(folder: Path, source: str, linked: set[str] | None = None) -> LoadedCheckpoint:
    """`load_local`, reading the shards that are symlinks out of the folder through their links.

    `linked` names the files to follow (None: every symlinked file), for folders whose links are
    known to be sound: a cache snapshot this run downloaded, or links this run made.
    """
    loaded = load_local(folder, source=source)
    if linked is None:
        linked = {p.name for p in folder.iterdir() if p.is_symlink()}
    if not linked:
        return loaded
    loaded.findings = [f for f in loaded.findings if not (f.code == "DFT004" and f.file in linked)]
    have = {s.file for s in loaded.shards}
    reread = sorted(n for n in linked if n.endswith(".safetensors") and n not in have and (folder / n).is_file())
    for name in reread:
        add_shard(loaded, lambda name=name: read_local_header(folder / name, name))
    if reread:
        loaded.weights_inspected = True
        loaded.findings = [f for f in loaded.findings if f.code != "DFT005"]
        if (folder / INDEX_NAME).is_file():
            weight_map = read_index(folder, LoadedCheckpoint(source, "local", str(folder), None, None))
            if weight_map is not None:
                check_index_against_shards(loaded, weight_map, set())
    return loaded


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


def _refuse_unverified(new_errors: list[Finding]) -> VerificationFailed:
    summary = "; ".join(f"{f.code}: {f.message}" for f in new_errors[:3])
    more = f" (and {len(new_errors) - 3} more)" if len(new_errors) > 3 else ""
    return VerificationFailed(
        f"the converted checkpoint would have errors the source does not have: {summary}{more}; nothing was written",
        "check the flags you passed (for example --block-size against the weights), or rerun with --dry-run "
        "to see the config; if the flags are right, this is a bug in dflash-tools",
        new_errors,
    )


def _run_to_output(
    plan: ConvertPlan, local: LoadedCheckpoint, destination: Path, result: ConvertResult, mode: LinkMode, *, force: bool
) -> None:
    stage = make_staging_dir(destination)
    with cleanup_on_error(stage):
        _build(plan, local, stage, mode, result)
        symlinked = {f.path for f in result.files if f.action == "symlink"}
        if symlinked:
            result.notes.append(
                "symlinked weights point outside OUT: `dflash-tools inspect` reports them as DFT004; "
                "use --link-mode hardlink or copy for a self-contained checkpoint"
            )
        after, new_errors = _verify(plan, stage, destination, symlinked)
        if new_errors:
            raise _refuse_unverified(new_errors)
        pause_point("verified")
        if destination.is_dir() and not is_empty_dir(destination) and not force:
            raise UsageError(f"{destination} was filled by someone else meanwhile", "run again with another -o folder")
        publish_dir(stage, destination, replace_existing=force)
    pause_point("published")
    after.loaded.location = str(destination)
    result.after = after
    result.written = True


def _run_in_place(
    plan: ConvertPlan, local: LoadedCheckpoint, folder: Path, result: ConvertResult, *, backup: bool
) -> None:
    """Build and verify beside the folder, then swap in only the changed files, atomically each.

    Every intermediate state is a consistent checkpoint. Weights change before config.json (the
    tensors convert drops are optional or unloadable ones, so the old config still describes the
    new weights). With a shard index, repacked shards first go in under temporary names that only
    the (atomically replaced) index points to, and take their real names back while both names
    hold the new bytes. Each replaced file keeps its original as `NAME.bak` (a hard link: no
    copy) unless `backup` is False.
    """
    stage = make_staging_dir(folder)
    with cleanup_on_error(stage):
        # Hard links make the verification copy free; the staged folder is removed at the end.
        _build(plan, local, stage, LinkMode.AUTO, result)
        after, new_errors = _verify(plan, stage, folder)
        if new_errors:
            raise _refuse_unverified(new_errors)
        pause_point("verified")
        changed = [f for f in result.files if f.action in ("write", "repack", "omit")]
        if backup:
            for record in changed:
                result.backups.append(_backup(folder / record.path))
        pause_point("backed-up")
        shards = [f for f in changed if f.path.endswith(".safetensors")]
        index = next((f for f in changed if f.path == INDEX_NAME), None)
        config = next((f for f in changed if f.path == CONFIG_NAME), None)
        if index is not None and shards:
            _swap_indexed_shards(stage, folder, shards)
        else:
            for record in shards:
                _swap(stage, folder, record)
            pause_point("replaced")
            if index is not None:
                _swap(stage, folder, index)
        if config is not None:
            _swap(stage, folder, config)
        pause_point("config-replaced")
    remove_tree(stage)
    after.loaded.location = str(folder)
    result.after = after
    result.written = True
    result.files = [f for f in result.files if f.action in ("write", "repack", "omit")]


def _backup(target: Path) -> Path:
    backup_path = target.with_name(target.name + BACKUP_SUFFIX)
    if backup_path.exists() or backup_path.is_symlink():
        backup_path.unlink()
    try:
        os.link(target, backup_path)
    except OSError:
        atomic_write_bytes_from(target, backup_path)
    return backup_path


def _swap(stage: Path, folder: Path, record: FileRecord) -> None:
    target = folder / record.path
    if record.action == "omit":
        target.unlink()
    else:
        (stage / record.path).replace(target)
    fsync_dir(target.parent)


def _swap_indexed_shards(stage: Path, folder: Path, shards: list[FileRecord]) -> None:
    """Replace indexed shards so that the index always names files holding what it promises."""
    final_text = (stage / INDEX_NAME).read_text(encoding="utf-8")
    final = json.loads(final_text)
    temporary = {
        r.path: f"{Path(r.path).stem}.dflash-tools-new{Path(r.path).suffix}" for r in shards if r.action == "repack"
    }
    for name, temp in temporary.items():
        (stage / name).replace(folder / temp)
    fsync_dir(folder)
    interim = dict(final)
    weight_map = final.get("weight_map")
    if isinstance(weight_map, dict):
        interim["weight_map"] = {k: temporary.get(v, v) for k, v in weight_map.items()}
    # The commit point for the weights: from here on the index names only new shards.
    atomic_write_text(folder / INDEX_NAME, dumps_like(interim, final_text))
    pause_point("replaced")
    for name, temp in temporary.items():
        link = folder / f".{name}.dflash-tools-link"
        link.unlink(missing_ok=True)
        os.link(folder / temp, link)
        link.replace(folder / name)
    fsync_dir(folder)
    pause_point("renamed")
    atomic_write_text(folder / INDEX_NAME, final_text)
    for temp in temporary.values():
        (folder / temp).unlink()
    for record in shards:
        if record.action == "omit":
            (folder / record.path).unlink()
    fsync_dir(folder)


def _require_cached_weights(loaded: LoadedCheckpoint) -> None:
    """Offline (or with the Hub unreachable) a Hub source can only be written from a full cache."""
    from dflash_tools.source import is_offline

    if loaded.kind != "hub":
        return
    cut_off = is_offline() or any(f.code == "DFT007" for f in loaded.findings)
    missing = [f for f in loaded.findings if f.code == "DFT005"]
    if cut_off and missing:
        raise SourceError(
            f"{loaded.location}: {missing[0].message}",
            f"connect to the Hub, or fetch the repo first with `hf download {loaded.source}`; "
            "--dry-run and --check work from what is cached",
        )


def finish_interrupted_swap(folder: Path) -> list[str]:
    """Complete an in-place shard swap that a killed run left between its two index writes.

    `_swap_indexed_shards` first points the index at `NAME.dflash-tools-new.safetensors`; a run
    killed before the final index write leaves a consistent checkpoint under interim names. The
    next in-place run gives those shards their real names back (the same steps, in the same
    order) before it plans anything. Returns the final names restored.
    """
    index_path = folder / INDEX_NAME
    if not folder.is_dir() or folder.is_symlink() or not index_path.is_file():
        return []
    try:
        text = index_path.read_text(encoding="utf-8")
        index = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return []
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        return []
    interim_mark = ".dflash-tools-new.safetensors"
    named = {
        value: value[: -len(interim_mark)] + ".safetensors"
        for value in set(weight_map.values())
        if isinstance(value, str) and value.endswith(interim_mark) and "/" not in value
    }
    final_names = {interim: final for interim, final in named.items() if (folder / interim).is_file()}
    # An interim name whose file is gone: the rename finished and only the final index write is
    # missing, if the final name holds a file; otherwise the folder cannot be repaired here.
    renamed = {interim: final for interim, final in named.items() if interim not in final_names}
    lost = sorted(interim for interim, final in renamed.items() if not (folder / final).is_file())
    if lost:
        raise OperationError(
            f"{folder} was left part way through an in-place conversion: {INDEX_NAME} names {', '.join(lost)}, "
            "which is missing",
            "restore the files from their .bak copies (or the original checkpoint), then run convert again",
        )
    if not named:
        _remove_swap_leftovers(folder, set(weight_map.values()))
        return []
    for interim, final in final_names.items():
        link = folder / f".{final}.dflash-tools-link"
        link.unlink(missing_ok=True)
        target = folder / final
        # Killed after the renames, both names are already one file (and rename() of a file
        # onto another link to itself does nothing, which would leave `link` behind).
        if target.exists() and (folder / interim).samefile(target):
            continue
        os.link(folder / interim, link)
        link.replace(target)
    fsync_dir(folder)
    index["weight_map"] = {k: named.get(v, v) for k, v in weight_map.items()}
    atomic_write_text(index_path, dumps_like(index, text))
    for interim in final_names:
        (folder / interim).unlink()
    fsync_dir(folder)
    _remove_swap_leftovers(folder, set(index["weight_map"].values()))
    return sorted(named.values())


def _remove_swap_leftovers(folder: Path, indexed: set[Any]) -> None:
    """Names only a killed swap leaves: interim shards the index no longer names, and link files."""
    for entry in folder.iterdir():
        name = entry.name
        interim = name.endswith(".dflash-tools-new.safetensors") and name not in indexed
        link = name.startswith(".") and name.endswith(".dflash-tools-link")
        if (interim or link) and (entry.is_file() or entry.is_symlink()):
            entry.unlink()


def atomic_write_bytes_from(source: Path, destination: Path) -> None:
    """A copy of `source` at `destination`, written atomically (the backup fallback)."""
    with open(source, "rb") as handle:
        data = handle.read()
    atomic_write_bytes(destination, data, mode=_file_mode(source))


# --------------------------------------------------------------------------------------------
# Hub upload
# --------------------------------------------------------------------------------------------


def default_commit_message(plan: ConvertPlan) -> str:
    if plan.cross_dialect:
        return f"Convert draft config to {plan.output_dialect.family} form with dflash-tools"
    return "Normalize draft config (block_size, sample_from_anchor) with dflash-tools"


def commit_description(plan: ConvertPlan) -> str:
    lines = [f"Converted with dflash-tools {__version__} (`dflash-tools convert`).", ""]
    g = plan.geometry
    lines.append(
        f"Geometry: block_size {g.block_size}, sample_from_anchor {str(g.sample_from_anchor).lower()} "
        f"({g.layout}), K_max {g.max_speculative_tokens}."
    )
    lines += [f"- {d.message}" for d in plan.decisions]
    lines += [f"- tensor {c.name}: {c.action} ({c.reason})" for c in plan.tensor_changes]
    return "\n".join(lines)


def push_folder(
    folder: Path,
    repo_id: str,
    *,
    create_pr: bool = True,
    token: str | None = None,
    commit_message: str = "Upload converted draft with dflash-tools",
    commit_description: str | None = None,
) -> PushResult:
    """Upload `folder` to `repo_id` through huggingface_hub: a pull request unless `create_pr=False`."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        if not create_pr:
            api.create_repo(repo_id, exist_ok=True, token=token)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            commit_message=commit_message,
            commit_description=commit_description,
            create_pr=create_pr,
            token=token,
            ignore_patterns=[f"*{BACKUP_SUFFIX}"],
        )
    except Exception as exc:
        raise OperationError(
            f"pushing {folder} to {repo_id} failed: {type(exc).__name__}: {_one_line(str(exc))}",
            f"the converted checkpoint is complete at {folder}; push it later with "
            f"`hf upload {repo_id} {folder} . --create-pr` (the repo must exist; --no-pr creates it)",
        ) from None
    return PushResult(repo_id, getattr(info, "commit_url", None), getattr(info, "pr_url", None))
