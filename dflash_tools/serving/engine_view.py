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
from dflash_tools.findings import Finding
from dflash_tools.inspect import InspectReport, cap_findings, finish_findings, inspect_loaded
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.serving.column_steps import config_resolution, format_and_route
from dflash_tools.serving.engine_model import DraftFacts, EngineView
from dflash_tools.serving.installed_columns import Reader, installed_column, sglang_reader, vllm_reader
from dflash_tools.serving.installed_reading import InstalledEngineView
from dflash_tools.serving.installed_sglang import InstalledSglang
from dflash_tools.serving.installed_vllm import engine_reading_enabled
from dflash_tools.serving.launch import LaunchSettings
from dflash_tools.serving.load_path import later_steps
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
    view: EngineView | None = None,
) -> EngineView:
    """What `rules`' release does with the draft.

    `installed_vllm`: the vLLM installed in this environment, when `rules` is its release (its
    column then says what its files allow: `plugin_state`); None for a release that is not
    installed here (the dflash-tools plugin is taken to be installed with it on the serving
    host). `settings`: what the serving plan adds to the launch line. `view`: the (empty) view to
    fill in, of a subclass (`installed_reading.InstalledEngineView`); a new one when None.
    """
    view = view if view is not None else EngineView(rules=rules, installed=installed_vllm is not None)
    # The release's load path in order (serving.load_path): config resolution and the defaults
    # its config class fills, then the dialect, the registry and the model's own reading.
    loaded = config_resolution(view, facts)
    reached = False
    if loaded is not None and format_and_route(view, loaded):
        reached = True
        _COLUMNS[rules.engine](view, loaded, installed_vllm, settings)
    view.load_path.extend(later_steps(view, loaded or facts, reached))
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
    installed_reader: Reader | None = None,
    installed_sglang: InstalledSglang | None = None,
    sglang_reader: Reader | None = None,
) -> InspectReport:
    """The inspect walk, then one `EngineView` per release: findings added, JSON `engines`.

    `installed_vllm` adds the vLLM in this environment (`inspect --engine vllm`): its serving
    findings (`vllm_view`) and, when the tool has a table for its release, its column with the
    plugin's real state, read from that vLLM's own config code (`installed_columns`), replacing
    the static column of the same release; a release without a table gets a column read from it.
    `installed_reader`: how that vLLM is asked (default: a child process per draft; the tiers
    pass readings taken in one batch). `installed_sglang`: the SGLang installed here (`--engine
    sglang` where it is: `asks_installed_sglang`), read the same way through `sglang_reader`
    (default: its child process).
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
    unplaced: list[Finding] = []
    if installed_vllm is not None and installed_vllm.installed and installed_vllm.version:
        unplaced += _installed_vllm_view(views, loaded, facts, installed_vllm, installed_reader)
    if installed_sglang is not None and (sglang_reader is not None or engine_reading_enabled()):
        unplaced += _installed_sglang_view(views, loaded, facts, installed_sglang, sglang_reader)
    ordered = [spec for spec in ENGINE_RULES if spec in views] + [spec for spec in views if spec not in ENGINE_RULES]
    report.extra["engines"] = {_json_key(views[spec]): views[spec].to_dict() for spec in ordered}
    extra = [*unplaced, *(finding for spec in ordered for finding in views[spec].findings)]
    report.findings, omitted = cap_findings(finish_findings(loaded, [*report.findings, *extra]))
    for severity, count in omitted.items():
        report.omitted[severity] = report.omitted.get(severity, 0) + count
    return report


def _installed_vllm_view(
    views: dict[str, EngineView],
    loaded: LoadedCheckpoint,
    facts: DraftFacts,
    installed: VllmCapability,
    reader: Reader | None,
) -> list[Finding]:
    """The installed vLLM's column (`installed_columns`) into `views`, under its release's spec;
    returns the findings that belong to no column."""
    assert installed.version is not None
    rules = get_rules(f"vllm=={installed.version}")
    if reader is None and not engine_reading_enabled():
        if rules is not None:
            views[rules.spec] = engine_view(rules, facts, installed_vllm=installed)
        return []

    def build(table: EngineRules, view: EngineView | None) -> EngineView:
        return engine_view(table, facts, installed_vllm=installed, view=view)

    read = reader or vllm_reader(loaded, installed.version)
    column = installed_column("vllm", installed.version, rules, facts, build, read)
    spec = rules.spec if rules is not None else f"vllm=={installed.version}"
    if column.view is not None:
        views[spec] = column.view
    return column.findings


def _installed_sglang_view(
    views: dict[str, EngineView],
    loaded: LoadedCheckpoint,
    facts: DraftFacts,
    installed: InstalledSglang,
    reader: Reader | None,
) -> list[Finding]:
    """The installed SGLang's column into `views` (as `_installed_vllm_view`)."""
    rules = get_rules(f"sglang=={installed.version}")

    def build(table: EngineRules, view: EngineView | None) -> EngineView:
        return engine_view(table, facts, view=view)

    read = reader or sglang_reader(loaded, installed.version)
    column = installed_column("sglang", installed.version, rules, facts, build, read)
    spec = rules.spec if rules is not None else f"sglang=={installed.version}"
    if column.view is not None:
        views[spec] = column.view
    return column.findings


def asks_installed_sglang(values: list[str]) -> bool:
    """`--engine sglang` (the bare name) also reads the SGLang installed here, where one is."""
    return any(part.strip() == "sglang" for value in values for part in value.split(","))


def _json_key(view: EngineView) -> str:
    """`json_key` of the view's table; a release read from the installed engine that has no
    table of its own is keyed by its own `engine==version`."""
    if isinstance(view, InstalledEngineView) and not view.has_table:
        return view.spec
    return json_key(view.rules)
