"""The Muse Glimmer assistant format (`MuseGlimmerAssistantModel`, model_type `muse_glimmer_assistant`).

A DFlash draft whose algorithm keys sit at the top level (`block_size`, `mask_token_id`,
`target_layer_ids`), with no `dflash_config` and no `vocab_size`. Both engines serve it with
their DFlash model: vLLM adds `dflash_config = {"causal": false}` and `vocab_size` 202048 when it
loads it (vllm/config/speculative.py: SpeculativeConfig.hf_config_override), SGLang's config
class makes it non-causal and borrows the target's vocabulary
(sglang/srt/configs/muse_glimmer.py: MuseGlimmerAssistantConfig). Its weights name the
aux-hidden-state encoder `encoder.fc` and `encoder.output_norm_enc` (z-lab: `fc`, `hidden_norm`);
both engines rename them when they load them.

The layout: vLLM reads `dflash_config.sample_from_anchor` only (vllm/v1/worker/gpu/spec_decode/
dflash/speculator.py), SGLang's DFLASH path none, so a file without it is bonus-anchor;
`normalize` writes it there, which vLLM merges with the causal flag it adds. `convert --to zlab`
and back translate it where the keys map without loss (`TRANSLATES_WITH`).
"""

from __future__ import annotations

from typing import Any

from dflash_tools.dialects._common import (
    ConfigInvalid,
    ConfigView,
    architectures,
    block_size_values,
    copy_config,
    layout_values,
    merge_ordered,
    read_decoder,
    write_layout,
)
from dflash_tools.draft.description import Algorithm, Dialect, DraftDescription
from dflash_tools.draft.dialect_spec import Causality, DialectKeys, DialectSpec, LayoutKey
from dflash_tools.draft.geometry import Geometry

MODEL_TYPE = "muse_glimmer_assistant"
ARCHITECTURES = ("MuseGlimmerAssistantModel", "DFlashMuseGlimmerAssistantModel")
# The vocabulary vLLM assumes when the file has none (Muse Glimmer's); SGLang takes the target's.
DEFAULT_VOCAB_SIZE = 202048

SPEC = DialectSpec(
    family="muse-glimmer",
    title="Muse Glimmer assistant",
    markers="architectures [MuseGlimmerAssistantModel] or model_type muse_glimmer_assistant",
    dialects=(Dialect("muse-glimmer-assistant", Algorithm.DFLASH),),
    keys=DialectKeys(
        decoder=("",),
        # The format's own keys are top-level; engines read a dflash_config first when one is there.
        algorithm=("", "dflash_config."),
        block_size=("block_size", "dflash_config.block_size"),
        layout=(
            LayoutKey("dflash_config.sample_from_anchor"),
            LayoutKey("dflash_config.query_zero_predicts_next"),
            LayoutKey("sample_from_anchor", mirror=True),
            LayoutKey("query_zero_predicts_next", mirror=True),
        ),
    ),
    causality=Causality.IS_CAUSAL,
    format_keys=("architectures", "model_type"),
    tensor_names={"fc.weight": "encoder.fc.weight", "hidden_norm.weight": "encoder.output_norm_enc.weight"},
    unread_hints={None: "convert it to the z-lab form: `dflash-tools convert SRC -o OUT --to zlab`"},
)
(MUSE_GLIMMER,) = SPEC.dialects
# The families this writer translates to and from without loss (docs/convert.md); a pair is
# declared on either side.
TRANSLATES_WITH = frozenset({"zlab"})


def detect(config: dict[str, Any]) -> Dialect | None:
    if "speculators_model_type" in config or "open_spec_config_version" in config:
        return None
    names = architectures(config)
    if set(ARCHITECTURES) & set(names):
        return MUSE_GLIMMER
    if config.get("model_type") == MODEL_TYPE and not names:
        return MUSE_GLIMMER
    return None


def read(config: dict[str, Any], dialect: Dialect) -> DraftDescription:
    top = ConfigView(config)
    nested = top.sub("dflash_config") or ConfigView({}, "dflash_config.", top.findings)
    decoder = read_decoder(top, ConfigView({"vocab_size": DEFAULT_VOCAB_SIZE}))

    def pick(key: str) -> tuple[ConfigView, str]:
        # Engines read dflash_config first (vLLM merges one in; SGLang reads it before the top level).
        return (nested, f"dflash_config.{key}") if nested.has(key) else (top, key)

    ids_view, ids_key = pick("target_layer_ids")
    layer_ids = ids_view.get_int_list("target_layer_ids")
    if layer_ids is None:
        top.require("target_layer_ids", None)
        raise ConfigInvalid(top.findings)
    mask_view, mask_key = pick("mask_token_id")
    mask = mask_view.get_int("mask_token_id", minimum=0)
    causal = top.get_bool("is_causal")
    if causal is None:
        # Non-causal unless the file says otherwise: vLLM's added dflash_config.causal, SGLang's class.
        causal = nested.get_bool("causal", False)
    return DraftDescription(
        dialect=dialect,
        algorithm=Algorithm.DFLASH,
        decoder=decoder,
        target_layer_ids=layer_ids,
        target_layer_ids_key=ids_key,
        mask_token_id=mask,
        mask_token_id_key=mask_key if mask is not None else None,
        draft_vocab_size=top.get_int("draft_vocab_size") or decoder.vocab_size,
        block_size_values=block_size_values(config, SPEC),
        sample_from_anchor_values=layout_values(config, SPEC),
        num_target_layers=top.get_int("num_target_layers") or nested.get_int("num_target_layers"),
        target_hidden_size=top.get_int("target_hidden_size"),
        is_causal=causal,
        raw_config=config,
        reader_findings=top.findings,
    )


