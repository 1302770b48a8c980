"""What the dialect modules share; it imports none of them.

Typed access to untrusted config dicts (wrong types become findings, never exceptions), and the
pieces two dialects both need: the DFlash2 conv/selector keys (z-lab's `dflash_config` and
speculators' top level spell them alike), speculators' `sliding_window_non_causal` default (the
z-lab writer translates from it), the order-keeping merge both writers use, and
`layout_values` / `block_size_values`, which read the block sizes and layout declarations at the
places a dialect's spec lists (through `draft.config_paths`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

from dflash_tools.draft.config_paths import set_path, values_at
from dflash_tools.draft.description import Algorithm, DecoderSpec, DFlash2Spec, DraftDescription
from dflash_tools.draft.dialect_spec import DialectSpec
from dflash_tools.findings import Finding, make_finding

_MISSING = object()

# Expected tensors are enumerated layer by layer: a hostile `num_hidden_layers` of 10**9 would
# make inspect build billions of names. No draft (or target) comes near this many layers.
MAX_DECODER_LAYERS = 1024


def copy_config(value: Any) -> Any:
    """A copy of a parsed JSON value (dicts, lists, scalars), to edit without touching the original.

    What `copy.deepcopy` gives for JSON values, at a fifth of its cost on long lists: only dicts
    and lists are copied again (deepcopy calls itself and keeps a memo entry for every item: a
    million layer ids took 0.2-0.33 s, as much as the rest of convert's plan;
    bench/bench_convert_lists.py).
    """
    if isinstance(value, dict):
        return {key: copy_config(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_config(item) if type(item) is dict or type(item) is list else item for item in value]
    return value


class ConfigInvalid(Exception):
    """The config lacks what is needed to describe the draft at all (e.g. hidden_size)."""

    def __init__(self, findings: list[Finding]) -> None:
        super().__init__("; ".join(f.message for f in findings))
        self.findings = findings


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    if isinstance(value, int):
        # math.isfinite(10**400) raises OverflowError: compare exactly instead.
        return abs(value) <= sys.float_info.max
    return math.isfinite(value)


@dataclass
class ConfigView:
    """A dict plus the dotted path it sits at, collecting DFT006 findings as values are read."""

    data: dict[str, Any]
    prefix: str = ""
    findings: list[Finding] = field(default_factory=list)

    def path(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def sub(self, key: str) -> ConfigView | None:
        """A nested object, or None when absent; a non-object value is a finding."""
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            return None
        if not isinstance(value, dict):
            self._bad(key, value, "an object")
            return None
        return ConfigView(value, f"{self.path(key)}.", self.findings)

    def _bad(self, key: str, value: Any, expected: str) -> None:
        self.findings.append(
            make_finding(
                "DFT006",
                f"{self.path(key)} is {_short(value)}, expected {expected}",
                f"fix {self.path(key)} in config.json",
                keys=(self.path(key),),
                values={self.path(key): _jsonable(value)},
            )
        )

    def get_int(
        self, key: str, default: int | None = None, *, minimum: int | None = 1, maximum: int | None = None
    ) -> int | None:
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if not is_int(value) or (minimum is not None and value < minimum):
            self._bad(key, value, "an integer" + (f" >= {minimum}" if minimum is not None else ""))
            return default
        if maximum is not None and value > maximum:
            self._bad(key, value, f"an integer <= {maximum}")
            return default
        return int(value)

    def get_number(self, key: str, default: float | None = None) -> float | None:
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if not is_number(value):
            self._bad(key, value, "a finite number")
            return default
        return float(value)

    def get_bool(self, key: str, default: bool | None = None) -> bool | None:
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if not isinstance(value, bool):
            self._bad(key, value, "true or false")
            return default
        return value

    def get_str(self, key: str, default: str | None = None) -> str | None:
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if not isinstance(value, str):
            self._bad(key, value, "a string")
            return default
        return value

    def get_int_list(self, key: str, *, minimum: int | None = 0) -> list[int] | None:
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            return None
        # Checked through the entries' types and the minimum, at C speed: a list may hold a million ids.
        if (
            not isinstance(value, list)
            or not set(map(type, value)) <= {int}
            or (minimum is not None and value and min(value) < minimum)
        ):
            self._bad(key, value, "a list of integers" + (f" >= {minimum}" if minimum is not None else ""))
            return None
        return list(value)

    def get_str_list(self, key: str) -> list[str] | None:
        value = self.data.get(key, _MISSING)
        if value is _MISSING or value is None:
            return None
        if not isinstance(value, list) or not set(map(type, value)) <= {str}:
            self._bad(key, value, "a list of strings")
            return None
        return list(value)

    def require(self, key: str, got: Any) -> None:
        if got is None:
            self.findings.append(
                make_finding(
                    "DFT006",
                    f"{self.path(key)} is missing or invalid",
                    f"set {self.path(key)} in config.json",
                    keys=(self.path(key),),
                )
            )


def _short(value: Any) -> str:
    if isinstance(value, list) and len(value) > 8:
        text = repr(value[:8])[:-1] + f", ... ({len(value):,} entries)]"
        return text if len(text) <= 60 else text[:57] + "..."
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return _short(value)


def read_decoder(view: ConfigView, fallback: ConfigView | None = None) -> DecoderSpec:
    """Qwen3-style decoder fields from `view` (falling back to `fallback` key by key)."""

    def pick(key: str) -> ConfigView:
        if view.has(key) or fallback is None or not fallback.has(key):
            return view
        return fallback

    hidden = pick("hidden_size").get_int("hidden_size")
    layers = pick("num_hidden_layers").get_int("num_hidden_layers", maximum=MAX_DECODER_LAYERS)
    heads = pick("num_attention_heads").get_int("num_attention_heads")
    intermediate = pick("intermediate_size").get_int("intermediate_size")
    vocab = pick("vocab_size").get_int("vocab_size")
    for key, got in (
        ("hidden_size", hidden),
        ("num_hidden_layers", layers),
        ("num_attention_heads", heads),
        ("intermediate_size", intermediate),
        ("vocab_size", vocab),
    ):
        pick(key).require(key, got)
    if None in (hidden, layers, heads, intermediate, vocab):
        raise ConfigInvalid([f for f in view.findings if f.code == "DFT006"])
    assert hidden is not None and layers is not None and heads is not None
    assert intermediate is not None and vocab is not None
    kv_heads = pick("num_key_value_heads").get_int("num_key_value_heads", heads)
    head_dim = pick("head_dim").get_int("head_dim", hidden // heads if hidden % heads == 0 else None)
    if head_dim is None:
        view.require("head_dim", None)
        raise ConfigInvalid([f for f in view.findings if f.code == "DFT006"])
    layer_types = pick("layer_types").get_str_list("layer_types")
    rope: dict[str, Any] = {}
    rope_view = pick("rope_parameters").sub("rope_parameters")
    if rope_view is not None:
        rope = dict(rope_view.data)
    for legacy in ("rope_theta", "rope_scaling"):
        source = pick(legacy)
        if source.has(legacy) and legacy not in rope and source.raw(legacy) is not None:
            rope[legacy] = source.raw(legacy)
    return DecoderSpec(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        attention_bias=bool(pick("attention_bias").get_bool("attention_bias", False)),
        layer_types=layer_types,
        sliding_window=pick("sliding_window").get_int("sliding_window"),
        rope=rope,
        rms_norm_eps=pick("rms_norm_eps").get_number("rms_norm_eps"),
        model_type=pick("model_type").get_str("model_type"),
    )


def architectures(config: dict[str, Any]) -> list[str]:
    value = config.get("architectures")
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    if isinstance(value, str):
        return [value]
    return []


# Defaults of the z-lab DFlash2 code for keys a config may omit.
DFLASH2_DEFAULTS = {"conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 256, "selector_top_k": 16}


def read_dflash2_keys(view: ConfigView) -> DFlash2Spec:
    """DFlash2 conv/selector keys and optional scalars from one flat view."""
    values = {key: view.get_int(key, default) for key, default in DFLASH2_DEFAULTS.items()}
    scale = view.get_number("input_embedding_scale")
    multiplier = view.get_number("output_multiplier")
    softcap = view.get_number("final_logit_softcapping")
    return DFlash2Spec(
        conv_kernel_size=values["conv_kernel_size"] or DFLASH2_DEFAULTS["conv_kernel_size"],
        conv_group_size=values["conv_group_size"] or DFLASH2_DEFAULTS["conv_group_size"],
        selector_rank=values["selector_rank"] or DFLASH2_DEFAULTS["selector_rank"],
        selector_top_k=values["selector_top_k"] or DFLASH2_DEFAULTS["selector_top_k"],
        input_embedding_scale=scale,
        output_multiplier=multiplier,
        final_logit_softcapping=softcap,
    )


def merge_ordered(base: dict[str, Any], fresh: dict[str, Any], owned: set[str]) -> dict[str, Any]:
    """`fresh` laid over `base`: base order first; owned keys missing from `fresh` are removed."""
    out: dict[str, Any] = {}
    for key, value in base.items():
        if key in fresh:
            out[key] = fresh[key]
        elif key not in owned:
            out[key] = value
    for key, value in fresh.items():
        if key not in out:
            out[key] = value
    return out


# speculators' config class defaults, for keys a file may omit.
SLIDING_WINDOW_NON_CAUSAL_DEFAULT = {Algorithm.DFLASH: False, Algorithm.DFLASH2: True, Algorithm.DSPARK: False}


def sliding_window_non_causal(desc: DraftDescription) -> bool:
    """The file's value, else the speculators class default for the algorithm."""
    if desc.sliding_window_non_causal is not None:
        return desc.sliding_window_non_causal
    return SLIDING_WINDOW_NON_CAUSAL_DEFAULT[desc.algorithm]


# Readers record block sizes and layout declarations raw, at the places their spec lists
# (`SPEC.keys.block_size`, `SPEC.keys.layout`); geometry judges the values.


def layout_values(config: dict[str, Any], spec: DialectSpec) -> dict[str, Any]:
    """Every declaration of the layout the config makes, at the places its format keeps one."""
    return values_at(config, (key.path for key in spec.keys.layout))


def block_size_values(config: dict[str, Any], spec: DialectSpec) -> dict[str, Any]:
    return values_at(config, spec.keys.block_size)


def write_layout(config: dict[str, Any], spec: DialectSpec, sample_from_anchor: bool, paths: tuple[str, ...]) -> None:
    """The layout written at `paths` (where the format's engines read it), and every other
    declaration the file already makes, whatever its spelling, set to the same value: a file that
    also says `query_zero_predicts_next` or `shift_label` keeps saying it, consistently (all three
    mean anchor-first when true; docs/rules.md, "How sample_from_anchor is decided")."""
    for path in (*paths, *layout_values(config, spec)):
        set_path(config, path, sample_from_anchor)
