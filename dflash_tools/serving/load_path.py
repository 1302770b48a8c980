"""The load path of one engine column: each step the release takes with the draft, in order.

(a) config resolution and (b) the defaults the config class fills (`engine_rules.config_loading`),
(c) the dialect translation, (d) the registry, (e) the model's own reading. `column_steps.
config_resolution` runs (a) and (b) before the rest of the column; `later_steps` records (c) to
(e) from what the column found. JSON: `engines.*.load_path`, one object per step with its
`step`, the engine `source` file it follows, what it `read`, what it `decided` and its `status`
(docs/json.md).

The transformers installed here answers (b) instead of the generated table when an engine
release would run with it and the table is of another version (`installed_reading`); it is
asked in a process of its own (`engine_rules.transformers_probe`), once per config.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from typing import Any

from dflash_tools.engine_rules import Outcome
from dflash_tools.engine_rules.config_loading import AUTO_CONFIG_CITE, ConfigLoading, Resolution
from dflash_tools.engine_rules.transformers_probe import FILL_KEYS, stated
from dflash_tools.serving.engine_model import DraftFacts, EngineView

# How long the installed transformers may take to answer (it imports torch) before the table answers.
INSTALLED_TIMEOUT_S = 120.0

# The statuses of a step.
PASSED, STOPPED, DIFFERS, UNCHECKED, NOT_REACHED = "passed", "stopped", "differs", "unchecked", "not reached"


@functools.cache
def installed_transformers() -> str | None:
    """The version of the transformers installed here (read from its metadata: no import)."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def runs_with(version: str, requirement: str) -> bool:
    """Whether transformers `version` satisfies a release's requirement (`>=5.16.1,<5.21.0`)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion

    try:
        return SpecifierSet(requirement).contains(version, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


_READINGS: dict[str, dict[str, Any] | None] = {}


def installed_reading(loading: ConfigLoading, config: dict[str, Any]) -> dict[str, Any] | None:
    """What the installed transformers makes of `config` (`transformers_probe.read`), when the
    release would run with it and it is not the version of the release's table; None otherwise,
    or when it does not answer in time (the table answers then)."""
    version = installed_transformers()
    if version is None or version == loading.table or not runs_with(version, loading.transformers):
        return None
    key = json.dumps(config, sort_keys=True, default=str)
    if key not in _READINGS:
        from dflash_tools.engine_rules.transformers_probe import ask

        try:
            _READINGS[key] = ask("read", {"config": config}, timeout=INSTALLED_TIMEOUT_S)
        except Exception:
            _READINGS[key] = None
    return _READINGS[key]


# --------------------------------------------------------------------------------------------
# (a) and (b): what the steps read and decided
# --------------------------------------------------------------------------------------------


def resolution_step(loading: ConfigLoading, resolution: Resolution) -> dict[str, Any]:
    read: dict[str, Any] = {"model_type": resolution.model_type, "model_type_from": resolution.model_type_from}
    source = loading.parser + (f"; {AUTO_CONFIG_CITE}" if resolution.by_transformers or resolution.error else "")
    loads = f"loads it as {resolution.config_class}"
    decided = f"stops: {resolution.error}" if resolution.error is not None else loads
    if resolution.transformers is not None:
        read["transformers"] = resolution.transformers
        read["transformers_required"] = loading.transformers
    return _step("config", source, read, decided, STOPPED if resolution.error is not None else PASSED)


def defaults_step(resolution: Resolution, config: dict[str, Any]) -> dict[str, Any]:
    source = resolution.class_file or resolution.config_class or ""
    if resolution.by_transformers:
        origin = "the installed transformers" if resolution.source == "installed" else "the generated table"
        how = f"filled by {resolution.config_class} (transformers {resolution.transformers}, {origin})"
    else:
        how = f"{resolution.config_class}: its defaults are not tabulated"
    if resolution.config_class and "SpeculatorsConfig" in resolution.config_class:
        how = f"{resolution.config_class} builds the config object from transformer_layer_config: no class fills a key"
    decided: dict[str, Any] = {"by": how, "filled": resolution.filled}
    if resolution.not_tabulated:
        decided["not_tabulated"] = list(resolution.not_tabulated)
    left_out = [key for key in FILL_KEYS if not stated(config, key)]
    return _step("defaults", source, {"keys_left_out": left_out}, decided, PASSED)


def notable_fills(resolution: Resolution, config: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, what it changes) for each filled value that makes the draft compute something the
    config does not state: sliding-window layers, a RoPE scaling, attention biases, a head size
    other than hidden_size / num_attention_heads."""
    filled = resolution.filled
    out: list[tuple[str, str]] = []
    kinds = filled.get("layer_types")
    if isinstance(kinds, list) and "sliding_attention" in kinds:
        sliding = [i for i, kind in enumerate(kinds) if kind == "sliding_attention"]
        window = filled.get("sliding_window", config.get("sliding_window"))
        also = ", also filled" if "sliding_window" in filled else ""
        out.append(
            (
                "layer_types",
                f"layer_types: sliding_attention on layers {_ids(sliding)} of {len(kinds)} (window {window}{also}): "
                "the engine builds sliding-window draft layers, which the draft was maybe not trained with",
            )
        )
    rope = filled.get("rope_parameters")
    scaled = sorted(_rope_types(rope) - {"default", None})
    if scaled:
        factor = rope.get("factor") if isinstance(rope, dict) else None
        out.append(
            (
                "rope_parameters",
                f"rope_parameters: rope_type {'/'.join(map(str, scaled))}"
                + (f" (factor {factor})" if factor is not None else "")
                + ", a RoPE scaling the config does not state",
            )
        )
    if filled.get("attention_bias") is True:
        out.append(
            ("attention_bias", "attention_bias: true, so the engine builds q/k/v/o biases and loads their weights")
        )
    head_dim, hidden, heads = filled.get("head_dim"), config.get("hidden_size"), config.get("num_attention_heads")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (head_dim, hidden, heads)) and heads:
        assert isinstance(hidden, int) and isinstance(heads, int)
        if head_dim != hidden // heads:
            out.append(("head_dim", f"head_dim: {head_dim}, not hidden_size / num_attention_heads = {hidden // heads}"))
    return out


