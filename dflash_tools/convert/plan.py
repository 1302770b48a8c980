"""The edit plan: everything `convert` will do, decided before anything is written.

`plan_conversion` reads config and headers (`reading`), inspects them (`inspect`), decides the
output geometry (`decide`), renders the config (same dialect: `dialects.normalize`; across
dialects: `translate`) as a byte-preserving edit (`json_edit`), and lists the tensor edits
(drops, prefix renames) that `repack` will apply.
"""

from __future__ import annotations

import difflib
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dflash_tools import dialects
from dflash_tools.convert.decide import Decision, decide_geometry
from dflash_tools.convert.json_edit import dumps_like, same_json
from dflash_tools.convert.repack import TensorEdits
from dflash_tools.convert.translate import (
    TARGET_FAMILIES,
    check_cross_dialect,
    cross_text,
    fill_missing_verifier,
    render_cross,
)
from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.draft.description import Algorithm, Dialect, DraftDescription
from dflash_tools.draft.geometry import Geometry, resolve_geometry
from dflash_tools.draft.target import TargetDescription, target_argument
from dflash_tools.draft.tensors import Requirement, expected_tensors
from dflash_tools.engine_rules import ENGINE_RULES, json_key
from dflash_tools.errors import OperationError, SourceError, UsageError
from dflash_tools.files.hf_cache import is_in_hf_cache
from dflash_tools.findings import Severity
from dflash_tools.inspect import InspectReport, inspect_loaded
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    LoadedCheckpoint,
    optional_count,
)
from dflash_tools.reading.json_hazards import MAX_CONFIG_DEPTH, depth_and_path
from dflash_tools.reading.local import load_following_links
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_model import DraftFacts
from dflash_tools.serving.engine_view import engine_view

# Longest first: `model.draft_model.x` must lose both parts.
_TENSOR_PREFIXES = ("model.draft_model.", "draft_model.", "model.")


@dataclass(frozen=True)
class TensorChange(JsonDocument):
    name: str
    action: str  # "drop" | "rename"
    file: str
    reason: str
    new_name: str | None = field(default=None, metadata=json_rules(omit_none=True))


@dataclass
class ConvertPlan(JsonDocument):
    """Everything `convert` will do, decided before anything is written."""

    loaded: LoadedCheckpoint
    before: InspectReport
    description: DraftDescription
    output_dialect: Dialect
    geometry: Geometry = field(metadata=json_rules(omit=True))  # JSON: `written_geometry`
    config: dict[str, Any] = field(metadata=json_rules(omit=True))
    config_text: str
    decisions: list[Decision] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tensor_changes: list[TensorChange] = field(default_factory=list)
    target: TargetDescription | None = None
    output_geometry: Geometry | None = None  # what the written config says, as inspect reads it
    # `--for ENGINE`: what each engine release does with the written config (engine_view, in short).
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)

    json_keys: ClassVar[tuple[str, ...]] = (
        "source",
        "source_kind",
        "location",
        "commit",
        "dialect",
        "algorithm",
        "geometry",
        "decisions",
        "warnings",
        "config",
        "tensors",
        "engines",
        "changed",
    )
    json_properties: ClassVar[Mapping[str, Any]] = {
        "source": "loaded.source",
        "source_kind": "loaded.kind",
        "location": "loaded.location",
        "commit": "loaded.commit",
        "dialect": {"before": "description.dialect.value", "after": "output_dialect.value"},
        "algorithm": "description.algorithm",
        "geometry": {"before": "before.geometry", "after": "written_geometry"},
        "config": {"changed": "config_changed", "changed_keys": "changed_keys()", "diff": "diff()"},
        "tensors": {"changes": "tensor_changes"},
        "changed": "changed",
    }

    @property
    def original_text(self) -> str:
        return self.loaded.config_text or ""

    @property
    def written_geometry(self) -> Geometry:
        """The geometry of the written config, as inspect reads it (else as decided)."""
        return self.output_geometry or self.geometry

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


def engine_specs(values: Any) -> list[str]:
    """`for_engines` of the Python API: `engine==version` specs, or the names `--for` takes
    (`sglang`, `all`, `vllm`; one str or a list of them); UsageError for anything else."""
    if values is None:
        return []
    names = [values] if isinstance(values, str) else values
    if not isinstance(names, list | tuple) or not all(isinstance(name, str) for name in names):
        raise UsageError(
            f"for_engines is {values!r:.60}, not a list of engine names", "pass for_engines=['sglang'] or ['all']"
        )
    if all(name in ENGINE_RULES for name in names):
        return list(dict.fromkeys(names))
    from dflash_tools.plan.request import plan_engines

    return list(plan_engines(names))


