"""Config features engines treat differently: recognized in a config, judged by each engine table.

A feature is a change to the draft's math that some configs declare and that each engine release
reads, ignores or refuses in its own way: an MoE MLP, embeddings or an LM head of the draft's own,
quantized weights, attention sinks, a value scale, sliding attention on every layer, partial
rotary embeddings, a tap on the target's last layer, NoPE layers, layer fusion. `features_used`
finds the ones a config declares (and where); each engine table's `FeatureRule`s say what its
release does (`dflash_tools.engine_rules`); `feature_findings` reports them (DFT035), and the
engine columns note what their release does (`serving.column_steps.feature_outcomes`).

Imports: `draft`, `engine_rules`, `findings`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dflash_tools.draft.config_paths import find_path
from dflash_tools.draft.description import DraftDescription
from dflash_tools.draft.dialect_spec import DialectSpec
from dflash_tools.engine_rules import ENGINE_RULES, EngineRules, FeatureRule, Outcome
from dflash_tools.findings import Finding, Severity, make_finding


def _is_true(value: Any) -> bool:
    return value is True


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Feature:
    """One feature: where configs state it (`paths`, as a z-lab or native config spells them), what
    value turns it on, and the keys that come with it (known to dflash-tools, not checked)."""

    name: str
    title: str
    paths: tuple[str, ...]
    on: Callable[[Any], bool]
    companions: tuple[str, ...] = ()


FEATURES: tuple[Feature, ...] = (
    Feature(
        "moe-ffn",
        "an MoE MLP in the draft's layers (MoE DFlash2)",
        ("draft_ffn_type", "dflash_config.draft_ffn_type"),
        lambda value: value == "moe",
        (
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "norm_topk_prob",
        ),
    ),
    Feature("own-embeddings", "input embeddings of the draft's own", ("has_embed_tokens",), _is_true),
    Feature("own-lm-head", "an LM head of the draft's own", ("has_own_lm_head", "has_lm_head"), _is_true),
    Feature(
        "quantized",
        "quantized weights",
        ("quantization_config",),
        lambda value: isinstance(value, dict) and bool(value),
    ),
    Feature(
        "attention-sink",
        "attention sinks (a learned bias per head)",
        ("dflash_config.attention_sink_bias", "add_swa_attention_sink_bias", "attention_sink_bias"),
        _is_true,
    ),
    Feature(
        "value-scale",
        "a scale on the attention values",
        ("dflash_config.attention_value_scale", "attention_value_scale"),
        lambda value: _is_number(value) and value != 1,
    ),
    Feature(
        "sliding-window-everywhere",
        "sliding-window attention on every layer (use_swa)",
        ("dflash_config.use_swa", "use_swa"),
        _is_true,
        ("swa_window_size",),
    ),
    Feature(
        "partial-rotary",
        "rotary embeddings on part of each head",
        ("partial_rotary_factor", "rope_parameters.partial_rotary_factor"),
        lambda value: _is_number(value) and 0 < value < 1,
    ),
    Feature(
        "last-layer-tap",
        "a tap on the target's last layer",
        ("target_layer_ids",),
        lambda value: False,  # recognized from the layer ids and the target's depth (`features_used`)
    ),
    Feature(
        "nope-layers",
        "layers without rotary embeddings (NoPE)",
        ("no_rope_layers",),
        lambda value: isinstance(value, list) and bool(value),
    ),
    Feature(
        "layer-fusion",
        "fused target-layer features (DFly, DFlare)",
        ("layer_fusion", "dflash_config.layer_fusion", "layer_fusion_weights"),
        lambda value: bool(value) and value is not None,
    ),
)
BY_NAME = {feature.name: feature for feature in FEATURES}


@dataclass(frozen=True)
class FeatureUse:
    """A feature a config declares: `stated` maps each location (as engines read it) to its value."""

    feature: Feature
    stated: dict[str, Any]

    def where(self) -> str:
        return ", ".join(f"{path} = {_show(value)}" for path, value in self.stated.items())


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "{...}"
    if isinstance(value, list) and len(value) > 6:
        return f"[{', '.join(map(str, value[:6]))}, ...]"
    return str(value).lower() if isinstance(value, bool) else repr(value) if isinstance(value, str) else str(value)


def features_used(
    config: dict[str, Any],
    spec: DialectSpec | None,
    *,
    layer_ids: list[int] | None = None,
    num_target_layers: int | None = None,
) -> list[FeatureUse]:
    """The features `config` declares. A decoder key the format nests (speculators'
    `transformer_layer_config`) is found there too and reported at the top level, where the
    engines that translate the format read it. The last-layer tap needs the draft's layer ids
    (z-lab convention) and the target's depth."""
    prefixes = tuple(p for p in (spec.keys.decoder if spec is not None else ("",)) if p) + ("",)
    found: list[FeatureUse] = []
    for feature in FEATURES:
        stated: dict[str, Any] = {}
        for path in feature.paths:
            for prefix in prefixes if not path.startswith("dflash_config.") else ("",):
                present, value = find_path(config, prefix + path)
                if present and feature.on(value):
                    stated.setdefault(path, value)
        if stated:
            found.append(FeatureUse(feature, stated))
    if layer_ids and num_target_layers and max(layer_ids) == num_target_layers - 1:
        found.append(FeatureUse(BY_NAME["last-layer-tap"], {"target_layer_ids": list(layer_ids)}))
    return found


