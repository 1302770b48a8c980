"""What each engine release will do with one draft: the view behind `inspect --engine`.

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
vLLM the dflash-tools plugin is then assumed to be installed with it (`plugin="assumed"`); the
vLLM installed in this environment is classified from its files (`vllm_capability`) instead.
"""

from __future__ import annotations

from dflash_tools.draft.geometry import num_query_tokens
from dflash_tools.draft.target import TargetSpec
from dflash_tools.engine_rules import (
    ENGINE_RULES,
    EngineRules,
    Layout,
    Outcome,
    WhenMissing,
    get_rules,
    json_key,
    latest,
)
from dflash_tools.errors import VLLM_INSTALL_HINT
from dflash_tools.findings import Severity
from dflash_tools.inspect import InspectReport, cap_findings, finish_findings, inspect_loaded
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.serving.config_reads import as_int, int_list, lookup, num_hidden_layers, source_name
from dflash_tools.serving.engine_checks import CHECKERS
from dflash_tools.serving.engine_model import RANK, DraftFacts, EngineView, layout_for
from dflash_tools.serving.launch import LaunchSettings, sglang_launch, vllm_launch
from dflash_tools.serving.vllm_capability import VllmCapability
from dflash_tools.serving.vllm_view import inspect_for_vllm

# --------------------------------------------------------------------------------------------
# The parts every engine shares
# --------------------------------------------------------------------------------------------


def _format_and_route(view: EngineView, facts: DraftFacts) -> bool:
    """Whether the release can load the draft at all; sets `reads_format` and `path`."""
    rules = view.rules
    if facts.family is None or facts.algorithm is None:
        view.fail(Outcome.UNSUPPORTED, "the config matches no draft dialect")
        return False
    rule = rules.reads_format(facts.family)
    view.reads_format = bool(rule and rule.read)
    if not view.reads_format:
        why = f" ({rule.note})" if rule is not None and rule.note else ""
        reason = f"reads no {facts.family} config{why}"
        view.fail(Outcome.UNSUPPORTED, reason)
        view.note("DFT070", reason, _format_hint(facts), keys=_FORMAT_MARKERS.get(facts.family, ()))
        return False
    route = rules.route(facts.algorithm)
    if route is None:
        reason = f"does not serve {facts.algorithm} drafts"
        view.fail(Outcome.UNSUPPORTED, reason)
        view.note("DFT070", reason, "serve it with another engine", keys=("architectures",))
        return False
    view.path = route.path
    if facts.family != "speculators" and facts.architecture not in route.architectures:
        reason = (
            f"has no loader for architecture {facts.architecture} on its {route.path} path "
            f"(it has: {', '.join(route.architectures)})"
        )
        view.fail(Outcome.UNSUPPORTED, reason)
        view.note("DFT070", reason, "check architectures in config.json", keys=("architectures",))
        return False
    return True


_FORMAT_MARKERS = {"speculators": ("speculators_model_type",), "open-spec": ("open_spec_config_version",)}


def _format_hint(facts: DraftFacts) -> str:
    if facts.family == "speculators" and facts.algorithm in ("dflash", "dflash2"):
        return "convert it to the z-lab form it reads: `dflash-tools convert SRC -o OUT --to zlab`"
    if facts.family == "speculators":
        return "serve it with vLLM, which translates speculators DSpark configs"
    if facts.family == "open-spec":
        return (
            "no serving engine reads Open Spec configs, and dflash-tools convert does not translate them: write "
            "the z-lab form (docs/convert.md)"
        )
    return "serve it with an engine that reads this format"


def _resolve_layer_ids(view: EngineView, facts: DraftFacts) -> None:
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


def _compare_layer_ids(view: EngineView, facts: DraftFacts) -> bool:
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


def _compare_mask(view: EngineView, facts: DraftFacts) -> bool:
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


def _layout_outcome(view: EngineView, facts: DraftFacts, algorithm_key: str, reads: str) -> None:
    """Misaligned when the engine's layout differs from training; else the table's outcome."""
    rules = view.rules
    trained = facts.trained_layout
    if trained is None or view.layout is None:
        return
    rule = rules.outcome(algorithm_key, trained)
    if rule is not None and rule.outcome in (Outcome.REFUSED, Outcome.UNSUPPORTED):
        # It does not load such drafts at all: that, not the layout, is what the user meets first.
        reason = f"does not serve {algorithm_key} drafts: {rule.note}"
        view.fail(rule.outcome, reason)
        hint = (
            "serve it with SGLang, whose DFLASH path has the Domino projector"
            if algorithm_key == "dflash-domino"
            else "serve it with an engine that does (docs/engines.md)"
        )
        view.note("DFT074" if rule.outcome is Outcome.REFUSED else "DFT070", reason, hint, keys=("architectures",))
        return
    if view.layout is not trained:
        reason = (
            f"it serves the {view.layout.value} layout ({reads}), but the draft was trained {trained.value}: "
            "every draft is read one position off, acceptance collapses while the output stays correct"
        )
        view.fail(Outcome.MISALIGNED, reason)
        view.note("DFT071", reason, _misaligned_hint(view, facts), keys=("sample_from_anchor",))
        return
    if rule is None:
        return
    if rule.outcome is Outcome.MISALIGNED:
        reason = f"serves {algorithm_key} drafts in the bonus layout only ({rule.note})"
        view.fail(Outcome.MISALIGNED, reason)
        view.note("DFT071", reason, _misaligned_hint(view, facts), keys=("sample_from_anchor",))
    elif rule.outcome is Outcome.SERVED_WITH_PLUGIN:
        view.outcome = max(view.outcome, Outcome.SERVED_WITH_PLUGIN, key=RANK.__getitem__)


