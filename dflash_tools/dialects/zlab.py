"""z-lab native dialects: DFlash (`DFlashDraftModel`) and DFlash2 (`DFlash2DraftModel`).

The DFlash2 architectures that engines load with z-lab's DFlash2 keys and weights are read as
DFlash2 too: `DFlash2BeamDraftModel` (vllm/models/beam; SGLang's alias), `DFlash2RicursiveDraftModel`
(DFlash2 with NoPE layers, vllm/model_executor/models/ricursive_dflash2.py) and
`MiniMaxDFlash2DraftModel` (SGLang's alias, sglang/srt/models/dflash.py).

Decoder fields sit at the top level; algorithm keys in `dflash_config`. Older DFlash releases keep
`block_size` at the top level, newer ones in `dflash_config`; vLLM 0.33.0 reads
`sample_from_anchor` and the DFlash2 keys only from `dflash_config`.
"""

from __future__ import annotations

from typing import Any

from dflash_tools.dialects._common import (
    DFLASH2_DEFAULTS,
    ConfigInvalid,
    ConfigView,
    architectures,
    block_size_values,
    copy_config,
    layout_values,
    merge_ordered,
    read_decoder,
    read_dflash2_keys,
    sliding_window_non_causal,
    write_layout,
)
from dflash_tools.draft.description import Algorithm, Dialect, DraftDescription
from dflash_tools.draft.dialect_spec import Causality, DialectKeys, DialectSpec, LayoutKey
from dflash_tools.draft.geometry import Geometry

SPEC = DialectSpec(
    family="zlab",
    title="z-lab",
    markers="architectures [DFlashDraftModel] or [DFlash2DraftModel] (or a DFlash2 variant: Beam, Ricursive, "
    "MiniMax) with dflash_config",
    dialects=(Dialect("zlab-dflash", Algorithm.DFLASH), Dialect("zlab-dflash2", Algorithm.DFLASH2)),
    keys=DialectKeys(
        decoder=("",),
        algorithm=("dflash_config.", ""),
        block_size=("block_size", "dflash_config.block_size"),
        # vLLM reads the layout from dflash_config.sample_from_anchor only; PixelML's vLLM overlay
        # reads dflash_config.query_zero_predicts_next, SGLang's Domino path dflash_config.shift_label
        # (sglang/srt/speculative/dflash_utils.py). The top level is a mirror vLLM ignores.
        layout=(
            LayoutKey("dflash_config.sample_from_anchor"),
            LayoutKey("dflash_config.query_zero_predicts_next"),
            LayoutKey("dflash_config.shift_label"),
            LayoutKey("sample_from_anchor", mirror=True),
            LayoutKey("query_zero_predicts_next", mirror=True),
            LayoutKey("shift_label", mirror=True),
        ),
    ),
    causality=Causality.IS_CAUSAL,
)
ZLAB_DFLASH, ZLAB_DFLASH2 = SPEC.dialects

DFLASH2_ARCHITECTURES = frozenset(
    {"DFlash2DraftModel", "DFlash2BeamDraftModel", "DFlash2RicursiveDraftModel", "MiniMaxDFlash2DraftModel"}
)
DFLASH2_SCALARS = ("input_embedding_scale", "output_multiplier", "final_logit_softcapping")


def detect(config: dict[str, Any]) -> Dialect | None:
    if "speculators_model_type" in config or "open_spec_config_version" in config:
        return None
    archs = set(architectures(config))
    if DFLASH2_ARCHITECTURES & archs:
        return ZLAB_DFLASH2
    if "DFlashDraftModel" in archs:
        return ZLAB_DFLASH
    return None