def _nemotron_35_draft(config: dict[str, Any], algorithm: str | None) -> bool:
    """SGLang's test for the Nemotron-3.5 draft layout, our statement of it
    (sglang/srt/speculative/dflash_utils.py: is_nemotron_35_draft_config; the SGLang tier runs
    SGLang's own on the same configs)."""
    del algorithm
    listed = config.get("architectures")
    names: list[Any] = listed if isinstance(listed, list) else []
    if not {"DFlashDraftModel", "Qwen3DSparkModel"} & {name for name in names if isinstance(name, str)}:
        return False
    if not config.get("has_embed_tokens") or config.get("has_lm_head"):
        return False
    quantization = config.get("quantization_config") or {}
    if not isinstance(quantization, dict) or quantization.get("quant_algo") != "W4A16_NVFP4":
        return False
    nested = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    assert isinstance(nested, dict)
    ids = nested.get("target_layer_ids", config.get("target_layer_ids"))
    aux = config.get("eagle_aux_hidden_state_layer_ids")
    if not isinstance(ids, list) or not isinstance(aux, list) or not ids or len(ids) != len(aux):
        return False
    if not all(isinstance(i, int) and isinstance(a, int) and i + 1 == a for i, a in zip(ids, aux, strict=True)):
        return False
    return nested.get("sample_from_anchor", config.get("sample_from_anchor", True)) is False


# The conditions a `FeatureRule.requires` names, implemented once: (config, algorithm) -> holds.
CONDITIONS: dict[str, Callable[[dict[str, Any], str | None], bool]] = {
    "nemotron-3.5-draft": _nemotron_35_draft,
    "dflash2-draft": lambda config, algorithm: algorithm == "dflash2",
}


def outcome(
    rules: EngineRules, path: str | None, use: FeatureUse, holds: Callable[[str], bool]
) -> tuple[Outcome, FeatureRule | None]:
    """What `rules`' release does with the feature on `path`, and the rule that decides it: the
    first rule that reads a location the config states it at (and whose `requires` holds), else
    the first rule's `ignored` (None: the table has no rule for the feature, a gap its tests catch)."""
    candidates = [rule for rule in rules.features if rule.feature == use.feature.name and rule.path in (path, None)]
    if not candidates:
        return Outcome.UNSUPPORTED, None
    for rule in candidates:
        if set(use.stated) & set(rule.locations) and (not rule.requires or holds(rule.requires)):
            return rule.outcome, rule
    return candidates[0].ignored, candidates[0]


def _release_outcomes(
    use: FeatureUse, config: dict[str, Any], family: str, algorithm: str
) -> list[tuple[str, Outcome, FeatureRule | None]]:
    """What each release that reads the draft's format does with the feature."""
    out = []
    for spec, rules in ENGINE_RULES.items():
        reads = rules.reads_format(family)
        route = rules.route(algorithm)
        if reads is None or not reads.read or route is None:
            continue  # the release reads no such config at all (the engine columns say so)
        got, rule = outcome(rules, route.path, use, lambda name: CONDITIONS[name](config, algorithm))
        out.append((spec, got, rule))
    return out


def feature_findings(config: dict[str, Any], desc: DraftDescription) -> list[Finding]:
    """DFT035 for each feature the draft declares: what each engine release does with it."""
    findings = []
    uses = features_used(config, desc.spec, layer_ids=desc.target_layer_ids, num_target_layers=desc.num_target_layers)
    for use in uses:
        releases = _release_outcomes(use, config, desc.dialect.family, desc.algorithm.value)
        if not releases:
            continue
        parts = [
            f"{spec}: {got.value}"
            + (" (with the target's model)" if rule is not None and rule.target_dependent else "")
            for spec, got, rule in releases
        ]
        bad = [
            (spec, rule)
            for spec, got, rule in releases
            if got not in (Outcome.SERVED, Outcome.SERVED_WITH_PLUGIN) or (rule is not None and rule.target_dependent)
        ]
        hint = (
            "; ".join(f"{spec}: {rule.note}" for spec, rule in bad if rule is not None and rule.note)
            or "every release with a table serves it as declared"
        )
        findings.append(
            make_finding(
                "DFT035",
                f"{use.where()}: {use.feature.title}; " + "; ".join(parts),
                hint + " (`dflash-tools inspect --engine all` shows each release's column)",
                severity=Severity.WARNING if bad else Severity.INFO,
                keys=tuple(use.stated),
                values={"feature": use.feature.name, **{spec: got.value for spec, got, _ in releases}},
            )
        )
    return findings
