"""The table of config keys that engines read: type, allowed values, readers, default.

This is the one place that says what a well-formed value of each engine-read key looks like.
`check_config_keys` walks the table over a raw config and turns every departure into a finding:
a wrong type, or a value outside the allowed range or set, is an error (DFT006: the engine
fails at load, or silently reads something else); a same-typed value far outside what any real
checkpoint uses is a warning (DFT058) that names the key. `docs/config-keys.md` is generated
from this table and the dialect specs (`python -m dflash_tools.dialects`), and a test keeps the two in step.

A plain frozen-dataclass table rather than pydantic models: the table is data that is rendered
into documentation and walked at several config locations per dialect, and `inspect` stays free
of pydantic's import cost (tens of milliseconds on every run).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dflash_tools.draft.config_paths import find_path
from dflash_tools.draft.dialect_spec import DialectSpec
from dflash_tools.findings import Finding, Severity, make_finding


class KeyType(StrEnum):
    INT = "int"
    NUMBER = "number"
    BOOL = "bool"
    STR = "string"
    OBJECT = "object"
    INT_LIST = "list of int"
    STR_LIST = "list of string"
    INT_OR_INT_LIST = "int or list of int"


class Scope(StrEnum):
    """Where a key lives; each dialect's spec says where each scope sits in its configs."""

    DECODER = "decoder"
    ALGORITHM = "algorithm"
    TOP = "top"


def prefixes(scope: Scope, spec: DialectSpec) -> tuple[str, ...]:
    """Where a scope sits in a dialect's configs, most authoritative first ("" is the top level).

    speculators nests the decoder in `transformer_layer_config` (its loader falls back to
    top-level keys); z-lab keeps the algorithm keys in `dflash_config`, older releases at the top
    level: the specs in `dflash_tools/dialects/` say so.
    """
    if scope is Scope.DECODER:
        return spec.keys.decoder
    if scope is Scope.ALGORITHM:
        return spec.keys.algorithm
    return ("",)


# Activation names transformers' ACT2FN (and vLLM's get_act_fn) resolve.
ACTIVATIONS = frozenset(
    {
        "gelu",
        "gelu_10",
        "gelu_fast",
        "gelu_new",
        "gelu_python",
        "gelu_pytorch_tanh",
        "gelu_accurate",
        "laplace",
        "leaky_relu",
        "linear",
        "mish",
        "quick_gelu",
        "relu",
        "relu2",
        "relu6",
        "sigmoid",
        "silu",
        "swish",
        "tanh",
        "prelu",
        "xielu",
    }
)
ROPE_TYPES = frozenset({"default", "linear", "dynamic", "yarn", "longrope", "llama3", "mrope", "proportional"})
DTYPES = frozenset({"float32", "float16", "bfloat16", "float", "half", "float64", "double", "auto"})
LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})
# A transformers model_type is a lower-case identifier (`qwen3`, `llama`, `qwen3_moe`).
MODEL_TYPE_PATTERN = r"[a-z][a-z0-9_]*"


@dataclass(frozen=True)
class ConfigKey:
    """One key an engine reads, and what a value of it may be.

    `minimum`/`maximum` bound what the engine accepts (outside: error); `plausible` bounds what
    real checkpoints use (outside: warning). `nullable` says whether JSON null is the engine's
    way of saying "off" for this key; for every other key null is a wrong type.
    """

    key: str
    type: KeyType
    scope: Scope
    readers: tuple[str, ...]
    default: Any = None
    nullable: bool = False
    minimum: float | None = None
    maximum: float | None = None
    plausible: tuple[float, float] | None = None
    choices: frozenset[str] | None = None
    # Strictly above zero (an epsilon, a RoPE base): zero itself is refused.
    positive: bool = False
    pattern: str | None = None
    # A key another check owns the findings of (geometry for block_size/sample_from_anchor);
    # the table still documents it, `check_config_keys` leaves it to that check.
    owner: str | None = None
    note: str = ""

    def allowed(self) -> str:
        """The allowed values in words (for messages and the generated documentation)."""
        parts: list[str] = []
        if self.choices is not None:
            parts.append("one of " + ", ".join(sorted(self.choices)))
        if self.pattern is not None:
            parts.append(f"matching `{self.pattern}`")
        if self.positive:
            parts.append("> 0")
        elif self.minimum is not None and self.maximum is not None:
            parts.append(f">= {_num(self.minimum)}, <= {_num(self.maximum)}")
        elif self.minimum is not None:
            parts.append(f">= {_num(self.minimum)}")
        elif self.maximum is not None:
            parts.append(f"<= {_num(self.maximum)}")
        if self.nullable:
            parts.append("or null")
        return "; ".join(parts) or "any"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


