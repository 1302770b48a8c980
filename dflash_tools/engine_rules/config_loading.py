"""How an engine release turns a draft's config.json into the config object it builds the draft from.

The first steps of every engine's load path, before any DFlash-family code reads a key:

1. Config resolution. vLLM (`vllm/transformers_utils/config.py`, `HFConfigParser.parse`) takes the
   config's `model_type`; absent, "speculators" when the config has a `speculators_config`, else
   what `_ARCHITECTURE_TO_MODEL_TYPE` maps its first architecture to. "eagle" and "speculators"
   go to vLLM's own config classes (`_SPECULATIVE_DECODING_CONFIGS`; the speculators class
   translates the file, `configs/speculators/algos.py`, one function per
   `speculators_model_type`); a model_type in vLLM's `_CONFIG_REGISTRY` registers its class;
   then transformers' `AutoConfig.from_pretrained` picks the class by model_type and raises on
   an unknown or a missing one. SGLang (`sglang/srt/utils/hf_transformers/config.py`,
   `HfModelConfigParser.parse`) loads through `AutoConfig` too (its `_CONFIG_REGISTRY` classes
   registered with it, `common.py`) and re-reads a registry model_type with SGLang's class.
2. Defaults. The class picked fills every key the file leaves out (`FILL_KEYS`: those that change
   what the draft computes), sometimes computed from the file's other keys.

Which model_types a release's registries hold and which transformers it pins are release facts:
each release module's `ConfigLoading` names them, and the data comes from the released wheels,
generated into `engine_rules/generated/` by `python -m dflash_tools.engine_rules.generate_defaults`
(never written by hand; the tiers regenerate and compare). What transformers fills is read from
the generated table of the transformers version the release's tier pins, or from a transformers
installed here when it is one the release would run with (`serving.installed_transformers`).

Only the standard library; the JSON files load on first use.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflash_tools.engine_rules.transformers_probe import FILL_KEYS, stated

GENERATED = Path(__file__).resolve().parent / "generated"

# transformers' own files that the resolution follows (relative to the wheel's root).
AUTO_CONFIG_CITE = "transformers/models/auto/configuration_auto.py: AutoConfig.from_pretrained"

# A Qwen3-layer DFlash draft's model_type, as z-lab's drafts write it (the fix hints name it).
DECODER_MODEL_TYPE_EXAMPLE = "qwen3"


@dataclass(frozen=True)
class ConfigLoading:
    """How one release loads a draft's config (a release module's facts; the rest is generated).

    `transformers`: the range of transformers the release's wheel requires (its metadata's
    `Requires-Dist`); `table`: the transformers version the generated defaults come from (the
    one its tier pins, inside that range); `generated`: the file in `engine_rules/generated/`
    with the release's own registries, read from its wheel. `parser`: the engine function that
    loads the config. `speculators_detection`: vLLM's "speculators" model_type for a config with
    `speculators_config` and no model_type. `architecture_first`: SGLang, whose parser picks a
    class by architecture before it asks AutoConfig.
    """

    engine: str
    parser: str
    transformers: str
    table: str
    generated: str
    speculators_detection: bool = False
    architecture_first: bool = False

    @property
    def release_data(self) -> dict[str, Any]:
        return _load(self.generated)

    @property
    def transformers_data(self) -> dict[str, Any]:
        return transformers_table(self.table)

    @property
    def registry(self) -> dict[str, str]:
        """model_type -> the engine's own config class."""
        return dict(self.release_data.get("registry", {}))

    @property
    def speculative(self) -> dict[str, str]:
        """vLLM: model_types its speculative config classes load, and the class."""
        return dict(self.release_data.get("speculative", {}))

    @property
    def speculators_model_types(self) -> tuple[str, ...]:
        """vLLM: the `speculators_model_type`s its speculators translation knows."""
        return tuple(self.release_data.get("speculators_model_types", ()))

    @property
    def architecture_model_types(self) -> dict[str, str]:
        return dict(self.release_data.get("architecture_model_types", {}))

    @property
    def auto_config_extra(self) -> dict[str, str]:
        """SGLang: model_types it registers with AutoConfig only (no re-read with its class)."""
        return dict(self.release_data.get("auto_config_extra", {}))

    def cites(self) -> list[str]:
        return [self.parser, *self.release_data.get("cites", [])]


@functools.cache
def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GENERATED / name).read_text(encoding="utf-8"))
    return data


def transformers_table(version: str) -> dict[str, Any]:
    """The generated table of one transformers version (`transformers-VERSION.json`)."""
    return _load(f"transformers-{version}.json")