def plan_conversion(
    source: str | os.PathLike[str] | LoadedCheckpoint,
    *,
    to: str | None = None,
    block_size: int | None = None,
    sample_from_anchor: bool | None = None,
    target: str | os.PathLike[str] | TargetDescription | None = None,
    force: bool = False,
    revision: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
    for_engines: list[str] | str | None = None,
) -> ConvertPlan:
    """Decide the output config and tensor edits; reads config and headers only, writes nothing.

    `for_engines` (`engine==version` specs, as `serving.engine_view.resolve_engine_specs` gives
    them): write the form those releases read (SGLang: z-lab), and refuse a draft one of them
    cannot serve as trained, saying why.

    Raises SourceError (unreachable source), UsageError (bad option values) or OperationError
    (a refused conversion: the message says why and which flag settles it).
    """
    if to is not None and to not in TARGET_FAMILIES:
        raise UsageError(f"--to {to}: expected one of {', '.join(TARGET_FAMILIES)}", "drop --to to keep the dialect")
    block_size = optional_count(block_size, "block_size")
    engines = engine_specs(for_engines)
    for spec in engines:
        rules = ENGINE_RULES.get(spec)
        if rules is None:
            raise UsageError(f"--for {spec}: no table for that release", f"choose from: {', '.join(ENGINE_RULES)}")
        formats = rules.reads_format(to) if to is not None else None
        if formats is not None and not formats.read:
            raise UsageError(f"--for {spec} --to {to}: {spec} reads no {to} config", "drop --to, or choose another")
    if block_size is not None and block_size < 1:
        raise UsageError(f"--block-size {block_size}: must be a positive integer", "pass the trained block size")
    loaded = (
        source
        if isinstance(source, LoadedCheckpoint)
        else load_checkpoint(source, revision=revision, token=token, timeout=timeout)
    )
    loaded = follow_cache_links(loaded)
    target_spec = target_argument(target, token=token, timeout=timeout)
    before = inspect_loaded(loaded, target=target_spec)
    name = loaded.source
    if loaded.config is None:
        reason = next((f.message for f in before.findings if f.code == "DFT001"), f"{CONFIG_NAME} is unusable")
        raise SourceError(f"{name}: cannot convert: {reason}", "restore config.json, then run convert again")
    too_deep = next((f for f in before.findings if f.code == "DFT062"), None)
    depth, where = depth_and_path(loaded.config)
    if too_deep is not None or depth > MAX_CONFIG_DEPTH:
        # Every writer walks the config recursively; refuse before one of them hits the stack
        # limit. Measured here too: a checkpoint built in Python carries no reader's findings.
        message = too_deep.message if too_deep else f"{CONFIG_NAME}: {where} nests more than {MAX_CONFIG_DEPTH} levels"
        raise SourceError(f"{name}: cannot convert: {message}", too_deep.hint if too_deep else "")
    desc = before.description
    if desc is None:
        reason = next(
            (f.message for f in before.findings if f.code in ("DFT002", "DFT006")), "the config cannot be read"
        )
        raise OperationError(f"{name}: cannot convert: {reason}", "run `dflash-tools inspect` on it for details")

    family = desc.dialect.family
    destination = to or _destination_for(engines, family, desc, name)
    cross = destination != family
    if cross:
        check_cross_dialect(desc, destination)

    decisions: list[Decision] = []
    warnings: list[str] = []
    if to is None and cross:
        decisions.append(
            Decision(
                "dialect",
                destination,
                "flag",
                f"--for {', '.join(engines)}: {family} configs are not read there; written in {destination} form",
            )
        )
    geometry = decide_geometry(
        desc, block_size, sample_from_anchor, force=force, decisions=decisions, warnings=warnings
    )

    if not cross:
        config = dialects.normalize(desc, geometry)
        if target_spec is not None and family == "speculators":
            fill_missing_verifier(config, target_spec, decisions)
        config_text = dumps_like(config, loaded.config_text)
    else:
        config = render_cross(loaded.config, desc, destination, geometry, target_spec, decisions, warnings)
        config_text = cross_text(config, loaded.config, loaded.config_text, destination)

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
    if engines:
        plan.engines = _check_engines(plan, output_desc, engines)
    plan.tensor_changes = _tensor_changes(loaded, desc, output_desc, destination, cross)
    if not loaded.weights_inspected:
        warnings.append("weights were not inspected (no safetensors headers): only config.json is converted")
    return plan


