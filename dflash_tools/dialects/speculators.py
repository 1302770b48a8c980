"""vllm-project/speculators dialects: `speculators_model_type` dflash, dflash2, dspark.

Algorithm keys are flat at the top level, the decoder config is nested in
`transformer_layer_config`, K lives only in `speculators_config.proposal_methods[*]`, and
`aux_hidden_state_layer_ids` are `hidden_states` indices: z-lab id + 1.
"""

from __future__ import annotations

import copy
from typing import Any

from dflash_tools.dialects._common import (
    DFLASH2_DEFAULTS,
    SLIDING_WINDOW_NON_CAUSAL_DEFAULT,
    ConfigInvalid,
    ConfigView,
    block_size_values,
    copy_config,
    layout_values,
    merge_ordered,
    read_decoder,
    read_dflash2_keys,
    sliding_window_non_causal,
    write_layout,
)
from dflash_tools.draft.description import Algorithm, Dialect, DraftDescription, DSparkSpec
from dflash_tools.draft.dialect_spec import (
    Causality,
    DialectKeys,
    DialectSpec,
    LayoutKey,
    ProposalCount,
    TrainerRecord,
)
from dflash_tools.draft.geometry import Geometry
from dflash_tools.findings import make_finding

SPEC = DialectSpec(
    family="speculators",
    title="speculators",
    markers="speculators_model_type (dflash, dflash2, dspark) with speculators_config",
    # The class defaults of sample_from_anchor (speculators/models/dflash/config.py,
    # speculators/models/dspark/config.py).
    dialects=(
        Dialect("speculators-dflash", Algorithm.DFLASH),
        Dialect("speculators-dflash2", Algorithm.DFLASH2),
        Dialect("speculators-dspark", Algorithm.DSPARK, sample_from_anchor_default=True),
    ),
    keys=DialectKeys(
        # speculators' loader falls back to top-level decoder keys.
        decoder=("transformer_layer_config.", ""),
        algorithm=("",),
        block_size=("block_size",),
        layout=(LayoutKey("sample_from_anchor"), LayoutKey("query_zero_predicts_next"), LayoutKey("shift_label")),
        speculative_tokens="speculators_config.proposal_methods[*].speculative_tokens",
        proposal_count=ProposalCount.CHECKED,
    ),
    causality=Causality.SLIDING_WINDOW_NON_CAUSAL,
    format_keys=("speculators_model_type",),
    block_size_default=8,  # the config class default (speculators/models/dflash/config.py)
    # speculators added the flag in PR #760 (2026-07-13) and writes it into every save since
    # (speculators/models/dflash/core.py, _build_base_config_kwargs); before it, every algorithm
    # trained in DFlash's bonus layout (DSpark too: PR #677). The class default of the DSpark
    # config (true) is not what such a file was trained with.
    undeclared_layout=TrainerRecord(
        False,
        "speculators saves have written sample_from_anchor since PR #760 (2026-07-13); one without it is older, "
        "from when speculators trained every algorithm bonus-anchor",
        version_key="speculators_version",
    ),
    # speculators PR #456 (2026-04-21) made the count K_max; DFlash saves before it wrote B. DFlash2
    # and DSpark came later: their saves always wrote K_max (B - 1 before the flag existed).
    block_size_in_proposal_count={
        Algorithm.DFLASH: "speculators DFlash saves before April 2026 (PR #456) stored block_size there by mistake"
    },
    layer_id_offset=1,
    lowest_layer_id=-1,  # aux id 0, the embedding output: DFT033 says so
    one_causal_flag_when_served=True,
    window_trained_from_anchor=True,
    loaded_by_architecture=False,
    unread_hints={
        Algorithm.DFLASH: "convert it to the z-lab form it reads: `dflash-tools convert SRC -o OUT --to zlab`",
        Algorithm.DFLASH2: "convert it to the z-lab form it reads: `dflash-tools convert SRC -o OUT --to zlab`",
        Algorithm.DSPARK: "serve it with vLLM, which translates speculators DSpark configs",
    },
)
SPECULATORS_DFLASH, SPECULATORS_DFLASH2, SPECULATORS_DSPARK = SPEC.dialects
_BY_TYPE = {dialect.algorithm.value: dialect for dialect in SPEC.dialects}
# speculators' config class default: a file without the key is read as a 32000-token draft vocab.
DEFAULT_DRAFT_VOCAB_SIZE = 32000


def detect(config: dict[str, Any]) -> Dialect | None:
    kind = config.get("speculators_model_type")
    if isinstance(kind, str) and kind in _BY_TYPE:
        return _BY_TYPE[kind]
    return None


def proposal_tokens(config: dict[str, Any]) -> list[Any] | None:
    spec = config.get("speculators_config")
    methods = spec.get("proposal_methods") if isinstance(spec, dict) else None
    if not isinstance(methods, list):
        return None
    return [m.get("speculative_tokens") for m in methods if isinstance(m, dict) and "speculative_tokens" in m]


def read(config: dict[str, Any], dialect: Dialect) -> DraftDescription:
    algorithm = dialect.algorithm
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
        block_size_values=block_size_values(config, SPEC),
        sample_from_anchor_values=layout_values(config, SPEC),
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
    out = copy_config(config)
    out["block_size"] = geometry.block_size
    write_layout(out, SPEC, geometry.sample_from_anchor, ("sample_from_anchor",))
    spec = out.get("speculators_config")
    if isinstance(spec, dict) and isinstance(spec.get("proposal_methods"), list):
        for method in spec["proposal_methods"]:
            if isinstance(method, dict):
                method["speculative_tokens"] = geometry.max_speculative_tokens
    return out


# --------------------------------------------------------------------------------------------
# Writer: render a description (from any DFlash / DFlash2 dialect) as a speculators config
# --------------------------------------------------------------------------------------------

