"""vllm-project/speculators dialects: `speculators_model_type` dflash, dflash2, dspark.

Algorithm keys are flat at the top level, the decoder config is nested in
`transformer_layer_config`, K lives only in `speculators_config.proposal_methods[*]`, and
`aux_hidden_state_layer_ids` are `hidden_states` indices: z-lab id + 1.
"""

from __future__ import annotations

import copy
from typing import Any

from dflash_tools.description import Algorithm, Dialect, DraftDescription, DSparkSpec
from dflash_tools.dialects._common import ConfigInvalid, ConfigView, read_decoder
from dflash_tools.dialects.zlab import read_dflash2_keys
from dflash_tools.findings import make_finding
from dflash_tools.geometry import Geometry

DIALECTS = (Dialect.SPECULATORS_DFLASH, Dialect.SPECULATORS_DFLASH2, Dialect.SPECULATORS_DSPARK)
MARKERS = "speculators_model_type (dflash, dflash2, dspark) with speculators_config"

_BY_TYPE = {
    "dflash": (Dialect.SPECULATORS_DFLASH, Algorithm.DFLASH),
    "dflash2": (Dialect.SPECULATORS_DFLASH2, Algorithm.DFLASH2),
    "dspark": (Dialect.SPECULATORS_DSPARK, Algorithm.DSPARK),
}
# speculators' config class default: a file without the key is read as a 32000-token draft vocab.
DEFAULT_DRAFT_VOCAB_SIZE = 32000


def detect(config: dict[str, Any]) -> Dialect | None:
    kind = config.get("speculators_model_type")
    if isinstance(kind, str) and kind in _BY_TYPE:
        return _BY_TYPE[kind][0]
    return None


def proposal_tokens(config: dict[str, Any]) -> list[Any] | None:
    spec = config.get("speculators_config")
    methods = spec.get("proposal_methods") if isinstance(spec, dict) else None
    if not isinstance(methods, list):
        return None
    return [m.get("speculative_tokens") for m in methods if isinstance(m, dict) and "speculative_tokens" in m]


def read(config: dict[str, Any], dialect: Dialect) -> DraftDescription:
    algorithm = next(a for d, a in _BY_TYPE.values() if d is dialect)
    top = ConfigView(config)
    layer_config = top.sub("transformer_layer_config")
    decoder = read_decoder(layer_config, top) if layer_config is not None else read_decoder(top)

    aux = top.get_int_list("aux_hidden_state_layer_ids")
    if aux is None:
        top.require("aux_hidden_state_layer_ids", None)
        raise ConfigInvalid(top.findings)

    vocab = top.get_int("draft_vocab_size")
    if vocab is None:
        vocab = DEFAULT_DRAFT_VOCAB_SIZE
        if decoder.vocab_size != DEFAULT_DRAFT_VOCAB_SIZE:
            top.findings.append(
                make_finding(
                    "DFT006",
                    f"draft_vocab_size is absent: speculators reads it as {DEFAULT_DRAFT_VOCAB_SIZE}, not the "
                    f"decoder vocab_size {decoder.vocab_size}",
                    f'add "draft_vocab_size": {decoder.vocab_size} if the draft predicts the full vocabulary',
                    keys=("draft_vocab_size",),
                )
            )

    spec = top.sub("speculators_config")
    verifier_name = None
    verifier_archs = None
    if spec is not None:
        verifier = spec.sub("verifier")
        if verifier is not None:
            verifier_name = verifier.get_str("name_or_path")
            verifier_archs = verifier.get_str_list("architectures")

    block_values = {"block_size": config["block_size"]} if "block_size" in config else {}
    sfa_values = {"sample_from_anchor": config["sample_from_anchor"]} if "sample_from_anchor" in config else {}
    dspark = None
    if algorithm is Algorithm.DSPARK:
        dspark = DSparkSpec(
            markov_rank=top.get_int("markov_rank", 256, minimum=0) or 0,
            markov_head_type=top.get_str("markov_head_type", "vanilla") or "vanilla",
            enable_confidence_head=bool(top.get_bool("enable_confidence_head", True)),
            confidence_head_with_markov=bool(top.get_bool("confidence_head_with_markov", True)),
        )
    return DraftDescription(
        dialect=dialect,
        algorithm=algorithm,
        decoder=decoder,
        target_layer_ids=[a - 1 for a in aux],
        target_layer_ids_key="aux_hidden_state_layer_ids",
        mask_token_id=top.get_int("mask_token_id", minimum=0),
        mask_token_id_key="mask_token_id" if "mask_token_id" in config else None,
        draft_vocab_size=vocab,
        block_size_values=block_values,
        sample_from_anchor_values=sfa_values,
        proposal_speculative_tokens=proposal_tokens(config),
        target_hidden_size=top.get_int("target_hidden_size"),
        sliding_window_non_causal=top.get_bool("sliding_window_non_causal"),
        dflash2=read_dflash2_keys(top) if algorithm is Algorithm.DFLASH2 else None,
        dspark=dspark,
        verifier_name=verifier_name,
        verifier_architectures=verifier_archs,
        raw_config=config,
        reader_findings=top.findings,
    )


def normalize(config: dict[str, Any], geometry: Geometry) -> dict[str, Any]:
    """Top-level `block_size` and `sample_from_anchor`, every proposal's K = K_max."""
    out = copy.deepcopy(config)
    out["block_size"] = geometry.block_size
    out["sample_from_anchor"] = geometry.sample_from_anchor
    spec = out.get("speculators_config")
    if isinstance(spec, dict) and isinstance(spec.get("proposal_methods"), list):
        for method in spec["proposal_methods"]:
            if isinstance(method, dict):
                method["speculative_tokens"] = geometry.max_speculative_tokens
    return out