def read(config: dict[str, Any], dialect: Dialect) -> DraftDescription:
    top = ConfigView(config)
    dflash = top.sub("dflash_config") or ConfigView({}, "dflash_config.", top.findings)
    decoder = read_decoder(top)

    layer_ids = dflash.get_int_list("target_layer_ids")
    layer_key = "dflash_config.target_layer_ids"
    if layer_ids is None and top.has("target_layer_ids"):
        layer_ids = top.get_int_list("target_layer_ids")
        layer_key = "target_layer_ids"
    if layer_ids is None:
        dflash.require("target_layer_ids", None)
        raise ConfigInvalid(top.findings)

    mask_key: str | None = "dflash_config.mask_token_id"
    mask = dflash.get_int("mask_token_id", minimum=0)
    if mask is None and top.has("mask_token_id"):
        mask, mask_key = top.get_int("mask_token_id", minimum=0), "mask_token_id"
    if mask is None:
        mask_key = None

    algorithm = dialect.algorithm
    dflash2 = None
    if algorithm is Algorithm.DFLASH2:
        dflash2 = read_dflash2_keys(dflash)

    return DraftDescription(
        dialect=dialect,
        algorithm=algorithm,
        decoder=decoder,
        target_layer_ids=layer_ids,
        target_layer_ids_key=layer_key,
        mask_token_id=mask,
        mask_token_id_key=mask_key,
        draft_vocab_size=decoder.vocab_size,
        block_size_values=block_size_values(config, SPEC),
        sample_from_anchor_values=layout_values(config, SPEC),
        num_target_layers=top.get_int("num_target_layers") or dflash.get_int("num_target_layers"),
        target_hidden_size=dflash.get_int("target_hidden_size") or top.get_int("target_hidden_size"),
        is_causal=top.get_bool("is_causal"),
        dflash2=dflash2,
        raw_config=config,
        reader_findings=top.findings,
    )


def is_domino(config: dict[str, Any]) -> bool:
    """A Domino draft (`projector_type: domino`, nested or at the top level)."""
    nested = config.get("dflash_config")
    value = nested.get("projector_type") if isinstance(nested, dict) else None
    return (value if value is not None else config.get("projector_type")) == "domino"


def normalize(config: dict[str, Any], geometry: Geometry) -> dict[str, Any]:
    """Write B and SFA in every place an engine reads them; leave everything else as it was.

    Top-level `block_size` (older z-lab code, llama.cpp converters) and `dflash_config.block_size`
    (newer z-lab code) both get the value. The layout is always written explicitly:
    `dflash_config.sample_from_anchor` is what vLLM reads, the top-level mirror is for tools that
    read flat keys, and a Domino draft also gets `dflash_config.shift_label`, the spelling SGLang's
    Domino path reads (sglang/srt/speculative/dflash_utils.py); any other spelling the file already
    uses is kept, with the same value.
    """
    out = copy_config(config)
    out["block_size"] = geometry.block_size
    out["sample_from_anchor"] = geometry.sample_from_anchor
    dflash = out.get("dflash_config")
    if not isinstance(dflash, dict):
        out["dflash_config"] = {}
    out["dflash_config"]["block_size"] = geometry.block_size
    paths: tuple[str, ...] = ("dflash_config.sample_from_anchor", "sample_from_anchor")
    if is_domino(config):
        paths = (*paths, "dflash_config.shift_label")
    write_layout(out, SPEC, geometry.sample_from_anchor, paths)
    return out


# --------------------------------------------------------------------------------------------
# Writer: render a description (from any DFlash / DFlash2 dialect) as a z-lab config
# --------------------------------------------------------------------------------------------

# Top-level keys that are z-lab's own; every other top-level key is a decoder field (what
# speculators nests in `transformer_layer_config`).
ZLAB_KEYS = frozenset(
    {
        "architectures",
        "auto_map",
        "block_size",
        "sample_from_anchor",
        "dflash_config",
        "num_target_layers",
        "is_causal",
        "dtype",
        "transformers_version",
        "target_layer_ids",
        "mask_token_id",
    }
)
# Defaults of the z-lab DFlash2 code: a value equal to these changes nothing.
DFLASH2_SCALAR_DEFAULTS: dict[str, float | None] = {
    "input_embedding_scale": 1.0,
    "output_multiplier": 1.0,
    "final_logit_softcapping": None,
}
_ARCHITECTURE = {Algorithm.DFLASH: "DFlashDraftModel", Algorithm.DFLASH2: "DFlash2DraftModel"}
# The families this writer translates to and from without loss (docs/convert.md); a pair is
# declared on either side.
TRANSLATES_WITH = frozenset({"speculators"})


def cannot_render(desc: DraftDescription) -> str | None:
    if desc.algorithm not in _ARCHITECTURE:
        return f"z-lab has no form for {desc.algorithm.value} drafts"
    return None


