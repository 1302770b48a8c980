"""vLLM's column of `inspect --engine` (and of `plan`): what one vLLM release does with the draft.

The layout, the method, the runner and its environment come from `vllm_runtime`, the answer
smoke-test uses too; whether the dflash-tools plugin serves an anchor-first draft comes from the
release's table and, for the vLLM installed here, from its files (`plugin_state`). The steps
every engine shares are `column_steps`.
"""

from __future__ import annotations

from dflash_tools.draft.geometry import max_speculative_tokens, num_query_tokens
from dflash_tools.engine_rules import Outcome, vllm_plugin_releases
from dflash_tools.errors import VLLM_INSTALL_HINT
from dflash_tools.serving.column_steps import (
    compare_layer_ids,
    compare_mask,
    feature_outcomes,
    layout_outcome,
    matches_training,
    record_layout_read,
    resolve_layer_ids,
    run_checks,
)
from dflash_tools.serving.config_reads import as_int, lookup, source_name
from dflash_tools.serving.engine_model import DraftFacts, EngineView, layout_for
from dflash_tools.serving.launch import LaunchSettings, vllm_launch
from dflash_tools.serving.plugin_state import PluginState, engine_column_word
from dflash_tools.serving.vllm_capability import VllmCapability
from dflash_tools.serving.vllm_runtime import layout_read, vllm_runtime


def vllm_column(
    view: EngineView, facts: DraftFacts, installed_vllm: VllmCapability | None, settings: LaunchSettings | None
) -> None:
    """Fill in `view` (format and route already checked) for a vLLM release; `installed_vllm`:
    the vLLM installed here when the view is of its release, else None (a release elsewhere)."""
    rules, config = view.rules, facts.config
    path = view.path
    assert path is not None
    read = layout_read(rules, path, facts)
    engine_sfa = read.sample_from_anchor
    view.layout = layout_for(engine_sfa)
    algorithm_key = "dflash-domino" if facts.domino else (facts.algorithm or "")
    where = " or ".join(read.rule.locations) if read.rule is not None else "sample_from_anchor"
    reads = (
        f"it reads {read.location} = {read.value!r}"
        if read.location is not None
        else f"{where} is absent: {str(read.default).lower()}"
    )
    reads += record_layout_read(view, facts, read.rule.locations if read.rule is not None else (), read.location)
    layout_outcome(view, facts, algorithm_key, reads)
    _plugin_verdict(view, installed_vllm)

    # K: explicit on the launch line (DFlash requires it); DSpark defaults it to block_size.
    tokens = facts.requested_tokens or facts.trained_max_tokens
    if path == "dspark":
        block_rule = rules.key("block_size", path, facts.family)
        value, location = lookup(config, block_rule)
        block = as_int(value)
        if block is not None:
            view.block_size, view.block_size_source = block, source_name(location)
            _dspark_default_k(view, block, engine_sfa, tokens or block, block_rule.cite if block_rule else "")
        tokens = tokens or block
    view.draft_tokens = tokens
    if path == "dflash" and tokens is not None:
        view.block_size = num_query_tokens(tokens, engine_sfa)
        view.block_size_source = "launch"

    resolve_layer_ids(view, facts)
    ids_match = compare_layer_ids(view, facts)

    mask, mask_location = lookup(config, rules.key("mask_token_id", path, facts.family))
    if mask_location is not None and mask is not None:
        view.mask_token_id, view.mask_token_id_source = as_int(mask), mask_location
    mask_match = compare_mask(view, facts)

    run_checks(view, facts)
    feature_outcomes(view, facts)
    view.matches_training = matches_training(view, facts, ids_match, mask_match)
    if view.serves_as_trained and tokens:
        runtime = vllm_runtime(rules, facts, engine_sfa)
        view.launch = vllm_launch(
            rules,
            draft=facts.draft,
            method=runtime.method,
            num_speculative_tokens=tokens,
            target=facts.target,
            draft_revision=facts.draft_revision,
            needs_plugin=view.outcome is Outcome.SERVED_WITH_PLUGIN and view.plugin != "native",
            runner_environment=runtime.environment,
            settings=settings,
        )
    elif view.serves_as_trained:
        view.note(
            "DFT075",
            "K must be given on the launch line and the trained K_max is unknown here",
            "fix the block size first, or pass -k K",
            keys=("num_speculative_tokens",),
        )


def _dspark_default_k(view: EngineView, block: int, engine_sfa: bool, launch_tokens: int, cite: str) -> None:
    """DFT072: vLLM drafts block_size tokens per step for DSpark when no num_speculative_tokens
    is given (`cite`), whatever the layout; for a draft it reads as bonus-anchor that is one past
    K_max (block_size - 1), one query position the draft was never trained on. The corpus's
    speculators DSpark files show it run by vLLM itself (tests/corpus/engine_outcomes.json)."""
    k_max = max_speculative_tokens(block, engine_sfa)
    if block <= k_max:
        return
    view.note(
        "DFT072",
        f"without num_speculative_tokens it drafts block_size = {block} tokens per step ({cite}), one past "
        f"the {k_max} of this bonus-anchor draft: {num_query_tokens(block, engine_sfa)} query positions instead "
        f"of {num_query_tokens(k_max, engine_sfa)}",
        f"the launch line below passes num_speculative_tokens {launch_tokens}; keep it in a launch line of your own",
        keys=("block_size", "num_speculative_tokens"),
        values={
            "block_size": block,
            "default_num_speculative_tokens": block,
            "default_num_query_tokens": num_query_tokens(block, engine_sfa),
        },
    )


def _plugin_verdict(view: EngineView, installed_vllm: VllmCapability | None) -> None:
    """`view.plugin`, and what it means for an anchor-first draft on this release."""
    rules = view.rules
    state = installed_vllm.plugin_state if installed_vllm is not None else PluginState.ASSUMED
    needed = view.outcome is Outcome.SERVED_WITH_PLUGIN
    view.plugin = engine_column_word(state, needed=needed, plugin_supported=rules.plugin_supported)
    if view.plugin == "native":
        view.outcome = Outcome.SERVED
    if view.plugin == "needed":
        view.note(
            "DFT076",
            f"vLLM {rules.version} serves this anchor-first draft as trained only through the dflash-tools plugin, "
            "installed with vLLM on the serving host and not left out of VLLM_PLUGINS",
            f"{VLLM_INSTALL_HINT}; the launch line's DFLASH_TOOLS_REQUIRE_PLUGIN=1 stops vLLM if the plugin is "
            "missing, instead of serving the draft without it",
            keys=("sample_from_anchor",),
        )
    if view.plugin != "missing":
        return
    why = f" ({installed_vllm.plugin_reason})" if installed_vllm is not None else ""
    reason = f"the draft is anchor-first and vLLM {rules.version} refuses it without the dflash-tools plugin{why}"
    view.fail(Outcome.REFUSED, reason)
    if view.installed:
        return  # the installed vLLM's own findings (DFT041, DFT051: `vllm_view`) already say it
    view.note(
        "DFT074",
        reason,
        f"install dflash-tools with {vllm_plugin_releases('or')} (its plugin patches the runner)",
        keys=("sample_from_anchor",),
    )