def _misaligned_hint(view: EngineView, facts: DraftFacts) -> str:
    if view.rules.engine == "sglang":
        if facts.algorithm in ("dflash", "dflash2"):
            return (
                "no SGLang path serves an anchor-first DFlash draft: DFLASH is bonus-only and DSPARK serves the "
                "anchor-first layout only for drafts with a Markov head (markov_rank > 0); serve it with vLLM and "
                "the dflash-tools plugin"
            )
        return "write the trained layout where SGLang reads it: `dflash-tools convert SRC -o OUT`"
    return "write the trained layout where vLLM reads it: `dflash-tools convert SRC -o OUT`"


# --------------------------------------------------------------------------------------------
# SGLang
# --------------------------------------------------------------------------------------------


def _sglang_view(view: EngineView, facts: DraftFacts, settings: LaunchSettings | None) -> None:
    rules, config = view.rules, facts.config
    path = view.path
    assert path is not None
    # Block size (DFLASH: the verify window; DSPARK: the number of drafts).
    block_rule = rules.key("block_size", path)
    value, location = lookup(config, block_rule)
    block = as_int(value)
    if location is not None and value is not None and (block is None or block < 1):
        reason = f"{location} is {value!r}, not a positive block size"
        view.fail(Outcome.REFUSED, reason)
        view.note("DFT074", reason, keys=(location,))
    if block is None and block_rule is not None:
        block, location = int(block_rule.default), None
    view.block_size, view.block_size_source = block, source_name(location)

    # Layout.
    algorithm_key = facts.algorithm or ""
    if facts.domino and path != "DSPARK":
        algorithm_key = "dflash-domino"
        shift, shift_location = lookup(config, rules.key("shift_label", path))
        view.layout = layout_for(shift is True) if isinstance(shift, bool) else None
        reads = f"it reads {shift_location} = {shift!r}"
    else:
        # The table's reading of sample_from_anchor: DSPARK reads it (absent: true); 0.5.23's
        # DFLASH reads it nowhere (always bonus), so a release that starts reading it changes
        # this view through its table alone.
        sfa_rule = rules.key("sample_from_anchor", path)
        sfa, sfa_location = lookup(config, sfa_rule)
        default = bool(sfa_rule.default) if sfa_rule is not None else False
        view.layout = layout_for(bool(sfa) if sfa_location is not None and sfa is not None else default)
        if sfa_location is not None:
            reads = f"it reads {sfa_location} = {sfa!r}"
        elif sfa_rule is not None and sfa_rule.locations:
            reads = f"sample_from_anchor is absent: {str(default).lower()}"
        else:
            always = "every position always drafts" if default else "position 0 is always the anchor"
            reads = f"{path} reads no sample_from_anchor: {always}"
    _layout_outcome(view, facts, algorithm_key, reads)

    # How many tokens the launch line drafts. DFLASH drafts one less than its verify window in
    # either layout (Domino's shift_label moves the proposals to positions 0..B-2, it does not
    # add one), and the window must not grow past the trained block.
    if path == "DFLASH":
        block_for_launch = facts.trained_block_size or block
        tokens = facts.requested_tokens or (block_for_launch - 1 if block_for_launch else None)
    else:
        tokens = facts.requested_tokens or facts.trained_max_tokens or block
    view.draft_tokens = tokens
    _sglang_block_warnings(view, facts, block, location)

    _resolve_layer_ids(view, facts)
    ids_match = _compare_layer_ids(view, facts)

    # Mask token.
    mask_rule = rules.key("mask_token_id", path)
    mask, mask_location = lookup(config, mask_rule)
    if mask_location is not None and mask is not None:
        view.mask_token_id, view.mask_token_id_source = as_int(mask), mask_location
    elif mask_rule is not None and mask_rule.when_missing is WhenMissing.LOOKED_UP:
        token_rule = rules.key("mask_token", path)
        token, _ = lookup(config, token_rule)
        if not (isinstance(token, str) and token):
            token = token_rule.default if token_rule is not None else None
        view.mask_token_id_source = "looked-up"
        view.note(
            "DFT075",
            f"the config has no mask_token_id: SGLang looks {token!r} up in the target's tokenizer and adds it when "
            "absent, so the id depends on the target",
            "write the mask_token_id the draft was trained with into dflash_config",
            keys=("mask_token_id",),
            values={"mask_token": token},
        )
    mask_match = _compare_mask(view, facts)

    _run_checks(view, facts)
    view.matches_training = _matches(view, facts, ids_match, mask_match)
    if view.serves_as_trained and view.draft_tokens:
        view.launch = sglang_launch(
            rules,
            draft=facts.draft,
            path=path,
            num_draft_tokens=view.draft_tokens,
            target=facts.target,
            draft_revision=facts.draft_revision,
            settings=settings,
        )


