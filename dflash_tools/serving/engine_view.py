"""What each engine release will do with one draft: the view behind `inspect --engine` (and `plan`).

`engine_view(rules, facts)` applies one engine table (`dflash_tools.engine_rules`) to one draft: it
reads every key the way that release reads it (the table's locations, in order, and its
defaults), compares what the engine will serve with what the draft was trained with, runs the
release's own load-time rules (`Check`s, by name), and builds the launch line. The result is an
`EngineView`: one column of `inspect --engine all`, one object of the JSON `engines`.

The view works from the raw config, not only from the normalized description: an engine reads
keys our readers refuse to guess (SGLang derives missing layer ids), and that is what a user
must be told. What the draft was *trained* with comes from the description and geometry; where
those are unknown, `matches_training` is false.

Static tables describe a release that need not be installed here (the serving host's). For
vLLM the dflash-tools plugin is then assumed to be installed with it (`PluginState.ASSUMED`);
the vLLM installed in this environment is classified from its files (`vllm_capability`) instead.

This module holds the entry points; the steps are `column_steps` (every engine), `sglang_column`
and `vllm_column` (with `vllm_runtime`, which smoke-test shares).
"""

from __future__ import annotations

from collections.abc import Callable

from dflash_tools.draft.target import TargetDescription
from dflash_tools.engine_rules import ENGINE_RULES, EngineRules, get_rules, json_key, latest
from dflash_tools.inspect import InspectReport, cap_findings, finish_findings, inspect_loaded
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.serving.column_steps import format_and_route
from dflash_tools.serving.engine_model import DraftFacts, EngineView
from dflash_tools.serving.launch import LaunchSettings
from dflash_tools.serving.sglang_column import sglang_column
from dflash_tools.serving.vllm_capability import VllmCapability
from dflash_tools.serving.vllm_column import vllm_column
from dflash_tools.serving.vllm_view import inspect_for_vllm

# Each engine's column: the steps after the format and route that all engines share.
_COLUMNS: dict[str, Callable[[EngineView, DraftFacts, VllmCapability | None, LaunchSettings | None], None]] = {
    "sglang": lambda view, facts, _installed, settings: sglang_column(view, facts, settings),
    "vllm": vllm_column,
}


def engine_view(
    rules: EngineRules,
    facts: DraftFacts,
    *,
    installed_vllm: VllmCapability | None = None,
    settings: LaunchSettings | None = None,
) -> EngineView:
    """What `rules`' release does with the draft.

    `installed_vllm`: the vLLM installed in this environment, when `rules` is its release (its
    column then says what its files allow: `plugin_state`); None for a release that is not
    installed here (the dflash-tools plugin is taken to be installed with it on the serving
    host). `settings`: what the serving plan adds to the launch line.
    """
    view = EngineView(rules=rules, installed=installed_vllm is not None)
    if format_and_route(view, facts):
        _COLUMNS[rules.engine](view, facts, installed_vllm, settings)
    return view


# --------------------------------------------------------------------------------------------
# `inspect --engine`: which engines, and the report with their views
# --------------------------------------------------------------------------------------------

# `--engine vllm` is the vLLM installed in this environment; every other name is a table.
INSTALLED_VLLM = "vllm"
ALL = "all"


def engine_choices() -> list[str]:
    """What `--engine` accepts, for help and error messages."""
    names = sorted({rules.engine for rules in ENGINE_RULES.values()})
    return [ALL, *names, *ENGINE_RULES]


def resolve_engine_specs(values: list[str]) -> tuple[list[str], bool]:
    """(`engine==version` tables to apply, whether the installed vLLM was asked for).

    Each value may hold several, comma-separated: `all` (every table), `sglang` (its newest
    table), `vllm` (the vLLM installed here), `vllm==0.34.0` (that table; a local build label
    such as `+cpu` is ignored). Repeats collapse; the order is the tables' order. Raises
    ValueError naming the value that is not one of them.
    """
    wanted: set[str] = set()
    installed = False
    for value in values:
        for name in (part.strip() for part in value.split(",")):
            if not name:
                continue
            if name == ALL:
                wanted.update(ENGINE_RULES)
            elif name == INSTALLED_VLLM:
                installed = True
            elif "==" in name:
                rules = get_rules(name)
                if rules is None:
                    raise ValueError(f"{name}: no table for that release (known: {', '.join(ENGINE_RULES)})")
                wanted.add(rules.spec)
            else:
                newest = latest(name)
                if newest is None:
                    raise ValueError(f"{name}: unknown engine (choose from: {', '.join(engine_choices())})")
                wanted.add(newest.spec)
    if values and not wanted and not installed:
        # `--engine ''` (an unset shell variable) names nothing: not "no engine", a mistake.
        raise ValueError(f"{', '.join(map(repr, values))} names no engine")
    return [spec for spec in ENGINE_RULES if spec in wanted], installed


def inspect_for_engines(
    loaded: LoadedCheckpoint,
    specs: list[str],
    *,
    installed_vllm: VllmCapability | None = None,
    target: TargetDescription | None = None,
    target_name: str | None = None,
    num_speculative_tokens: int | None = None,
) -> InspectReport:
    """The inspect walk, then one `EngineView` per release: findings added, JSON `engines`.

    `installed_vllm` adds the vLLM in this environment (`inspect --engine vllm`): its serving
    findings (`vllm_view`) and, when the tool has a table for its release, its column with the
    plugin's real state (replacing the static column of the same release).
    """
    if installed_vllm is not None:
        report = inspect_for_vllm(loaded, installed_vllm, target=target, num_speculative_tokens=num_speculative_tokens)
    else:
        report = inspect_loaded(loaded, target=target, num_speculative_tokens=num_speculative_tokens)
    facts = DraftFacts.from_report(report, target=target_name)
    if facts is None:
        report.extra["engines"] = {}
        return report
    views = {spec: engine_view(ENGINE_RULES[spec], facts) for spec in specs}
    if installed_vllm is not None and installed_vllm.installed and installed_vllm.version:
        rules = get_rules(f"vllm=={installed_vllm.version}")
        if rules is not None:
            views[rules.spec] = engine_view(rules, facts, installed_vllm=installed_vllm)
    ordered = [spec for spec in ENGINE_RULES if spec in views]
    report.extra["engines"] = {json_key(views[spec].rules): views[spec].to_dict() for spec in ordered}
    extra = [finding for spec in ordered for finding in views[spec].findings]
    report.findings, omitted = cap_findings(finish_findings(loaded, [*report.findings, *extra]))
    for severity, count in omitted.items():
        report.omitted[severity] = report.omitted.get(severity, 0) + count
    return report