# --------------------------------------------------------------------------------------------
# The answer
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """Config resolution and defaults for one draft on one release.

    `error`: what the engine raises when it loads the config (None: it loads), with `fix_key`,
    the key to change, and `hint`. `config_class`: the class the config object is, named with
    its owner ("transformers' GptOssConfig", "vLLM's SpeculatorsConfig"). `filled`: each key of
    `FILL_KEYS` the file leaves out and the value the class fills in; `not_tabulated`: left-out
    keys whose value is not known here (an engine's own class, a fill computed from a key the
    file sets, or a class the table does not describe). `source`: "table" (the generated table
    of transformers `transformers`) or "installed" (asked of the transformers installed here).
    """

    model_type: str | None
    model_type_from: str
    config_class: str | None = None
    class_file: str | None = None
    error: str | None = None
    fix_key: str | None = None
    hint: str = ""
    filled: dict[str, Any] = field(default_factory=dict)
    not_tabulated: tuple[str, ...] = ()
    transformers: str | None = None
    source: str = "table"
    by_transformers: bool = False

    @property
    def loads(self) -> bool:
        return self.error is None


def _class_file(module: str) -> str:
    """transformers' file of a config class, from its module (`transformers.models.x.configuration_x`)."""
    return module.replace(".", "/") + ".py"


def resolve(
    config: dict[str, Any], loading: ConfigLoading, *, draft: str, installed: dict[str, Any] | None = None
) -> Resolution:
    """What `loading`'s release does with `config` at load time, step 1 and 2 (module docstring).

    `installed`: the answer of `transformers_probe.read` from a transformers installed here that
    the release would run with; it replaces the generated table for the transformers step.
    """
    model_type, source = _model_type(config, loading)
    engine = _ENGINE_NAMES.get(loading.engine, loading.engine)
    if loading.architecture_first:
        architecture = _first_architecture(config)
        mapped = loading.architecture_model_types.get(architecture or "")
        if mapped is not None:
            return _engine_class(loading, engine, mapped, "architectures")
    if model_type in loading.speculative:
        return _speculative(config, loading, engine, model_type, source)
    if model_type is not None and model_type in loading.registry and loading.engine == "vllm":
        # vLLM registers its class with AutoConfig before it asks AutoConfig.
        return _engine_class(loading, engine, model_type, source)
    return _auto_config(config, loading, engine, model_type, source, draft=draft, installed=installed)


_ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def _first_architecture(config: dict[str, Any]) -> str | None:
    architectures = config.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    return None


def _model_type(config: dict[str, Any], loading: ConfigLoading) -> tuple[str | None, str]:
    """The model_type the engine loads the config by, and where it comes from."""
    model_type = config.get("model_type")
    if model_type is not None:
        return (model_type if isinstance(model_type, str) else repr(model_type)), "model_type"
    if loading.speculators_detection and config.get("speculators_config") is not None:
        return "speculators", "speculators_config"
    if not loading.architecture_first:
        mapped = loading.architecture_model_types.get(_first_architecture(config) or "")
        if mapped is not None:
            return mapped, "architectures"
    return None, "absent"


def _engine_class(loading: ConfigLoading, engine: str, model_type: str, source: str) -> Resolution:
    name = loading.registry.get(model_type) or loading.speculative.get(model_type) or "?"
    return Resolution(model_type, source, config_class=f"{engine}'s {name}", not_tabulated=("*",))


def _speculative(
    config: dict[str, Any], loading: ConfigLoading, engine: str, model_type: str, source: str
) -> Resolution:
    """vLLM's speculative config classes: the speculators class translates the file itself (its
    `transformer_layer_config` becomes the config object); no transformers class fills a key."""
    name = loading.speculative[model_type]
    known = loading.speculators_model_types
    if model_type == "speculators" and config.get("speculators_model_type") not in known:
        value = config.get("speculators_model_type")
        return Resolution(
            model_type,
            source,
            config_class=f"{engine}'s {name}",
            error=f"ValueError: speculators_model_type {value!r} is not one it translates (expected one of: "
            f"{', '.join(known)})",
            fix_key="speculators_model_type",
            hint=f"write the speculators_model_type the draft is ({', '.join(known)})",
        )
    return Resolution(model_type, source, config_class=f"{engine}'s {name}")