_ARCHITECTURE = {Algorithm.DFLASH: "DFlashDraftModel", Algorithm.DFLASH2: "DFlash2DraftModel"}
_CONV_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
# The families this writer translates to and from without loss (docs/convert.md); a pair is
# declared on either side.
TRANSLATES_WITH = frozenset({"zlab"})


def cannot_render(desc: DraftDescription) -> str | None:
    if desc.algorithm not in _ARCHITECTURE:
        return f"speculators conversion supports DFlash and DFlash2, not {desc.algorithm.value}"
    return None


# Top-level keys that belong to speculators itself (not the nested decoder config).
SPECULATORS_KEYS = frozenset(
    {
        "architectures",
        "auto_map",
        "aux_hidden_state_layer_ids",
        "block_size",
        "draft_vocab_size",
        "dtype",
        "mask_token_id",
        "sample_from_anchor",
        "sliding_window_non_causal",
        "speculators_config",
        "speculators_model_type",
        "speculators_version",
        "target_hidden_size",
        "transformer_layer_config",
        "transformers_version",
        *_CONV_KEYS,
    }
)


def decoder_config(config: dict[str, Any]) -> dict[str, Any]:
    """The nested decoder config (or, for a file without one, the flat decoder keys)."""
    nested = config.get("transformer_layer_config")
    if isinstance(nested, dict):
        return dict(nested)
    return {key: value for key, value in config.items() if key not in SPECULATORS_KEYS}


def render(
    desc: DraftDescription,
    geometry: Geometry,
    *,
    decoder: dict[str, Any],
    base_config: dict[str, Any] | None = None,
    verifier: dict[str, Any] | None = None,
    num_target_layers: int | None = None,
) -> dict[str, Any]:
    """A normalized speculators config for a DFlash / DFlash2 description read from any dialect.

    Layer ids become `hidden_states` indices (z-lab id + 1); the decoder fields are nested in
    `transformer_layer_config`; `verifier` ({"name_or_path", "architectures"}) is recorded in
    `speculators_config`. `base_config` is an earlier speculators form of the same draft whose
    key order and undecided keys (auto_map, versions, proposal settings) are kept. speculators
    has no key for the target's layer count: `num_target_layers` is ignored.
    `decoder` is the source dialect's decoder config (`dialects.render` passes it).
    """
    del num_target_layers
    if desc.algorithm not in _ARCHITECTURE:
        raise ValueError(f"speculators conversion supports DFlash and DFlash2, not {desc.algorithm.value}")
    raw = desc.raw_config
    kind = desc.algorithm.value
    # z-lab `is_causal: false` makes every layer bidirectional; without it sliding layers are
    # causal and full layers bidirectional, which is speculators' `false` (docs/rules.md, "Decisions").
    if desc.spec.causality is Causality.SLIDING_WINDOW_NON_CAUSAL:
        non_causal = sliding_window_non_causal(desc)
    else:
        non_causal = desc.is_causal is False
    base = base_config
    base_keys = set(base) if base is not None else set()

    def wanted(key: str, value: Any, default: Any) -> bool:
        # With a base, a default the base left implicit stays implicit (exact round trips).
        return base is None or key in base_keys or value != default

    top: dict[str, Any] = {
        "architectures": [_ARCHITECTURE[desc.algorithm]],
        "aux_hidden_state_layer_ids": [i + 1 for i in desc.target_layer_ids],
        "block_size": geometry.block_size,
    }
    if desc.dflash2 is not None:
        for key in _CONV_KEYS:
            value = getattr(desc.dflash2, key)
            if wanted(key, value, DFLASH2_DEFAULTS[key]):
                top[key] = value
    if wanted("draft_vocab_size", desc.draft_vocab_size, DEFAULT_DRAFT_VOCAB_SIZE):
        top["draft_vocab_size"] = desc.draft_vocab_size
    if "dtype" in raw:
        top["dtype"] = raw["dtype"]
    top["mask_token_id"] = desc.mask_token_id
    top["sample_from_anchor"] = geometry.sample_from_anchor
    if wanted("sliding_window_non_causal", non_causal, SLIDING_WINDOW_NON_CAUSAL_DEFAULT[desc.algorithm]):
        top["sliding_window_non_causal"] = non_causal
    top["speculators_model_type"] = kind
    if wanted("target_hidden_size", desc.target_hidden_size, None):
        top["target_hidden_size"] = desc.target_hidden_size
    top["transformer_layer_config"] = decoder
    if "transformers_version" in raw:
        top["transformers_version"] = raw["transformers_version"]

    if base is None:
        top["speculators_config"] = {
            "algorithm": kind,
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {
                    "accept_tolerance": 0.0,
                    "proposal_type": "greedy",
                    "speculative_tokens": geometry.max_speculative_tokens,
                    "verifier_accept_k": 1,
                }
            ],
            "verifier": dict(verifier) if verifier else {"architectures": [], "name_or_path": None},
        }
        # speculators writes its configs with sorted keys.
        return normalize(dict(sorted(top.items())), geometry)

    base_spec = base.get("speculators_config")
    spec: dict[str, Any] = copy.deepcopy(base_spec) if isinstance(base_spec, dict) else {}
    spec["algorithm"] = kind
    if verifier:
        spec["verifier"] = dict(verifier)
    top["speculators_config"] = spec
    base_decoder = base.get("transformer_layer_config")
    if isinstance(base_decoder, dict):
        top["transformer_layer_config"] = merge_ordered(base_decoder, decoder, set(base_decoder) | set(decoder))
    owned = (SPECULATORS_KEYS - {"auto_map", "speculators_version"}) | set(top)
    return normalize(merge_ordered(base, top, set(owned)), geometry)
