"""The steps every engine's column of `inspect --engine` shares (`engine_view` runs them).

Each step reads the draft the way one release does (its table: `dflash_tools.engine_rules`),
compares what it serves with what the draft was trained with, and records what it found on the
`EngineView` (an outcome, findings). The engine-specific steps are `sglang_column` and
`vllm_column`; what one vLLM release needs to run a draft is `vllm_runtime`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dflash_tools.dialects import spec_for_family
from dflash_tools.dialects.features import CONDITIONS, features_used
from dflash_tools.dialects.features import outcome as feature_outcome
from dflash_tools.draft.config_paths import find_path
from dflash_tools.draft.geometry import layout_name
from dflash_tools.engine_rules import ENGINE_RULES, Layout, Outcome, WhenMissing
from dflash_tools.engine_rules.config_loading import resolve
from dflash_tools.findings import Severity
from dflash_tools.serving.config_reads import as_int, int_list, lookup, num_hidden_layers, source_name
from dflash_tools.serving.engine_checks import CHECKERS
from dflash_tools.serving.engine_model import RANK, DraftFacts, EngineView
from dflash_tools.serving.load_path import defaults_step, installed_reading, notable_fills, resolution_step

# How hints name an engine.
ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM"}


def format_and_route(view: EngineView, facts: DraftFacts) -> bool:
    """Whether the release can load the draft at all; sets `reads_format` and `path`."""
    rules = view.rules
    if facts.family is None or facts.algorithm is None:
        _unread_architecture(view, facts)
        return False
    rule = rules.reads_format(facts.family)
    view.reads_format = bool(rule and rule.read)
    spec = spec_for_family(facts.family)
    if not view.reads_format:
        why = f" ({rule.note})" if rule is not None and rule.note else ""
        reason = f"reads no {facts.family} config{why}"
        view.fail(Outcome.UNSUPPORTED, reason)
        hint = (
            spec.unread_hint(facts.algorithm) if spec is not None else "serve it with an engine that reads this format"
        )
        view.note(
            "DFT070",
            f"{_release_name(view)} cannot load this draft: it {reason}",
            hint,
            keys=spec.format_keys if spec is not None else (),
        )
        return False
    route = rules.route(facts.algorithm)
    if route is None:
        reason = f"does not serve {facts.algorithm} drafts"
        view.fail(Outcome.UNSUPPORTED, reason)
        view.note(
            "DFT070",
            f"{_release_name(view)} cannot serve this draft: it {reason}",
            "serve it with a release that does: `dflash-tools inspect SRC --engine all` shows which",
            keys=("architectures",),
        )
        return False
    view.path = route.path
    # A format the engine translates when it loads it writes its own architecture: only formats
    # loaded by their `architectures` are checked against the release's loaders.
    loaded_by_architecture = spec is None or spec.loaded_by_architecture
    if loaded_by_architecture and facts.architecture not in route.architectures:
        reason = (
            f"has no loader for architecture {facts.architecture} on its {route.path} path "
            f"(it has: {', '.join(route.architectures)})"
        )
        view.fail(Outcome.UNSUPPORTED, reason)
        view.note(
            "DFT070",
            f"{_release_name(view)} cannot load this draft: it {reason}",
            "check that architectures in config.json names the draft's class: it must be one of those loaders",
            keys=("architectures",),
        )
        return False
    return True


def _unread_architecture(view: EngineView, facts: DraftFacts) -> None:
    """A config no dialect reads: unchecked where the release registers its architecture (DFT008),
    unsupported where it does not."""
    row = view.rules.architecture(facts.architecture)
    if row is not None and row.family is None:
        route = view.rules.route(row.algorithm)
        view.path = route.path if route is not None else None
        reason = f"has a loader for {row.name} ({row.loader}), but dflash-tools reads no config of it"
        view.fail(Outcome.UNCHECKED, reason)
        view.note(
            "DFT008",
            f"{reason}" + (f": {row.note}" if row.note else "") + "; nothing about how it serves the draft is checked",
            "check acceptance on the serving host: `dflash-tools smoke-test`",
            keys=("architectures",),
            values={"architecture": row.name},
        )
        return
    registered = any(other.architecture(facts.architecture) is not None for other in ENGINE_RULES.values())
    if row is None and facts.architecture is not None and registered:
        reason = f"has no loader for architecture {facts.architecture}"
        view.fail(Outcome.UNSUPPORTED, reason)
        view.note(
            "DFT070",
            f"{_release_name(view)} cannot load this draft: it {reason}",
            "serve it with a release that registers it (docs/engines.md)",
            keys=("architectures",),
        )
        return
    view.fail(Outcome.UNSUPPORTED, "the config matches no draft dialect")


def feature_outcomes(view: EngineView, facts: DraftFacts) -> None:
    """What the release does with each feature the draft declares (its table's `FeatureRule`s):
    a feature it ignores or refuses is noted (DFT071, DFT074) and decides the outcome."""
    spec = spec_for_family(facts.family or "")
    uses = features_used(
        facts.config, spec, layer_ids=facts.trained_layer_ids, num_target_layers=view.num_target_layers
    )
    for use in uses:
        got, rule = feature_outcome(
            view.rules, view.path, use, lambda name: CONDITIONS[name](facts.config, facts.algorithm)
        )
        if rule is not None and rule.target_dependent:
            view.note(
                "DFT075",
                f"{use.feature.title} ({use.where()}): {rule.note}",
                "check what the draft was trained on, and acceptance on the target: `dflash-tools smoke-test`",
                keys=tuple(use.stated),
                values={"feature": use.feature.name},
            )
            continue
        if got in (Outcome.SERVED, Outcome.SERVED_WITH_PLUGIN) or rule is None:
            continue
        view.fail(got, f"{use.feature.title} ({use.where()}): {rule.note}")
        code = "DFT074" if got is Outcome.REFUSED else "DFT071"
        verb = "refuses it" if got is Outcome.REFUSED else "serves it wrong"
        view.note(
            code,
            f"{verb}: {use.feature.title} ({use.where()}): {rule.note}",
            f'serve it with a release that reads it (docs/engines.md, "Config features"); the rule: {rule.cite}',
            keys=tuple(use.stated),
            values={"feature": use.feature.name},
        )


def resolve_layer_ids(view: EngineView, facts: DraftFacts) -> None:
    """`target_layer_ids` as the release reads them, or derives them when the config has none."""
    rules, config = view.rules, facts.config
    assert view.path is not None
    rule = rules.key("target_layer_ids", view.path, facts.family)
    value, location = lookup(config, rule)
    # The target's own layer count decides what is captured; the config's is a fallback.
    count_rule = rules.key("num_target_layers", view.path, facts.family)
    count, count_location = lookup(config, count_rule)
    if facts.target_num_layers is not None:
        view.num_target_layers, view.num_target_layers_source = facts.target_num_layers, "target"
    elif as_int(count) is not None and count_rule is not None and count_rule.locations:
        view.num_target_layers, view.num_target_layers_source = as_int(count), source_name(count_location)
    if location is not None and value is None and rule is not None and rule.when_missing is WhenMissing.DERIVED:
        # A present null is no list: both engines derive the layers then, as when the key is
        # absent (SGLang parse_dflash_draft_config: `if layer_ids is None`, then
        # DFlashDraftConfig.resolve_target_layer_ids; vLLM skips it, `KeyRead.empty_is_absent`).
        location = None
    if location is not None and rule is not None:
        ids = int_list(value)
        if ids is None:
            view.fail(Outcome.REFUSED, f"{location} is {value!r}, not a list of layer ids")
            view.note("DFT074", f"{location} is {value!r}, which it cannot read as layer ids", keys=(location,))
            return
        shift = rule.shift_for(location)
        ids = [i + shift for i in ids]
        view.target_layer_ids = sorted(set(ids)) if rules.captures_sorted else ids
        view.target_layer_ids_source = "config"
        return
    if rule is not None and rule.when_missing is WhenMissing.REFUSED:
        reason = f"none of {', '.join(rule.locations)} is set, and it needs them"
        view.fail(Outcome.REFUSED, reason)
        view.note("DFT074", reason, keys=rule.locations)
        return
    derive = rules.derive_target_layer_ids
    layers = view.num_target_layers
    draft_layers = facts.num_draft_layers or as_int(num_hidden_layers(config))
    if derive is None or layers is None or draft_layers is None:
        view.target_layer_ids_source = "derived"
        view.note(
            "DFT075",
            "the config names no target layers and the engine derives them from the target's layer count, which "
            "is unknown here",
            "pass --target to see which layers it captures, or write target_layer_ids into the config",
            keys=("target_layer_ids",),
        )
        return
    view.target_layer_ids_source = "derived"
    try:
        view.target_layer_ids = derive(layers, draft_layers)
    except ValueError:
        return  # the `derivable-layer-ids` check says why


def compare_layer_ids(view: EngineView, facts: DraftFacts) -> bool:
    """DFT073 when the captured layers are not the trained ones; True when they are known to match."""
    served, trained = view.target_layer_ids, facts.trained_layer_ids
    if served is None:
        return False
    if trained is None:
        if view.target_layer_ids_source == "derived":
            view.note(
                "DFT073",
                f"the config names no target layers; it derives {served}, and nothing says the draft was trained "
                "on those",
                "write the trained target_layer_ids into dflash_config",
                keys=("target_layer_ids",),
                values={"target_layer_ids": served},
                severity=Severity.WARNING,
            )
        return False
    if served == trained:
        return True
    how = "derives" if view.target_layer_ids_source == "derived" else "captures"
    view.note(
        "DFT073",
        f"it {how} target layers {served}, but the draft was trained on {trained}",
        "write the trained target_layer_ids (sorted, without duplicates) into the config: "
        "`dflash-tools convert SRC -o OUT` keeps them where every engine reads them",
        keys=("target_layer_ids",),
        values={"target_layer_ids": served, "trained_target_layer_ids": trained},
    )
    if len(served) != len(trained):
        view.fail(Outcome.REFUSED, f"it captures {len(served)} target layers, the draft's input takes {len(trained)}")
    else:
        view.fail(Outcome.SERVED_WRONG, f"it captures target layers {served}, not the trained {trained}")
    return False


def compare_mask(view: EngineView, facts: DraftFacts) -> bool:
    served, trained = view.mask_token_id, facts.trained_mask_token_id
    if served is None or trained is None:
        return view.mask_token_id_source != "looked-up" and served == trained
    if served != trained:
        view.note(
            "DFT071",
            f"it reads mask_token_id {served} from {view.mask_token_id_source}, but the draft describes {trained}",
            "write one mask_token_id everywhere: `dflash-tools convert SRC -o OUT`",
            keys=("mask_token_id",),
        )
        view.fail(Outcome.SERVED_WRONG, f"it embeds the masked positions with token {served}, not {trained}")
        return False
    return True


def record_layout_read(view: EngineView, facts: DraftFacts, locations: tuple[str, ...], found: str | None) -> str:
    """Record where the release reads the layout and what it found; returns what it leaves unread:
    a declaration the config makes in a spelling or place the release does not read (empty: none)."""
    view.layout_read_from = locations
    view.layout_source = found if found is not None else ("default" if locations else "not read")
    spec = spec_for_family(facts.family or "")
    if spec is None:
        return ""
    declared = [key.path for key in spec.keys.layout if key.path not in locations and _present(facts.config, key.path)]
    return f" (it does not read {', '.join(declared)})" if declared else ""


def _present(config: dict[str, Any], path: str) -> bool:
    present, value = find_path(config, path)
    return present and value is not None


def layout_outcome(view: EngineView, facts: DraftFacts, algorithm_key: str, reads: str) -> None:
    """Misaligned when the engine's layout differs from training; else the table's outcome. A
    layout only inferred makes DFT071 a warning; an unknown one is `unchecked`, with what the
    release does under each reading (DFT018)."""
    rules = view.rules
    trained = facts.trained_layout
    if facts.trained_layout_unknown and view.layout is not None:
        served = view.layout
        readings = []
        for layout in (Layout.BONUS, Layout.ANCHOR_FIRST):
            rule = rules.outcome(algorithm_key, layout)
            if rule is not None and rule.outcome in (Outcome.REFUSED, Outcome.UNSUPPORTED):
                word = rule.outcome.value
            elif served is not layout or (rule is not None and rule.outcome is Outcome.MISALIGNED):
                word = "misaligned, one position off"
            else:
                word = "served with the plugin" if rule and rule.outcome is Outcome.SERVED_WITH_PLUGIN else "served"
            readings.append(f"if trained {layout_name(layout is Layout.ANCHOR_FIRST)}: {word}")
        reason = f"the trained layout is unknown; it serves the {served.value} layout ({reads}): " + "; ".join(readings)
        view.fail(Outcome.UNCHECKED, reason)
        target = facts.target if facts.target and " " not in facts.target else "TARGET"
        view.note(
            "DFT018",
            reason,
            f"settle the layout on the target with smoke-test's --compare-layouts (dflash-tools smoke-test -t {target} "
            "-d SRC --compare-layouts)",
            keys=("sample_from_anchor",),
        )
        return
    if trained is None or view.layout is None:
        return
    # An error only when the file declares the layout (docs/rules.md, "How sample_from_anchor is decided").
    severity = None if facts.trained_layout_stated else Severity.WARNING
    rule = rules.outcome(algorithm_key, trained)
    if rule is not None and rule.outcome in (Outcome.REFUSED, Outcome.UNSUPPORTED):
        # It does not load such drafts at all: that, not the layout, is what the user meets first.
        reason = f"does not serve {algorithm_key} drafts: {rule.note}"
        view.fail(rule.outcome, reason)
        hint = rule.hint or "serve it with an engine that does (docs/engines.md)"
        refused = rule.outcome is Outcome.REFUSED
        message = f"{_release_name(view)} {'refuses' if refused else 'cannot serve'} this draft: it {reason}"
        view.note("DFT074" if refused else "DFT070", message, hint, keys=("architectures",))
        return
    if view.layout is not trained:
        reason = (
            f"{_release_name(view)} would run this {trained.value} draft one position off, so acceptance "
            f"collapses while the output stays correct: it serves the {view.layout.value} layout; {reads}"
        )
        view.fail(Outcome.MISALIGNED, reason)
        view.note("DFT071", reason, misaligned_hint(view, facts), keys=("sample_from_anchor",), severity=severity)
        return
    if rule is None:
        return
    if rule.outcome is Outcome.MISALIGNED:
        reason = (
            f"{_release_name(view)} would run this {trained.value} draft one position off, so acceptance "
            f"collapses while the output stays correct: it serves {algorithm_key} drafts in the bonus layout only; "
            f"{rule.note}"
        )
        view.fail(Outcome.MISALIGNED, reason)
        view.note("DFT071", reason, misaligned_hint(view, facts), keys=("sample_from_anchor",), severity=severity)
    elif rule.outcome is Outcome.SERVED_WITH_PLUGIN:
        view.outcome = max(view.outcome, Outcome.SERVED_WITH_PLUGIN, key=RANK.__getitem__)


def _release_name(view: EngineView) -> str:
    """`SGLang 0.5.23`, `vLLM 0.34.0`: how a finding's sentence names the release."""
    return f"{ENGINE_NAMES.get(view.rules.engine, view.rules.engine)} {view.rules.version}"


def misaligned_hint(view: EngineView, facts: DraftFacts) -> str:
    """The release's own advice for drafts of this algorithm trained in this layout (its table's
    `LayoutRule.hint`), else: write the trained layout where the engine reads it."""
    trained = facts.trained_layout
    rule = view.rules.outcome(facts.algorithm or "", trained) if trained is not None else None
    if rule is not None and rule.hint:
        return rule.hint
    engine = ENGINE_NAMES.get(view.rules.engine, view.rules.engine)
    return f"write the trained layout where {engine} reads it: `dflash-tools convert SRC -o OUT`"


def run_checks(view: EngineView, facts: DraftFacts) -> None:
    assert view.path is not None
    for check in view.rules.checks_on(view.path):
        problem = CHECKERS[check.name](view, facts)
        if problem is None:
            continue
        code = "DFT074" if check.outcome is Outcome.REFUSED else "DFT071"
        verb = "refuses it" if check.outcome is Outcome.REFUSED else "serves it wrong"
        view.fail(check.outcome, problem)
        hint = f"the rule: {check.rule} ({check.cite})"
        if check.name == "markov-rank" and facts.trained_sample_from_anchor:
            hint = (
                "no SGLang path serves it as trained: DSPARK needs a Markov head and DFLASH is bonus-only, while this "
                "draft is anchor-first; serve it with vLLM (method dspark)"
            )
        view.note(code, f"{verb}: {problem}", hint, keys=check.keys)


def matches_training(view: EngineView, facts: DraftFacts, ids_match: bool, mask_match: bool) -> bool:
    k_max = facts.trained_max_tokens
    return (
        view.serves_as_trained
        and view.layout is not None
        and view.layout is facts.trained_layout
        and k_max is not None
        and view.draft_tokens is not None
        and view.draft_tokens <= k_max
        and ids_match
        and mask_match
    )


def config_resolution(view: EngineView, facts: DraftFacts) -> DraftFacts | None:
    """The first steps of the release's load path (`serving.load_path`: (a) config resolution,
    (b) the defaults its config class fills): None when the engine cannot load the config
    (`wont-load`, DFT078); else the draft as the engine sees it, the filled values merged into
    the config where the file leaves the keys out (DFT079 where they change the draft)."""
    loading = view.rules.config_loading
    if loading is None:
        return facts
    resolution = resolve(
        facts.config, loading, draft=facts.draft or facts.source, installed=installed_reading(loading, facts.config)
    )
    view.resolution = resolution
    view.load_path.append(resolution_step(loading, resolution))
    if resolution.error is not None:
        view.fail(Outcome.WONT_LOAD, resolution.error)
        # A format the release reads nowhere (speculators on SGLang): converting it is the fix.
        rule = view.rules.reads_format(facts.family) if facts.family is not None else None
        unread = rule is not None and not rule.read
        spec = spec_for_family(facts.family or "")
        hint = spec.unread_hint(facts.algorithm) if unread and spec is not None and facts.algorithm else resolution.hint
        view.note(
            "DFT078",
            f"{_release_name(view)} cannot load this draft: its config loader stops at "
            f"{resolution.fix_key or 'the config'} ({resolution.error})",
            hint,
            keys=(resolution.fix_key,) if resolution.fix_key else (),
            values={"model_type": resolution.model_type, "transformers": resolution.transformers},
        )
        return None
    view.load_path.append(defaults_step(resolution, facts.config))
    notable = notable_fills(resolution, facts.config)
    if notable:
        where = f"transformers {resolution.transformers}" + (
            ", the installed one" if resolution.source == "installed" else ", generated table"
        )
        view.note(
            "DFT079",
            f"{resolution.config_class} ({where}) fills keys the config leaves out, and they change what the draft "
            f"computes: {'; '.join(text for _, text in notable)}",
            "write the values the draft was trained with into config.json (the engine builds the draft from the "
            "filled ones)",
            keys=tuple(key for key, _ in notable),
            values={
                "config_class": resolution.config_class,
                "filled": {key: resolution.filled[key] for key, _ in notable},
            },
        )
    if not resolution.filled:
        return facts
    layer_types = resolution.filled.get("layer_types")
    return replace(
        facts,
        config={**facts.config, **resolution.filled},
        layer_types=tuple(layer_types)
        if facts.layer_types is None and isinstance(layer_types, list)
        else facts.layer_types,
    )
