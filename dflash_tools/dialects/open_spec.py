"""Open Spec Config (`open_spec_config_version`): detected and read for geometry.

It stores K, not B (`speculative_config.speculative_tokens`; B = K + (not SFA)), and names the
layer-id convention explicitly with `target_layer_start_idx` (z-lab id = id - start_idx).
"""

from __future__ import annotations

from typing import Any

from dflash_tools.dialects._common import (
    ConfigInvalid,
    ConfigView,
    copy_config,
    layout_values,
    read_decoder,
    write_layout,
)
from dflash_tools.draft.description import Algorithm, Dialect, DraftDescription
from dflash_tools.draft.dialect_spec import Causality, DialectKeys, DialectSpec, LayoutKey, ProposalCount
from dflash_tools.draft.geometry import Geometry

SPEC = DialectSpec(
    family="open-spec",
    title="Open Spec",
    markers="open_spec_config_version with speculative_config",
    # `method` in the file says dflash or dflash2; dflash when it does not.
    dialects=(Dialect("open-spec", Algorithm.DFLASH),),
    keys=DialectKeys(
        decoder=("",),
        algorithm=("speculative_config.",),
        block_size=(),
        layout=(LayoutKey("speculative_config.sample_from_anchor"),),
        speculative_tokens="speculative_config.speculative_tokens",
        proposal_count=ProposalCount.BLOCK_SIZE,
    ),
    causality=Causality.SLIDING_WINDOW_NON_CAUSAL,
    format_keys=("open_spec_config_version",),
    layout_required=True,  # the Open Spec schema requires sample_from_anchor
    unread_hints={
        None: "no serving engine reads Open Spec configs, and dflash-tools convert does not translate them: write "
        "the z-lab form (docs/convert.md)"
    },
)
(OPEN_SPEC,) = SPEC.dialects


def detect(config: dict[str, Any]) -> Dialect | None:
    return OPEN_SPEC if "open_spec_config_version" in config else None


def read(config: dict[str, Any], dialect: Dialect) -> DraftDescription:
    top = ConfigView(config)
    decoder = read_decoder(top)
    spec = top.sub("speculative_config") or ConfigView({}, "speculative_config.", top.findings)
    ids = spec.get_int_list("target_layer_ids")
    if ids is None:
        spec.require("target_layer_ids", None)
        raise ConfigInvalid(top.findings)
    start = spec.get_int("target_layer_start_idx", 0, minimum=0) or 0
    method = spec.get_str("method", "dflash") or "dflash"
    algorithm = Algorithm.DFLASH2 if method == "dflash2" else Algorithm.DFLASH
    tokens = spec.raw("speculative_tokens")
    verifier_raw = spec.raw("verifier")
    verifier_name = spec.get_str("verifier") if not isinstance(verifier_raw, dict) else None
    if isinstance(verifier_raw, dict):
        verifier = spec.sub("verifier")
        verifier_name = verifier.get_str("name_or_path") if verifier is not None else None
    return DraftDescription(
        dialect=dialect,
        algorithm=algorithm,
        decoder=decoder,
        target_layer_ids=[i - start for i in ids],
        target_layer_ids_key="speculative_config.target_layer_ids",
        mask_token_id=spec.get_int("mask_token_id", minimum=0),
        mask_token_id_key="speculative_config.mask_token_id" if spec.has("mask_token_id") else None,
        draft_vocab_size=spec.get_int("draft_vocab_size") or decoder.vocab_size,
        sample_from_anchor_values=layout_values(config, SPEC),
        proposal_speculative_tokens=[tokens] if tokens is not None else None,
        sliding_window_non_causal=spec.get_bool("sliding_window_non_causal"),
        verifier_name=verifier_name,
        raw_config=config,
        reader_findings=top.findings,
    )


def normalize(config: dict[str, Any], geometry: Geometry) -> dict[str, Any]:
    out = copy_config(config)
    spec = out.setdefault("speculative_config", {})
    spec["speculative_tokens"] = geometry.max_speculative_tokens
    write_layout(out, SPEC, geometry.sample_from_anchor, ("speculative_config.sample_from_anchor",))
    return out