def _sglang_block_warnings(view: EngineView, facts: DraftFacts, block: int | None, location: str | None) -> None:
    """DFT072 when SGLang, launched without the flag, would use another block than trained."""
    trained = facts.trained_block_size
    if block is None or view.path is None:
        return
    drafts = block - 1 if view.path == "DFLASH" else block
    flag = view.rules.flag("draft-tokens" if view.path == "DFLASH" else "dspark-block-size")
    flag_name = flag.name if flag is not None else ""
    if location is None:
        passes = (
            f"the launch line below passes {flag_name} {trained if view.path == 'DFLASH' else facts.trained_max_tokens}"
            if trained is not None
            else f"pass {flag_name} with the trained value"
        )
        view.note(
            "DFT072",
            f"the config has no block_size it reads, so without {flag_name} it uses {block}: K = {drafts} drafts "
            "per step",
            f"{passes}; or write it into the config: `dflash-tools convert SRC -o OUT --block-size N`",
            keys=("block_size",),
            values={"block_size": block, "draft_tokens": drafts},
        )
    elif view.path == "DSPARK" and facts.trained_max_tokens is not None and drafts > facts.trained_max_tokens:
        view.note(
            "DFT072",
            f"DSPARK drafts block_size = {block} tokens per step unless {flag_name} is passed, but this bonus-layout "
            f"draft was trained for {facts.trained_max_tokens}",
            f"the launch line below passes {flag_name} {facts.trained_max_tokens}",
            keys=("block_size",),
        )


# --------------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------------


def _vllm_view(view: EngineView, facts: DraftFacts, plugin: str, settings: LaunchSettings | None) -> None:
    rules, config = view.rules, facts.config
    path = view.path
    assert path is not None
    sfa_rule = rules.key("sample_from_anchor", path, facts.family)
    sfa, sfa_location = lookup(config, sfa_rule)
    default = bool(sfa_rule.default) if sfa_rule is not None else False
    engine_sfa = bool(sfa) if sfa_location is not None and sfa is not None else default
    view.layout = layout_for(engine_sfa)
    algorithm_key = "dflash-domino" if facts.domino else (facts.algorithm or "")
    where = " or ".join(sfa_rule.locations) if sfa_rule is not None else "sample_from_anchor"
    reads = (
        f"it reads {sfa_location} = {sfa!r}"
        if sfa_location is not None
        else f"{where} is absent: {str(default).lower()}"
    )
    _layout_outcome(view, facts, algorithm_key, reads)
    if view.outcome is Outcome.SERVED_WITH_PLUGIN:
        _plugin_verdict(view, facts, plugin)
    else:
        view.plugin = "not needed"

    # K: explicit on the launch line (DFlash requires it); DSpark defaults it to block_size.
    k_max = facts.trained_max_tokens
    tokens = facts.requested_tokens or k_max
    if path == "dspark":
        value, location = lookup(config, rules.key("block_size", path, facts.family))
        block = as_int(value)
        if block is not None:
            view.block_size, view.block_size_source = block, source_name(location)
        tokens = tokens or block
    view.draft_tokens = tokens
    if path == "dflash" and tokens is not None:
        view.block_size = num_query_tokens(tokens, engine_sfa)
        view.block_size_source = "launch"

    _resolve_layer_ids(view, facts)
    ids_match = _compare_layer_ids(view, facts)

    mask, mask_location = lookup(config, rules.key("mask_token_id", path, facts.family))
    if mask_location is not None and mask is not None:
        view.mask_token_id, view.mask_token_id_source = as_int(mask), mask_location
    mask_match = _compare_mask(view, facts)

    _run_checks(view, facts)
    view.matches_training = _matches(view, facts, ids_match, mask_match)
    if view.serves_as_trained and tokens:
        needs_plugin = view.outcome is Outcome.SERVED_WITH_PLUGIN and view.plugin != "native"
        view.launch = vllm_launch(
            rules,
            draft=facts.draft,
            method=path,
            num_speculative_tokens=tokens,
            target=facts.target,
            draft_revision=facts.draft_revision,
            needs_plugin=needs_plugin,
            needs_v2_runner=rules.has_v1_runner and _needs_v2(facts, view),
            settings=settings,
        )
    elif view.serves_as_trained:
        view.note(
            "DFT075",
            "K must be given on the launch line and the trained K_max is unknown here",
            "fix the block size first, or pass -k K",
            keys=("num_speculative_tokens",),
        )


