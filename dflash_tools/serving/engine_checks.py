"""The load-time rules of the engine tables (`Check.name`), one function each.

Each function takes an engine view (what the release reads) and the draft's facts and returns
a sentence saying what breaks the rule, or None. `engine_view` runs the ones its release's table
names; a test keeps the names in the tables and here the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dflash_tools.dialects import spec_for_family
from dflash_tools.draft.target import text_value
from dflash_tools.serving.config_reads import as_int, lookup, num_hidden_layers
from dflash_tools.serving.engine_model import DraftFacts, EngineView

Checker = Callable[[EngineView, DraftFacts], "str | None"]


def _nested(config: dict[str, Any], key: str) -> Any:
    inner = config.get("dflash_config")
    return inner.get(key) if isinstance(inner, dict) else None


def _check_layer_ids_in_range(view: EngineView, facts: DraftFacts) -> str | None:
    ids, layers = view.target_layer_ids, view.num_target_layers
    if ids is None:
        return None
    if not ids:
        return "target_layer_ids is empty"
    if min(ids) < 0:
        return f"target layer id {min(ids)} is below 0"
    if layers is not None and max(ids) >= layers:
        return f"target layer id {max(ids)} is not a layer of a {layers}-layer target"
    return None


def _check_derivable(view: EngineView, facts: DraftFacts) -> str | None:
    derive, layers = view.rules.derive_target_layer_ids, view.num_target_layers
    draft_layers = facts.num_draft_layers or as_int(num_hidden_layers(facts.config))
    if view.target_layer_ids_source != "derived" or derive is None or layers is None or draft_layers is None:
        return None
    try:
        derive(layers, draft_layers)
    except ValueError as exc:
        return f"the config names no target layers and they cannot be derived: {exc}"
    return None


def _check_mask_valid(view: EngineView, facts: DraftFacts) -> str | None:
    mask, location = lookup(facts.config, view.rules.key("mask_token_id", view.path or "", facts.family))
    if location is None or mask is None:
        return None
    if isinstance(mask, bool) or not isinstance(mask, int) or mask < 0:
        return f"{location} is {mask!r}, not a non-negative integer"
    if facts.target_vocab_size is not None and mask >= facts.target_vocab_size:
        return f"{location} = {mask} is outside the target's vocabulary of {facts.target_vocab_size}"
    return None


def _check_mask_required(view: EngineView, facts: DraftFacts) -> str | None:
    rule = view.rules.key("mask_token_id", view.path or "", facts.family)
    mask, location = lookup(facts.config, rule)
    if location is None or mask is None:
        where = ", ".join(rule.locations) if rule is not None else "mask_token_id"
        return f"no mask token id: none of {where} is set"
    return _check_mask_valid(view, facts)


def _pair(config: dict[str, Any], first: str, second: str) -> str | None:
    a, b = _nested(config, first) or 0, _nested(config, second) or 0
    if as_int(a) is None or as_int(b) is None:
        return f"dflash_config.{first} = {a!r} and dflash_config.{second} = {b!r} must be integers"
    if bool(as_int(a)) != bool(as_int(b)):
        return f"dflash_config.{first} = {a!r} and dflash_config.{second} = {b!r}: one is set without the other"
    return None


def _check_conv_pair(view: EngineView, facts: DraftFacts) -> str | None:
    return _pair(facts.config, "conv_kernel_size", "conv_group_size")


def _check_selector_pair(view: EngineView, facts: DraftFacts) -> str | None:
    return _pair(facts.config, "selector_rank", "selector_top_k")


def _is_dflash2(view: EngineView, facts: DraftFacts) -> bool:
    route = view.rules.route("dflash2")
    return route is not None and facts.architecture in route.architectures


def _check_dflash2_selector(view: EngineView, facts: DraftFacts) -> str | None:
    if _is_dflash2(view, facts) and not as_int(_nested(facts.config, "selector_rank")):
        top = " (it is at the top level, which is not read)" if "selector_rank" in facts.config else ""
        return f"a DFlash2 draft without dflash_config.selector_rank{top}"
    return None


def _check_dflash2_conv(view: EngineView, facts: DraftFacts) -> str | None:
    if _is_dflash2(view, facts) and not as_int(_nested(facts.config, "conv_kernel_size")):
        return (
            "dflash_config.conv_kernel_size is not set: the layers are built without their convolutions and the "
            "checkpoint's convolution weights are dropped without an error"
        )
    return None


def _check_output_multiplier(view: EngineView, facts: DraftFacts) -> str | None:
    value = _nested(facts.config, "output_multiplier")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return f"dflash_config.output_multiplier = {value!r} is not above 0"
    return None


def _check_sliding_window(view: EngineView, facts: DraftFacts) -> str | None:
    config = facts.config
    layer_types = text_value(config, "layer_types")[0]
    if not isinstance(layer_types, list) or "sliding_attention" not in layer_types:
        return None
    rule = view.rules.key("sliding_window", view.path or "", facts.family)
    window, location = lookup(config, rule)
    if location is None or window is None:
        where = " or ".join(rule.locations) if rule is not None else "sliding_window"
        return f"layer_types has sliding_attention layers but {where} is not set"
    return None


def _check_domino(view: EngineView, facts: DraftFacts) -> str | None:
    if not facts.domino:
        return None
    config = facts.config

    def value(key: str) -> Any:
        inner = _nested(config, key)
        return inner if inner is not None else config.get(key)

    if not isinstance(value("shift_label"), bool):
        return f"a Domino draft with shift_label = {value('shift_label')!r} (true or false is required)"
    if as_int(value("pure_draft_prefix_len")) != 1:
        return f"a Domino draft with pure_draft_prefix_len = {value('pure_draft_prefix_len')!r} (1 is required)"
    for key in ("gru_hidden_dim", "emb_dim"):
        if as_int(value(key)) is None:
            return f"a Domino draft without {key}"
    if view.block_size is not None and view.block_size <= 1:
        return f"a Domino draft with block size {view.block_size} (above 1 is required)"
    return None


def _markov_rank(view: EngineView, facts: DraftFacts) -> int:
    value, _ = lookup(facts.config, view.rules.key("markov_rank", view.path or "", facts.family))
    return as_int(value) or 0


def _check_markov_rank(view: EngineView, facts: DraftFacts) -> str | None:
    if _markov_rank(view, facts) > 0:
        return None
    deepspec = " (DeepSpec publishes DFlash drafts this way)" if facts.layout_evidence else ""
    return f"markov_rank is 0 or absent: a draft without a Markov head{deepspec}"


def _check_markov_head_type(view: EngineView, facts: DraftFacts) -> str | None:
    if _markov_rank(view, facts) <= 0:
        return None
    config = facts.config
    head, _ = lookup(config, view.rules.key("markov_head_type", view.path or "", facts.family))
    # parse_dspark_draft_config asks for a head type only where no dspark_-prefixed key is set.
    prefixed = ("dspark_block_size", "dspark_markov_rank", "dspark_noise_token_id", "dspark_target_layer_ids")
    if head is None and all(config.get(key) is None for key in prefixed):
        return "markov_head_type is not set"
    if head is not None and str(head).lower() not in ("vanilla", "gated", "rnn"):
        return f"markov_head_type {head!r} is not one of vanilla, gated, rnn"
    return None


def _dflash2_value(view: EngineView, facts: DraftFacts, key: str) -> tuple[Any, str | None]:
    return lookup(facts.config, view.rules.key(key, view.path or "", facts.family))


def _check_dflash2_keys(view: EngineView, facts: DraftFacts) -> str | None:
    if facts.algorithm != "dflash2":
        return None
    missing = [
        key
        for key in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
        if _dflash2_value(view, facts, key)[1] is None
    ]
    if missing:
        spec = spec_for_family(facts.family or "")
        scope = spec.keys.algorithm[0] if spec is not None and spec.keys.algorithm else ""
        where = scope.rstrip(".") or "the top level"
        return f"a DFlash2 draft without {', '.join(missing)} in {where}"
    return None


def _check_conv_group(view: EngineView, facts: DraftFacts) -> str | None:
    if facts.algorithm != "dflash2" or facts.hidden_size is None:
        return None
    group = as_int(_dflash2_value(view, facts, "conv_group_size")[0])
    if group and facts.hidden_size % group:
        return f"conv_group_size {group} does not divide hidden_size {facts.hidden_size}"
    return None


def _check_dflash2_beam(view: EngineView, facts: DraftFacts) -> str | None:
    if facts.architecture != "DFlash2BeamDraftModel":
        return None
    layer_types = text_value(facts.config, "layer_types")[0]
    if not isinstance(layer_types, list) or any(kind != "sliding_attention" for kind in layer_types):
        return f"a Beam draft with layer_types {layer_types!r}: every layer must be sliding_attention"
    if facts.config.get("is_causal") is not False:
        return "a Beam draft without is_causal false"
    softcap = _nested(facts.config, "final_logit_softcapping")
    if isinstance(softcap, bool) or not isinstance(softcap, int | float):
        return f"a Beam draft with dflash_config.final_logit_softcapping = {softcap!r} (a number is required)"
    return None


CHECKERS: dict[str, Checker] = {
    "layer-ids-in-range": _check_layer_ids_in_range,
    "derivable-layer-ids": _check_derivable,
    "mask-token-id-valid": _check_mask_valid,
    "mask-token-id-required": _check_mask_required,
    "conv-pair": _check_conv_pair,
    "selector-pair": _check_selector_pair,
    "dflash2-selector": _check_dflash2_selector,
    "dflash2-conv": _check_dflash2_conv,
    "output-multiplier-positive": _check_output_multiplier,
    "sliding-window": _check_sliding_window,
    "domino-keys": _check_domino,
    "markov-rank": _check_markov_rank,
    "markov-head-type": _check_markov_head_type,
    "dflash2-keys": _check_dflash2_keys,
    "conv-group-divides-hidden": _check_conv_group,
    "dflash2-beam": _check_dflash2_beam,
}