V, T, ZL, SP = "vLLM", "transformers", "z-lab", "speculators"

KEYS: tuple[ConfigKey, ...] = (
    # --- decoder (Qwen3-style layers) ---
    ConfigKey("model_type", KeyType.STR, Scope.DECODER, (V, T), "qwen3", pattern=MODEL_TYPE_PATTERN),
    ConfigKey("hidden_size", KeyType.INT, Scope.DECODER, (V, T, ZL, SP), None, minimum=1, plausible=(16, 65536)),
    ConfigKey("num_hidden_layers", KeyType.INT, Scope.DECODER, (V, T, ZL, SP), None, minimum=1, maximum=1024),
    ConfigKey("num_attention_heads", KeyType.INT, Scope.DECODER, (V, T, ZL, SP), None, minimum=1, plausible=(1, 1024)),
    ConfigKey("num_key_value_heads", KeyType.INT, Scope.DECODER, (V, T, ZL, SP), "num_attention_heads", minimum=1),
    ConfigKey("head_dim", KeyType.INT, Scope.DECODER, (V, T, ZL, SP), "hidden_size / heads", minimum=1),
    ConfigKey("intermediate_size", KeyType.INT, Scope.DECODER, (V, T, ZL, SP), None, minimum=1),
    ConfigKey("vocab_size", KeyType.INT, Scope.DECODER, (V, T, ZL, SP), None, minimum=1),
    ConfigKey("hidden_act", KeyType.STR, Scope.DECODER, (V, T), "silu", choices=ACTIVATIONS),
    ConfigKey(
        "rms_norm_eps",
        KeyType.NUMBER,
        Scope.DECODER,
        (V, T),
        1e-6,
        positive=True,
        plausible=(1e-12, 1e-3),
        note="0 or less divides by zero on an all-zero row",
    ),  # fmt: skip
    ConfigKey("attention_bias", KeyType.BOOL, Scope.DECODER, (V, T), False),
    ConfigKey("attention_dropout", KeyType.NUMBER, Scope.DECODER, (T,), 0.0, minimum=0, maximum=1),
    ConfigKey("max_position_embeddings", KeyType.INT, Scope.DECODER, (V, T), None, minimum=1),
    ConfigKey("tie_word_embeddings", KeyType.BOOL, Scope.DECODER, (V, T), False),
    ConfigKey("use_sliding_window", KeyType.BOOL, Scope.DECODER, (V, T), False),
    ConfigKey("sliding_window", KeyType.INT, Scope.DECODER, (V, T), None, nullable=True, minimum=1),
    ConfigKey("max_window_layers", KeyType.INT, Scope.DECODER, (T,), None, minimum=0),
    ConfigKey("layer_types", KeyType.STR_LIST, Scope.DECODER, (V, T, ZL), "all full_attention", choices=LAYER_TYPES),
    ConfigKey("is_causal", KeyType.BOOL, Scope.DECODER, (ZL, V), True, note="false: every layer sees the whole block"),
    ConfigKey("rope_parameters", KeyType.OBJECT, Scope.DECODER, (V, T), None),
    ConfigKey("rope_parameters.rope_type", KeyType.STR, Scope.DECODER, (V, T), "default", choices=ROPE_TYPES),
    ConfigKey(
        "rope_parameters.rope_theta",
        KeyType.NUMBER,
        Scope.DECODER,
        (V, T),
        10000.0,
        positive=True,
        plausible=(1.0, 1e12),
    ),  # fmt: skip
    ConfigKey("rope_theta", KeyType.NUMBER, Scope.DECODER, (V, T), 10000.0, positive=True, plausible=(1.0, 1e12)),
    ConfigKey("rope_scaling", KeyType.OBJECT, Scope.DECODER, (V, T), None, nullable=True),
    ConfigKey("rope_scaling.rope_type", KeyType.STR, Scope.DECODER, (V, T), "default", choices=ROPE_TYPES),
    ConfigKey("rope_scaling.type", KeyType.STR, Scope.DECODER, (V, T), "default", choices=ROPE_TYPES),
    ConfigKey(
        "rope_parameters.factor", KeyType.NUMBER, Scope.DECODER, (V, T), 1.0, positive=True, plausible=(1.0, 1024.0)
    ),
    ConfigKey(
        "rope_scaling.factor", KeyType.NUMBER, Scope.DECODER, (V, T), 1.0, positive=True, plausible=(1.0, 1024.0)
    ),
    ConfigKey("bos_token_id", KeyType.INT, Scope.DECODER, (T,), None, nullable=True, minimum=0),
    ConfigKey("eos_token_id", KeyType.INT_OR_INT_LIST, Scope.DECODER, (V, T), None, nullable=True, minimum=0),
    ConfigKey("pad_token_id", KeyType.INT, Scope.DECODER, (T,), None, nullable=True, minimum=0),
    ConfigKey("use_cache", KeyType.BOOL, Scope.DECODER, (T,), True),
    # --- top level ---
    ConfigKey("architectures", KeyType.STR_LIST, Scope.TOP, (V, T), None),
    ConfigKey("dtype", KeyType.STR, Scope.TOP, (V, T), "float32", nullable=True, choices=DTYPES),
    ConfigKey("torch_dtype", KeyType.STR, Scope.TOP, (V, T), "float32", nullable=True, choices=DTYPES),
    ConfigKey("num_target_layers", KeyType.INT, Scope.TOP, (ZL,), None, minimum=1, maximum=1024),
    ConfigKey("speculators_model_type", KeyType.STR, Scope.TOP, (V, SP), None),
    ConfigKey("draft_vocab_size", KeyType.INT, Scope.ALGORITHM, (V, SP), 32000, minimum=1),
    ConfigKey("aux_hidden_state_layer_ids", KeyType.INT_LIST, Scope.TOP, (V, SP), None, minimum=0),
    ConfigKey("sliding_window_non_causal", KeyType.BOOL, Scope.ALGORITHM, (V, SP), "per algorithm"),
    # --- algorithm keys (z-lab: dflash_config) ---
    ConfigKey("block_size", KeyType.INT, Scope.ALGORITHM, (V, ZL, SP), 8, minimum=1, owner="geometry (DFT010)"),
    ConfigKey(
        "sample_from_anchor", KeyType.BOOL, Scope.ALGORITHM, (V, ZL, SP), "per dialect", owner="geometry (DFT011)"
    ),
    ConfigKey(
        "query_zero_predicts_next",
        KeyType.BOOL,
        Scope.ALGORITHM,
        (),
        "per dialect",
        owner="geometry (DFT010, DFT011)",
        note="another spelling of sample_from_anchor (PixelML's vLLM overlay, SGLang PR 40203); no release reads it",
    ),  # fmt: skip
    ConfigKey(
        "shift_label",
        KeyType.BOOL,
        Scope.ALGORITHM,
        ("SGLang",),
        "per dialect",
        owner="geometry (DFT010, DFT011)",
        note="Domino's spelling of sample_from_anchor; SGLang reads it for projector_type domino only",
    ),  # fmt: skip
    ConfigKey(
        "speculators_config.proposal_methods[*].speculative_tokens",
        KeyType.INT,
        Scope.TOP,
        (V, SP),
        "block_size - 1",
        minimum=1,
        owner="geometry (DFT012)",
    ),  # fmt: skip
    ConfigKey(
        "speculative_config.speculative_tokens",
        KeyType.INT,
        Scope.TOP,
        (V,),
        "block_size - 1",
        minimum=1,
        note="Open Spec; geometry derives block_size from it",
    ),  # fmt: skip
    ConfigKey("mask_token_id", KeyType.INT, Scope.ALGORITHM, (V, ZL, SP), None, minimum=0),
    ConfigKey("target_layer_ids", KeyType.INT_LIST, Scope.ALGORITHM, (V, ZL), None, minimum=-1),
    ConfigKey("target_hidden_size", KeyType.INT, Scope.ALGORITHM, (V, ZL, SP), "hidden_size", nullable=True, minimum=1),
    ConfigKey("conv_kernel_size", KeyType.INT, Scope.ALGORITHM, (V, ZL, SP), 2, minimum=1, plausible=(1, 64)),
    ConfigKey("conv_group_size", KeyType.INT, Scope.ALGORITHM, (V, ZL, SP), 16, minimum=1),
    ConfigKey("selector_rank", KeyType.INT, Scope.ALGORITHM, (V, ZL, SP), 256, minimum=1),
    ConfigKey("selector_top_k", KeyType.INT, Scope.ALGORITHM, (V, ZL, SP), 16, minimum=1),
    ConfigKey(
        "input_embedding_scale",
        KeyType.NUMBER,
        Scope.ALGORITHM,
        (V, ZL, SP),
        1.0,
        nullable=True,
        plausible=(1e-6, 1e6),
    ),  # fmt: skip
    ConfigKey(
        "output_multiplier", KeyType.NUMBER, Scope.ALGORITHM, (V, ZL, SP), 1.0, nullable=True, plausible=(1e-6, 1e6)
    ),
    ConfigKey("final_logit_softcapping", KeyType.NUMBER, Scope.ALGORITHM, (V, ZL, SP), None, nullable=True),
    ConfigKey("markov_rank", KeyType.INT, Scope.ALGORITHM, (V, SP), 256, minimum=0),
    ConfigKey("markov_head_type", KeyType.STR, Scope.ALGORITHM, (V, SP), "vanilla", pattern=r"[A-Za-z0-9_]+"),
    ConfigKey("enable_confidence_head", KeyType.BOOL, Scope.ALGORITHM, (V, SP), "per dialect"),
    ConfigKey("confidence_head_with_markov", KeyType.BOOL, Scope.ALGORITHM, (V, SP), "per dialect"),
)