def normalize(config: dict[str, Any], geometry: Geometry) -> dict[str, Any]:
    """block_size where the format keeps it (and in dflash_config when the file has one); the
    layout written explicitly in dflash_config, the one place vLLM reads it."""
    out = copy_config(config)
    out["block_size"] = geometry.block_size
    if isinstance(out.get("dflash_config"), dict) and "block_size" in out["dflash_config"]:
        out["dflash_config"]["block_size"] = geometry.block_size
    write_layout(out, SPEC, geometry.sample_from_anchor, ("dflash_config.sample_from_anchor",))
    return out


# --------------------------------------------------------------------------------------------
# Writer: a z-lab DFlash description written in this format, and this format's decoder fields
# --------------------------------------------------------------------------------------------

# Top-level keys that are the format's own; every other top-level key is a decoder field.
OWN_KEYS = frozenset(
    {
        "architectures",
        "block_size",
        "dflash_config",
        "draft_vocab_size",
        "dtype",
        "is_causal",
        "mask_token_id",
        "num_target_layers",
        "sample_from_anchor",
        "target_hidden_size",
        "target_layer_ids",
        "transformers_version",
    }
)


def decoder_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder fields, in file order, with the vocabulary the format implies written out."""
    decoder = {key: value for key, value in config.items() if key not in OWN_KEYS}
    decoder.setdefault("vocab_size", DEFAULT_VOCAB_SIZE)
    return decoder


def cannot_render(desc: DraftDescription) -> str | None:
    """Why `desc` has no lossless form here (None: it has one)."""
    if desc.algorithm is not Algorithm.DFLASH:
        return f"the {SPEC.title} format holds DFlash drafts only, and this is a {desc.algorithm.value} draft"
    if desc.reduced_vocabulary:
        return (
            f"draft_vocab_size {desc.draft_vocab_size} != vocab_size {desc.decoder.vocab_size}: the {SPEC.title} "
            "format borrows the target's vocabulary and head"
        )
    layer_types = set(desc.decoder.layer_types or ["full_attention"])
    if desc.is_causal is None and len(layer_types) > 1:
        return (
            "no is_causal with sliding and full-attention layers: z-lab makes the sliding layers causal and the "
            f"others not, and the {SPEC.title} format has one flag for every layer"
        )
    return None


def render(
    desc: DraftDescription,
    geometry: Geometry,
    *,
    decoder: dict[str, Any],
    base_config: dict[str, Any] | None = None,
    verifier: dict[str, Any] | None = None,
    num_target_layers: int | None = None,
) -> dict[str, Any]:
    """A z-lab DFlash description written in this format (`cannot_render` says which cannot be).

    Causality: z-lab's per-layer default is causal on sliding layers; with all layers of one kind
    it is one flag, written as `is_causal` when it is true (the format's default is false).
    `dflash_config` keeps the algorithm keys engines read only there (sinks, value scale, use_swa)
    and the layout. `base_config`: an earlier form in this format, whose order and extra keys are
    kept. The format records no verifier.
    """
    del verifier
    problem = cannot_render(desc)
    if problem is not None:
        raise ValueError(problem)
    raw = desc.raw_config
    kinds = set(desc.decoder.layer_types or ["full_attention"])
    causal = desc.is_causal if desc.is_causal is not None else kinds == {"sliding_attention"}
    decoder = {key: value for key, value in decoder.items() if key not in ("is_causal", "block_size")}
    decoder["model_type"] = MODEL_TYPE
    top: dict[str, Any] = {"architectures": [ARCHITECTURES[0]]}
    if "dtype" in raw:
        top["dtype"] = raw["dtype"]
    top.update(decoder)
    top["block_size"] = geometry.block_size
    if causal:
        top["is_causal"] = True
    top["mask_token_id"] = desc.mask_token_id
    top["target_layer_ids"] = list(desc.target_layer_ids)
    count = num_target_layers if num_target_layers is not None else desc.num_target_layers
    if count is not None:
        top["num_target_layers"] = count
    if desc.target_hidden_size is not None:
        top["target_hidden_size"] = desc.target_hidden_size
    extras = raw.get("dflash_config") if isinstance(raw.get("dflash_config"), dict) else {}
    assert isinstance(extras, dict)
    moved = {"block_size", "mask_token_id", "target_layer_ids", "num_target_layers", "target_hidden_size", "causal"}
    nested = {key: value for key, value in extras.items() if key not in moved}
    nested["sample_from_anchor"] = geometry.sample_from_anchor
    top["dflash_config"] = nested
    if "transformers_version" in raw:
        top["transformers_version"] = raw["transformers_version"]
    if base_config is not None:
        if "vocab_size" not in base_config and top.get("vocab_size") == DEFAULT_VOCAB_SIZE:
            del top["vocab_size"]  # the format implies it: an earlier form without it stays without
        owned = set(OWN_KEYS) | set(decoder_config(base_config))
        top = merge_ordered(base_config, top, owned)
    return normalize(top, geometry)
