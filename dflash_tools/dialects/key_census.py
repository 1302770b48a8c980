"""Keys dflash-tools does not know: named (DFT009), never passed over in silence.

The rule (docs/findings.md, "DFT009: keys dflash-tools does not know"). A key of the config's top level,
or of the objects its format keeps the decoder and algorithm keys in (`dflash_config`,
`transformer_layer_config`, `speculative_config`), is known when

1. the config-key table documents it (`draft.config_keys`),
2. an engine table reads it or checks it (`engine_rules`: key rules, feature rules, checks),
3. a feature names it (`dialects.features`), or a dialect spec names it (format keys, where the
   block size and the layout are declared), or
4. it is on the list below of keys that do not change what the draft computes: provenance,
   training-only settings, token ids the engines take from the target, the format's containers.

A key set to null declares nothing and is not reported. Every other key may change the draft's
math in a way no check here covers, and no engine without a rule for it reads it: inspect names
it, and the draft is served without it wherever an engine does not read it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from dflash_tools.dialects import features as features_module
from dflash_tools.draft.config_keys import KEYS
from dflash_tools.draft.dialect_spec import LAYOUT_SPELLINGS, DialectSpec
from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.findings import Finding, make_finding

# Keys that do not change the draft's outputs (4. above), or that hold other keys.
UNCHANGING = frozenset(
    {
        # provenance and bookkeeping
        "_name_or_path",
        "transformers_version",
        "speculators_version",
        "open_spec_config_version",
        "auto_map",
        "dflash_tools_restore",  # convert's record of the source config (convert/translate.py: RESTORE_KEY)
        "torch_dtype",
        "dtype",
        "target_model_type",
        "target_text_model_type",
        "use_cache",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        # training-only settings
        "initializer_range",
        "num_anchors",
        "max_anchors",
        "loss_decay_gamma",
        "train_embed_tokens",
        "training_framework",
        "training_framework_version",
        # token ids the engines take from the target's tokenizer
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        # containers of other keys (walked, or checked by their format's reader)
        "dflash_config",
        "transformer_layer_config",
        "speculative_config",
        "speculators_config",
        # counts that restate a list the draft also declares (num_aux_layers = len(aux ids))
        "num_aux_layers",
        "verifier",
        "target_layer_start_idx",
        "method",
    }
)
# Keys engines read that the tables state as part of another rule: dflash_config.causal and
# is_neox_style (vllm/model_executor/models/qwen3_dflash.py), logit_scale and use_aux_hidden_state
# (the same file), dspark_bonus_anchor and dspark_draft_topk (vllm/config/speculative.py).
ENGINE_READ = frozenset(
    {
        "causal",
        "is_neox_style",
        "rope_is_neox_style",
        "logit_scale",
        "use_aux_hidden_state",
        "dspark_bonus_anchor",
        "dspark_draft_topk",
        "dspark_config",
    }
)


# Keys that change nothing at the value given (Llama-style configs carry them): another value is named.
NEUTRAL = {"mlp_bias": False, "pretraining_tp": 1}


def _leaf(path: str) -> str:
    return path.rpartition(".")[2].removesuffix("[*]")


@cache
def known_keys(spec: DialectSpec) -> frozenset[str]:
    """Every key name the census accepts for configs of `spec`'s format."""
    names: set[str] = set(UNCHANGING) | set(ENGINE_READ) | set(LAYOUT_SPELLINGS)
    for entry in KEYS:
        names.add(entry.key.partition(".")[0])
        names.add(_leaf(entry.key))
    for rules in ENGINE_RULES.values():
        for rule in rules.keys:
            names.add(rule.key)
            names.update(_leaf(location) for location in rule.locations)
            names.update(location.partition(".")[0] for location in rule.locations)
        for feature_rule in rules.features:
            names.update(_leaf(location) for location in feature_rule.locations)
        for check in rules.checks:
            names.update(_leaf(key) for key in check.keys)
    for feature in features_module.FEATURES:
        names.update(_leaf(path) for path in feature.paths)
        names.update(path.partition(".")[0] for path in feature.paths)
        names.update(feature.companions)
    names.update(spec.format_keys)
    names.update(_leaf(path) for path in spec.keys.block_size)
    if spec.keys.speculative_tokens:
        names.add(spec.keys.speculative_tokens.partition(".")[0])
    return frozenset(names)


def unknown_keys(config: dict[str, Any], spec: DialectSpec) -> list[str]:
    """Dotted paths of the keys the census does not know, in file order."""
    known = known_keys(spec)
    containers = [""] + [prefix for prefix in (*spec.keys.decoder, *spec.keys.algorithm) if prefix]
    found: list[str] = []
    for prefix in dict.fromkeys(containers):
        node = config.get(prefix.rstrip(".")) if prefix else config
        if not isinstance(node, dict):
            continue
        found.extend(
            f"{prefix}{key}"
            for key, value in node.items()
            if key not in known and value is not None and not (key in NEUTRAL and value == NEUTRAL[key])
        )
    return found


def unknown_key_findings(config: dict[str, Any], spec: DialectSpec) -> list[Finding]:
    """DFT009 naming the keys no table, feature or format explains."""
    unknown = unknown_keys(config, spec)
    if not unknown:
        return []
    shown = ", ".join(unknown[:12]) + (f" and {len(unknown) - 12} more" if len(unknown) > 12 else "")
    return [
        make_finding(
            "DFT009",
            f"keys dflash-tools does not know: {shown}; if they change the draft's math, no check here covers "
            "them, and an engine that does not read them serves the draft without them",
            "look them up in the code that trained or serves the draft; docs/config-keys.md lists what dflash-tools "
            "knows",
            keys=tuple(unknown),
        )
    ]
