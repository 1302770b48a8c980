"""Child process of `inspect --engine sglang` where SGLang is installed: ask SGLang's own parser.

Run by `installed_sglang.read_installed_sglang` as `python installed_sglang_child.py REQUEST
RESULT` with the Python that runs SGLang, never imported by dflash-tools itself (SGLang's config
modules import its GPU kernels). It imports nothing of dflash-tools.

For each draft, the steps SGLang 0.5.x takes when its server and workers load a draft config:

1. `get_config` (sglang/srt/utils/hf_transformers_utils.py): transformers' AutoConfig, which needs
   a `model_type`;
2. `registry`: whether `ModelRegistry` (sglang/srt/models/registry.py) has the architecture;
3. `parse`: `parse_dflash_draft_config` (sglang/srt/speculative/dflash_utils.py), its layer count,
   block size and sliding window; on `DSPARK` also `parse_dspark_draft_config`, its Markov head,
   drafts and `get_dspark_sample_from_anchor` (dspark_components/dspark_config.py).

`read_parsed` is step 3 on a config already loaded, with SGLang's functions passed in: the child
passes the installed ones, the SGLang source tier the same functions executed from the released
wheel (tests/real_sglang/test_installed_sglang.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

_MESSAGE_CHARS = 600
DFLASH_CITE = "sglang/srt/speculative/dflash_utils.py: parse_dflash_draft_config"
DSPARK_CITE = "sglang/srt/speculative/dspark_components/dspark_config.py: parse_dspark_draft_config"


def raised(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > _MESSAGE_CHARS:
        text = text[: _MESSAGE_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def step(name: str, cite: str) -> dict[str, Any]:
    return {"step": name, "from": cite, "status": "skipped", "read": {}}


def read_parsed(config: Any, path: str, api: dict[str, Any]) -> dict[str, Any]:
    """Step 3 on a loaded config. `api`: `parse_dflash_draft_config`,
    `get_dflash_attention_sliding_window_size`, `parse_dspark_draft_config`,
    `get_dspark_sample_from_anchor`, `DEFAULT_DSPARK_GAMMA`, `DEFAULT_BLOCK_SIZE` (SGLang's
    DFLASH block when none is written: `_handle_dflash`, `DFlashDraftModel.__init__`)."""
    record = step("parse", DFLASH_CITE if path != "DSPARK" else f"{DFLASH_CITE}; {DSPARK_CITE}")
    try:
        parsed = api["parse_dflash_draft_config"](draft_hf_config=config)
        parsed.require_num_layers()
        api["get_dflash_attention_sliding_window_size"](config)
        read: dict[str, Any] = {
            "path": path,
            "target_layer_ids": list(parsed.target_layer_ids) if parsed.target_layer_ids else None,
            "mask_token_id": parsed.mask_token_id,
        }
        # On DSPARK the worker parses the DSpark keys too, whatever the architecture
        # (sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py).
        if path == "DSPARK":
            dspark = api["parse_dspark_draft_config"](draft_hf_config=config)
            if not dspark.require_markov():
                raise ValueError("DSPARK needs a Markov head (markov_rank > 0): require_markov() is false")
            read["block_size"] = dspark.resolve_gamma(default=api["DEFAULT_DSPARK_GAMMA"])
            read["sample_from_anchor"] = bool(api["get_dspark_sample_from_anchor"](config))
            if dspark.target_layer_ids:
                read["target_layer_ids"] = list(dspark.target_layer_ids)
            read["mask_token_id"] = dspark.mask_token_id
        else:
            read["block_size"] = parsed.resolve_block_size(default=api["DEFAULT_BLOCK_SIZE"])
            # DFLASH drafts from positions 1.. of the block; Domino's shift_label from position 0.
            read["sample_from_anchor"] = bool(parsed.is_domino and parsed.shift_label)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        record.update(status="raised", raised=raised(exc))
        return record
    record.update(status="ok", read=read)
    return record


def installed_api() -> dict[str, Any]:
    """SGLang's own functions, from the installed package."""
    from sglang.srt.speculative import dflash_utils
    from sglang.srt.speculative.dspark_components import dspark_config

    return {
        "parse_dflash_draft_config": dflash_utils.parse_dflash_draft_config,
        "get_dflash_attention_sliding_window_size": dflash_utils.get_dflash_attention_sliding_window_size,
        "parse_dspark_draft_config": dspark_config.parse_dspark_draft_config,
        "get_dspark_sample_from_anchor": dspark_config.get_dspark_sample_from_anchor,
        "DEFAULT_DSPARK_GAMMA": dspark_config.DEFAULT_DSPARK_GAMMA,
        "DEFAULT_BLOCK_SIZE": 16,  # sglang/srt/arg_groups/speculative_hook.py: _handle_dflash
    }


def read_one(draft: dict[str, Any], api: dict[str, Any]) -> dict[str, Any]:
    steps = []
    record = step("get_config", "sglang/srt/utils/hf_transformers_utils.py: get_config")
    try:
        from sglang.srt.utils.hf_transformers_utils import get_config

        config = get_config(draft["model"], trust_remote_code=False)
        record.update(status="ok", read={"architectures": list(getattr(config, "architectures", None) or [])})
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        record.update(status="raised", raised=raised(exc))
        return {"steps": [record, {**step("registry", ""), "why": "get_config raised"},
                          {**step("parse", ""), "why": "get_config raised"}]}  # fmt: skip
    steps.append(record)
    registry = step("registry", "sglang/srt/models/registry.py: ModelRegistry.get_supported_archs")
    try:
        from sglang.srt.models.registry import ModelRegistry

        architecture = (record["read"]["architectures"] or [""])[0]
        registered = architecture in ModelRegistry.get_supported_archs()
        registry.update(status="ok", read={"architecture": architecture, "registered": registered})
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        registry.update(status="unavailable", why=raised(exc))
    steps.append(registry)
    steps.append(read_parsed(config, draft["path"], api))
    return {"steps": steps}


def main() -> None:
    request = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    out = Path(sys.argv[2])
    document: dict[str, Any] = {"sglang": None, "readings": {}}
    try:
        import sglang

        api = installed_api()
    except BaseException as exc:
        document["import_error"] = raised(exc)
        out.write_text(json.dumps(document), encoding="utf-8")
        return
    document["sglang"] = {"version": getattr(sglang, "__version__", None)}
    for draft in request["drafts"]:
        document["readings"][draft["id"]] = read_one(draft, api)
        out.write_text(json.dumps(document, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()