def _plugin_verdict(view: EngineView, facts: DraftFacts, plugin: str) -> None:
    """An anchor-first draft on a vLLM release the plugin patches."""
    rules = view.rules
    if plugin in ("active", "native"):
        view.plugin = plugin
        if plugin == "native":
            view.outcome = Outcome.SERVED
        return
    if plugin == "assumed" and rules.plugin_supported:
        view.plugin = "needed"
        view.note(
            "DFT076",
            "the draft is anchor-first: vLLM serves it as trained only with the dflash-tools plugin, installed with "
            "vLLM on the serving host (VLLM_PLUGINS unset, or listing dflash_tools)",
            f"{VLLM_INSTALL_HINT}; the launch line sets DFLASH_TOOLS_REQUIRE_PLUGIN=1 so that vLLM stops "
            "instead of serving it without the patch",
            keys=("sample_from_anchor",),
        )
        return
    view.plugin = "missing"
    reason = f"the draft is anchor-first and vLLM {rules.version} refuses it without the dflash-tools plugin" + (
        "" if plugin == "assumed" else f" ({plugin})"
    )
    view.fail(Outcome.REFUSED, reason)
    if view.installed:
        return  # the installed vLLM's own findings (DFT041, DFT051: `vllm_view`) already say it
    view.note(
        "DFT074",
        reason,
        "install dflash-tools with vLLM 0.33.0 or 0.34.0 (its plugin patches the runner)",
        keys=("sample_from_anchor",),
    )


def _needs_v2(facts: DraftFacts, view: EngineView) -> bool:
    """The V2 runner is the only one for DFlash2, DSpark, anchor-first drafts and mixed attention."""
    layer_types = facts.config.get("layer_types")
    mixed = isinstance(layer_types, list) and len(set(layer_types)) > 1
    return facts.algorithm in ("dflash2", "dspark") or view.layout is Layout.ANCHOR_FIRST or mixed


def _run_checks(view: EngineView, facts: DraftFacts) -> None:
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


def _matches(view: EngineView, facts: DraftFacts, ids_match: bool, mask_match: bool) -> bool:
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


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


def engine_view(
    rules: EngineRules,
    facts: DraftFacts,
    *,
    plugin: str = "assumed",
    installed: bool = False,
    settings: LaunchSettings | None = None,
) -> EngineView:
    """What `rules`' release does with the draft.

    `plugin` (vLLM): "assumed" for a release that is not installed here (the dflash-tools plugin
    is taken to be installed with it on the serving host); for the installed vLLM, "active",
    "native" (the release serves anchor-first drafts itself) or a sentence saying why the
    plugin cannot serve them. `settings`: what the serving plan adds to the launch line.
    """
    view = EngineView(rules=rules, installed=installed)
    if _format_and_route(view, facts):
        if rules.engine == "sglang":
            _sglang_view(view, facts, settings)
        else:
            _vllm_view(view, facts, plugin, settings)
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
    return [spec for spec in ENGINE_RULES if spec in wanted], installed


def plugin_state(capability: VllmCapability) -> str:
    """How the installed vLLM serves anchor-first drafts, in the words `engine_view` takes."""
    if capability.support == "native":
        return "native"
    if capability.support == "patchable" and capability.plugin_active:
        return "active"
    if capability.support == "patchable":
        return "the plugin is not loaded by this vLLM: " + "; ".join(capability.notes or ["disabled or not listed"])
    return capability.reason


def inspect_for_engines(
    loaded: LoadedCheckpoint,
    specs: list[str],
    *,
    installed_vllm: VllmCapability | None = None,
    target: TargetSpec | None = None,
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
            views[rules.spec] = engine_view(rules, facts, plugin=plugin_state(installed_vllm), installed=True)
    ordered = [spec for spec in ENGINE_RULES if spec in views]
    report.extra["engines"] = {json_key(views[spec].rules): views[spec].to_dict() for spec in ordered}
    extra = [finding for spec in ordered for finding in views[spec].findings]
    report.findings, omitted = cap_findings(finish_findings(loaded, [*report.findings, *extra]))
    for severity, count in omitted.items():
        report.omitted[severity] = report.omitted.get(severity, 0) + count
    return report