def _destination_for(engines: list[str], family: str, desc: DraftDescription, source: str) -> str:
    """The dialect family every engine of `--for` reads: the source's own when it can, else z-lab
    (SGLang reads no speculators configs; convert translates DFlash and DFlash2 only)."""
    unread = [spec for spec in engines if not _reads(spec, family)]
    if not unread:
        return family
    translatable = family == "speculators" and desc.algorithm in (Algorithm.DFLASH, Algorithm.DFLASH2)
    if translatable and all(_reads(spec, "zlab") for spec in engines):
        return "zlab"
    names = ", ".join(unread)
    raise OperationError(
        f"--for {names}: {names} reads no {family} config, and dflash-tools cannot write this "
        f"{desc.algorithm.value} draft in a form it reads",
        f"serve it with an engine that reads it: `dflash-tools inspect {shlex.quote(source)} --engine all` says which",
    )


def _reads(spec: str, family: str) -> bool:
    rule = ENGINE_RULES[spec].reads_format(family)
    return rule is not None and rule.read


def _check_engines(plan: ConvertPlan, output_desc: DraftDescription, engines: list[str]) -> dict[str, dict[str, Any]]:
    """What each `--for` engine does with the written config; refuse one that cannot serve it."""
    facts = DraftFacts.of(
        plan.config,
        output_desc,
        plan.output_geometry,
        source=plan.loaded.source,
        draft="OUT",
        target_spec=plan.target,
    )
    verdicts: dict[str, dict[str, Any]] = {}
    for spec in engines:
        view = engine_view(ENGINE_RULES[spec], facts)
        errors = [f for f in view.findings if f.severity is Severity.ERROR]
        if not view.serves_as_trained or errors:
            reason = view.refusal or (errors[0].message if errors else view.outcome.value)
            hint = errors[0].hint if errors and errors[0].hint else f"drop --for {spec}"
            raise OperationError(f"--for {spec}: {spec} cannot serve this draft as trained: {reason}", hint)
        plan.warnings.extend(f.message for f in view.findings if f.severity is Severity.WARNING)
        verdicts[json_key(ENGINE_RULES[spec])] = {
            "outcome": view.outcome.value,
            "layout": view.layout.value if view.layout else None,
            "block_size": view.block_size,
            "block_size_source": view.block_size_source,
            "draft_tokens": view.draft_tokens,
            "matches_training": view.matches_training,
            "plugin": view.plugin,
            "findings": [f.code for f in view.findings],
        }
    return verdicts


def follow_cache_links(loaded: LoadedCheckpoint) -> LoadedCheckpoint:
    """A local Hugging Face snapshot folder, with its blob links read through (see load_following_links)."""
    folder = loaded.local_dir
    if loaded.kind != "local" or folder is None or not Path(loaded.location).is_dir() or not is_in_hf_cache(folder):
        return loaded
    return load_following_links(folder, loaded.source)


def _describe(config: dict[str, Any]) -> tuple[DraftDescription | None, str]:
    try:
        return dialects.read(config), ""
    except (dialects.UnknownDialect, dialects.ConfigInvalid) as exc:
        return None, str(exc)


def _tensor_changes(
    loaded: LoadedCheckpoint, desc: DraftDescription, output_desc: DraftDescription, destination: str, cross: bool
) -> list[TensorChange]:
    expected = {t.name for t in expected_tensors(output_desc) if t.requirement is not Requirement.FORBIDDEN}
    changes: list[TensorChange] = []
    taken = set(loaded.tensors)
    # Tensors a format names its own way (DialectSpec.tensor_names): across formats, the
    # destination's name (engines load either; each format's own code expects its own).
    zlab_names = {own: zlab for zlab, own in desc.spec.tensor_names.items()}
    own_names = output_desc.spec.tensor_names if cross else {}
    for name, tensor in loaded.tensors.items():
        if cross:
            wanted = own_names.get(zlab_names.get(name, name), zlab_names.get(name, name))
            if wanted != name and wanted in expected and wanted not in taken:
                taken.add(wanted)
                changes.append(
                    TensorChange(
                        name,
                        "rename",
                        tensor.file,
                        f"the {output_desc.spec.title} format names it {wanted}",
                        wanted,
                    )
                )
                continue
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