def decoder_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder fields of a z-lab config, in file order."""
    return {key: value for key, value in config.items() if key not in ZLAB_KEYS}


def scalar_is_default(name: str, value: float | None) -> bool:
    """Whether a DFlash2 scalar leaves the model unchanged (softcapping <= 0 is off)."""
    if value is None:
        return True
    if name == "final_logit_softcapping":
        return value <= 0
    return value == DFLASH2_SCALAR_DEFAULTS[name]


def render(
    desc: DraftDescription,
    geometry: Geometry,
    *,
    decoder: dict[str, Any],
    base_config: dict[str, Any] | None = None,
    verifier: dict[str, Any] | None = None,
    num_target_layers: int | None = None,
) -> dict[str, Any]:
    """A normalized z-lab config for a DFlash / DFlash2 description read from any dialect.

    `base_config` is an earlier z-lab form of the same draft: its key order and every key this
    writer does not decide (auto_map, token ids, `dflash_config` extras) are kept, so a round trip
    through another dialect gives the original file back. z-lab configs record no verifier;
    `verifier` is accepted for symmetry with the speculators writer and ignored.
    `decoder` is the source dialect's decoder config (`dialects.render` passes it).
    """
    del verifier
    if desc.algorithm not in _ARCHITECTURE:
        raise ValueError(f"z-lab has no form for {desc.algorithm.value} drafts")
    raw = desc.raw_config
    decoder = dict(decoder)
    decoder.setdefault("model_type", desc.decoder.model_type or "qwen3")
    decoder.setdefault("vocab_size", desc.decoder.vocab_size)
    base = base_config or {}
    base_dflash = base.get("dflash_config") if isinstance(base.get("dflash_config"), dict) else {}
    assert isinstance(base_dflash, dict)

    top: dict[str, Any] = {"architectures": [_ARCHITECTURE[desc.algorithm]]}
    if "dtype" in raw:
        top["dtype"] = raw["dtype"]
    if desc.spec.causality is Causality.IS_CAUSAL:
        non_causal_everywhere = desc.is_causal is False
    else:
        non_causal_everywhere = sliding_window_non_causal(desc)
    if non_causal_everywhere and "is_causal" not in decoder:
        top["is_causal"] = False
    top.update(decoder)
    if num_target_layers is not None:
        top["num_target_layers"] = num_target_layers
    top["block_size"] = geometry.block_size

    dflash: dict[str, Any] = {
        "block_size": geometry.block_size,
        "mask_token_id": desc.mask_token_id,
        "target_layer_ids": list(desc.target_layer_ids),
    }
    if desc.dflash2 is not None:
        for key, default in DFLASH2_DEFAULTS.items():
            value = getattr(desc.dflash2, key)
            if base_config is None or key in base_dflash or value != default:
                dflash[key] = value
        for key in DFLASH2_SCALARS:
            value = getattr(desc.dflash2, key)
            if value is not None and (key in base_dflash or not scalar_is_default(key, value)):
                dflash[key] = value
    if desc.target_hidden_size is not None:
        dflash["target_hidden_size"] = desc.target_hidden_size
    source_nested = raw.get("dflash_config")
    if isinstance(source_nested, dict):
        # A source that keeps algorithm keys in dflash_config too (the Muse Glimmer assistant
        # format): the keys this writer does not decide (sinks, value scale, use_swa) stay there.
        for key, value in source_nested.items():
            dflash.setdefault(key, value)
    dflash["sample_from_anchor"] = geometry.sample_from_anchor
    top["dflash_config"] = dflash
    if "transformers_version" in raw:
        top["transformers_version"] = raw["transformers_version"]

    if base_config is not None:
        owned_dflash = set(dflash) | set(DFLASH2_DEFAULTS) | {"target_hidden_size", "mask_token_id", "target_layer_ids"}
        top["dflash_config"] = merge_ordered(base_dflash, dflash, owned_dflash)
        owned_top = (
            set(top)
            | set(decoder_config(base))
            | {
                "architectures",
                "is_causal",
                "block_size",
                "sample_from_anchor",
                "dflash_config",
                "target_layer_ids",
                "mask_token_id",
            }
        )
        top = merge_ordered(base, top, owned_top)
    return normalize(top, geometry)