def _rope_types(rope: Any) -> set[Any]:
    if not isinstance(rope, dict):
        return set()
    if "rope_type" in rope:
        return {rope.get("rope_type")}
    return {part.get("rope_type") for part in rope.values() if isinstance(part, dict)}


def _ids(ids: list[int]) -> str:
    shown = ", ".join(map(str, ids[:8]))
    return shown + (", ..." if len(ids) > 8 else "")


# --------------------------------------------------------------------------------------------
# (c) to (e), recorded after the column
# --------------------------------------------------------------------------------------------


def later_steps(view: EngineView, facts: DraftFacts, reached_column: bool) -> list[dict[str, Any]]:
    """The dialect, registry and model steps, from what the column found."""
    rules = view.rules
    format_rule = rules.reads_format(facts.family) if facts.family is not None else None
    dialect_source = format_rule.cite if format_rule is not None else ""
    row = rules.architecture(facts.architecture)
    route = rules.route(facts.algorithm or "") if facts.algorithm else None
    registry_source = route.cite if route is not None else (row.cite if row is not None else "")
    layout_rule = rules.outcome(facts.algorithm or "", view.layout) if view.layout is not None else None
    model_source = layout_rule.cite if layout_rule is not None else registry_source
    dialect = _step("dialect", dialect_source, {"format": facts.family}, "", PASSED)
    registry = _step("registry", registry_source, {"architecture": facts.architecture}, "", PASSED)
    model = _step(
        "model",
        model_source,
        {"layout_from": view.layout_source, "block_size": view.block_size, "target_layer_ids": view.target_layer_ids},
        "",
        PASSED,
    )
    if view.outcome is Outcome.WONT_LOAD:
        for step in (dialect, registry, model):
            step["status"], step["decided"] = NOT_REACHED, ""
        return [dialect, registry, model]
    if not reached_column:
        stop = view.refusal or view.outcome.value
        status = UNCHECKED if view.outcome is Outcome.UNCHECKED else STOPPED
        if facts.family is None or not view.reads_format:
            dialect.update(status=status, decided=stop)
            registry.update(status=NOT_REACHED)
        else:
            dialect["decided"] = f"reads the {facts.family} format"
            registry.update(status=status, decided=stop)
        model.update(status=NOT_REACHED)
        return [dialect, registry, model]
    dialect["decided"] = f"reads the {facts.family} format"
    registry["decided"] = f"path {view.path}, architecture {facts.architecture}"
    served = view.serves_as_trained
    model["decided"] = (
        f"{view.outcome.value}: {view.layout.value if view.layout else '?'} layout, K = {view.draft_tokens}"
        + (f" ({view.refusal})" if view.refusal else "")
    )
    if not served:
        model["status"] = STOPPED if view.outcome in (Outcome.REFUSED, Outcome.UNSUPPORTED) else DIFFERS
    return [dialect, registry, model]


def _step(name: str, source: str, read: dict[str, Any], decided: Any, status: str) -> dict[str, Any]:
    return {"step": name, "source": source, "read": read, "decided": decided, "status": status}