BY_KEY: dict[str, ConfigKey] = {entry.key: entry for entry in KEYS}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Lists are checked through the set of their entries' types and their min/max, at C speed: a
# config may carry a million layer ids, and a Python call per entry costs seconds.
def _types(values: list[Any]) -> set[type]:
    return set(map(type, values))


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return abs(value) <= sys.float_info.max
    return math.isfinite(value)


def _type_ok(entry: ConfigKey, value: Any) -> bool:
    kind = entry.type
    if kind is KeyType.INT:
        return _is_int(value)
    if kind is KeyType.NUMBER:
        return _is_number(value)
    if kind is KeyType.BOOL:
        return isinstance(value, bool)
    if kind is KeyType.STR:
        return isinstance(value, str)
    if kind is KeyType.OBJECT:
        return isinstance(value, dict)
    if kind is KeyType.INT_LIST:
        return isinstance(value, list) and _types(value) <= {int}
    if kind is KeyType.STR_LIST:
        return isinstance(value, list) and _types(value) <= {str}
    return _is_int(value) or (isinstance(value, list) and _types(value) <= {int})


def _scalars(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _range_ok(entry: ConfigKey, value: Any) -> bool:
    if isinstance(value, list) and value and _types(value) <= {int}:
        return _number_in_range(entry, min(value)) and _number_in_range(entry, max(value))
    if isinstance(value, list) and value and _types(value) <= {str}:
        distinct = set(value)
        if entry.choices is not None and not distinct <= set(entry.choices):
            return False
        return entry.pattern is None or all(re.fullmatch(entry.pattern, item) for item in distinct)
    for item in _scalars(value):
        if entry.choices is not None and isinstance(item, str) and item not in entry.choices:
            return False
        if entry.pattern is not None and isinstance(item, str) and not re.fullmatch(entry.pattern, item):
            return False
        if isinstance(item, int | float) and not isinstance(item, bool):
            if entry.minimum is not None and item < entry.minimum:
                return False
            if entry.maximum is not None and item > entry.maximum:
                return False
            if entry.positive and item <= 0:
                return False
    return True


def _number_in_range(entry: ConfigKey, item: int) -> bool:
    if entry.minimum is not None and item < entry.minimum:
        return False
    if entry.maximum is not None and item > entry.maximum:
        return False
    return not (entry.positive and item <= 0)


def _plausible(entry: ConfigKey, value: Any) -> bool:
    if entry.plausible is None:
        return True
    low, high = entry.plausible
    if isinstance(value, list) and value and _types(value) <= {int}:
        return low <= min(value) and max(value) <= high
    return all(low <= item <= high for item in _scalars(value) if _is_number(item))


def located(config: dict[str, Any], spec: DialectSpec) -> Iterator[tuple[ConfigKey, str, Any]]:
    """Every table key present in `config`, with the dotted path it was found at and its value."""
    for entry in KEYS:
        for prefix in prefixes(entry.scope, spec):
            path = prefix + entry.key
            present, value = find_path(config, path)
            if present:
                yield entry, path, value


def _show(value: Any) -> str:
    """A value as JSON would spell it; escapes and lone surrogates quoted, never passed through."""
    if isinstance(value, dict | list):
        text = (
            ("[]" if isinstance(value, list) else "{}")
            if not value
            else f"a JSON {type(value).__name__} of {len(value)}"
        )
    elif isinstance(value, float) and not math.isfinite(value):
        text = repr(value)
    else:
        text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else text[:57] + "..."


def check_config_keys(config: dict[str, Any], spec: DialectSpec) -> list[Finding]:
    """Type and range findings for every engine-read key present in `config`, where `spec` keeps it."""
    findings: list[Finding] = []
    for entry, path, value in located(config, spec):
        if entry.owner is not None or (value is None and entry.nullable):
            continue
        problem = _value_problem(entry, path, value)
        if problem is not None:
            code, message, fix = problem
            findings.append(make_finding(code, message, fix, keys=(path,), values={path: value}))
    return findings


def _value_problem(entry: ConfigKey, path: str, value: Any) -> tuple[str, str, str] | None:
    """(code, message, fix) for the first thing wrong with `value` at `path`: type, range, plausibility."""
    readers = ", ".join(entry.readers)
    if not _type_ok(entry, value):
        expected = entry.type.value + (" or null" if entry.nullable else "")
        return (
            "DFT006",
            f"{path} is {_show(value)}, expected {expected} ({readers} read it)",
            f"fix {path} in config.json: {entry.allowed()}",
        )
    if not _range_ok(entry, value):
        return (
            "DFT006",
            f"{path} is {_show(value)}, expected {entry.allowed()} ({readers} read it)",
            f"fix {path} in config.json",
        )
    if not _plausible(entry, value):
        assert entry.plausible is not None
        low, high = entry.plausible
        return (
            "DFT058",
            f"{path} is {_show(value)}, far outside what real checkpoints use ({_num(low)} to {_num(high)})",
            f"check {path} in config.json against the model the draft was trained from",
        )
    return None


def covered_paths(findings: list[Finding]) -> set[str]:
    """Key paths this table already reported (so a reader's duplicate DFT006 can be dropped)."""
    return {key for f in findings if f.code == "DFT006" for key in f.keys}


# --------------------------------------------------------------------------------------------
# docs/config-keys.md is generated from the table
# --------------------------------------------------------------------------------------------

_DOC_HEAD = """# Config keys engines read

Generated from `dflash_tools/draft/config_keys.py` and the dialect specs by `python -m dflash_tools.dialects > docs/config-keys.md`;
a test fails when the two differ. `inspect` checks every key below wherever the dialect keeps it
(each dialect's `SPEC`, docs/adding-a-dialect.md). The last two rows are where a dialect states
its block size and declares its layout (geometry owns both, docs/rules.md): any of the spellings
`sample_from_anchor`, `query_zero_predicts_next`, `shift_label` declares it; a mirror is a copy
engines do not read, so a layout found only there is inferred.

{locations}

A wrong type, or a value outside "allowed", is an error (DFT006): the engine fails at load or reads
something else. A same-typed value outside "plausible" is a warning (DFT058) naming the key. JSON
null is accepted only where "allowed" says so. Keys marked with an owner are checked by that
check, not by the table.

Beyond single keys, `inspect` reports JSON that readers disagree on: a key written twice (DFT059
where the copies differ, DFT060 where they repeat one value; Python's json, so transformers and
vLLM, read the last copy), a string holding a lone surrogate such as `"\\ud800"` (DFT061), and
nesting deeper than 64 levels (DFT062). `convert` writes a duplicated key once, with the last
value, where its last copy stood; it keeps lone surrogates as the `\\uXXXX` escapes the file
used; it refuses (exit 2) a config nested deeper than 64 levels.

| key | scope | type | allowed | plausible | default when absent | read by | notes |
|---|---|---|---|---|---|---|---|
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(specs: Sequence[DialectSpec]) -> str:
    """docs/config-keys.md for the registered dialects (`dflash_tools.dialects.SPECS`)."""
    location_rows = [
        "| scope | " + " | ".join(spec.title for spec in specs) + " |",
        "|---" * (len(specs) + 1) + "|",
    ]
    for scope in Scope:
        cells = [" or ".join(f"`{p or '(top level)'}`" for p in prefixes(scope, spec)) for spec in specs]
        location_rows.append(f"| {scope.value} | " + " | ".join(cells) + " |")
    block = [
        " or ".join(f"`{path}`" for path in spec.keys.block_size) or f"none (from `{spec.keys.speculative_tokens}`)"
        for spec in specs
    ]
    location_rows.append("| block_size | " + " | ".join(block) + " |")
    layout = [
        ", ".join(f"`{key.path}`" + (" (mirror)" if key.mirror else "") for key in spec.keys.layout) for spec in specs
    ]
    location_rows.append("| layout | " + " | ".join(layout) + " |")
    lines = [_DOC_HEAD.format(locations="\n".join(location_rows))]
    for entry in KEYS:
        plausible = f"{_num(entry.plausible[0])} to {_num(entry.plausible[1])}" if entry.plausible else ""
        default = "" if entry.default is None else f"`{entry.default}`"
        notes = "; ".join(n for n in (f"owner: {entry.owner}" if entry.owner else "", entry.note) if n)
        lines.append(
            f"| `{entry.key}` | {entry.scope.value} | {entry.type.value} | {_cell(entry.allowed())} | {plausible} "
            f"| {default} | {', '.join(entry.readers)} | {_cell(notes)} |\n"
        )
    return "".join(lines)


__all__ = ["KEYS", "ConfigKey", "KeyType", "Scope", "Severity", "check_config_keys", "prefixes", "render_markdown"]