def _auto_config(
    config: dict[str, Any],
    loading: ConfigLoading,
    engine: str,
    model_type: str | None,
    source: str,
    *,
    draft: str,
    installed: dict[str, Any] | None,
) -> Resolution:
    table = loading.transformers_data
    version = installed["transformers"] if installed is not None else table["transformers"]
    known = {**table["model_types"], **loading.auto_config_extra, **loading.registry}
    remote = isinstance(config.get("auto_map"), dict) and "AutoConfig" in config["auto_map"]
    decoder = (
        f"write the model_type of the draft's decoder layers, one transformers {version} knows (a Qwen3-layer "
        f'DFlash draft: "{DECODER_MODEL_TYPE_EXAMPLE}", as z-lab\'s drafts write it)'
    )
    if installed is not None and "error" in installed:
        return Resolution(
            model_type,
            source,
            error=str(installed["error"]).splitlines()[0],
            fix_key="model_type",
            hint=decoder,
            transformers=version,
            source="installed",
        )
    if remote and (model_type is None or model_type not in known):
        return Resolution(
            model_type,
            source,
            error="ValueError: auto_map.AutoConfig asks to run the repository's configuration code, which needs "
            "--trust-remote-code",
            fix_key="model_type",
            hint=f"launch with --trust-remote-code (it runs the draft repository's code), or {decoder}",
            transformers=version,
        )
    if model_type is None:
        return Resolution(
            None,
            source,
            error=f"ValueError: Unrecognized model in {draft}: it should have a `model_type` key in its config.json",
            fix_key="model_type",
            hint=decoder,
            transformers=version,
        )
    if model_type == "mistral" and "layer_types" in config:
        # transformers' heuristic in AutoConfig.from_pretrained: alternating attention is ministral's.
        model_type, source = "ministral", "model_type (mistral with layer_types)"
    if model_type not in known:
        return Resolution(
            model_type,
            source,
            error=f"ValueError: the checkpoint has model type `{model_type}` but transformers {version} does not "
            "recognize this architecture",
            fix_key="model_type",
            hint=decoder,
            transformers=version,
        )
    if model_type in loading.registry:
        return _engine_class(loading, engine, model_type, source)
    if model_type in loading.auto_config_extra:
        return Resolution(model_type, source, config_class=f"{engine}'s {known[model_type]}", not_tabulated=("*",))
    if installed is not None:
        filled = dict(installed.get("filled", {}))
        if "rope_parameters" in filled and isinstance(filled["rope_parameters"], dict):
            filled["rope_parameters"] = _with_theta(filled["rope_parameters"], installed.get("theta"))
        return Resolution(
            model_type,
            source,
            config_class=f"transformers' {installed.get('class', known[model_type])}",
            class_file=_class_file(installed["module"]) if "module" in installed else None,
            filled=filled,
            not_tabulated=tuple(installed.get("unreadable", ())),
            transformers=version,
            source="installed",
            by_transformers=True,
        )
    entry = table["classes"].get(model_type)
    if entry is None or "fills" not in entry:
        return Resolution(
            model_type,
            source,
            config_class=f"transformers' {known[model_type]}",
            not_tabulated=("*",),
            transformers=version,
            by_transformers=True,
        )
    filled, unknown = predict_fills(entry, config)
    return Resolution(
        model_type,
        source,
        config_class=f"transformers' {entry['class']}",
        class_file=_class_file(entry["module"]),
        filled=filled,
        not_tabulated=unknown,
        transformers=version,
        by_transformers=True,
    )


def _with_theta(rope: dict[str, Any], theta: Any) -> dict[str, Any]:
    return rope if theta is None else {**rope, "rope_theta": theta}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def predict_fills(entry: dict[str, Any], config: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(the values a class fills into `config`, the left-out keys it cannot predict) from the
    class's generated entry (`transformers_probe.describe_class` says what each form means)."""
    filled: dict[str, Any] = {}
    unknown: list[str] = []
    inputs = entry.get("inputs", {})
    for key in FILL_KEYS:
        if stated(config, key):
            continue
        rule = entry["fills"].get(key, {"computed": True})
        if rule.get("absent"):
            continue
        depends = [name for name, default in inputs.get(key, {}).items() if name in config and config[name] != default]
        value = _fill(key, rule, config) if not depends else _UNKNOWN
        if value is _UNKNOWN:
            unknown.append(key)
        else:
            filled[key] = value
    return filled, tuple(unknown)


_UNKNOWN = object()


def _fill(key: str, rule: dict[str, Any], config: dict[str, Any]) -> Any:
    if "value" in rule:
        value = rule["value"]
        if key == "rope_parameters" and isinstance(value, dict):
            value = {**value, **{name: config[name] for name in rule.get("merges", ()) if name in config}}
            theta_key = rule.get("theta_from")
            if theta_key is not None and theta_key in config:
                return _with_theta(value, config[theta_key])
            if "rope_theta" in config:
                return _UNKNOWN  # a file's rope_theta the class does not take as it is
            return _with_theta(value, rule.get("theta"))
        return value
    if "period" in rule:
        layers = _int(config.get("num_hidden_layers"))
        pattern = rule["period"]
        return [pattern[i % len(pattern)] for i in range(layers)] if layers is not None and layers >= 0 else _UNKNOWN
    if rule.get("derived") == "hidden_size // num_attention_heads":
        hidden, heads = _int(config.get("hidden_size")), _int(config.get("num_attention_heads"))
        return hidden // heads if hidden is not None and heads else _UNKNOWN
    if rule.get("derived") == "num_attention_heads":
        heads = _int(config.get("num_attention_heads"))
        return heads if heads is not None else _UNKNOWN
    return _UNKNOWN
