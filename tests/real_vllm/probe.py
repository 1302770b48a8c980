"""Child process of the real-vLLM tier: build vLLM's own objects for each draft and report them.

Run as `python probe.py CASES.json` with or without `--register`. The plugin's patches are
process-global, so "with" and "without" each get a fresh interpreter; without `--register`
the caller also sets `VLLM_PLUGINS=` so that vLLM's own plugin loader does not apply them.
Prints one JSON document: per case, what the real objects said (or the error they raised).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def has_v1_runner() -> bool:
    """0.33.0 still ships the V1 model runner; 0.34.0 removed it."""
    import importlib.util

    return importlib.util.find_spec("vllm.v1.spec_decode.dflash") is not None


def build_config(target: str, draft: str, k: int, v2: bool) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    if v2 and not has_v1_runner():
        # 0.34.0: V2 is the only runner, and setting the variable at all only draws a warning.
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    else:
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1" if v2 else "0"
    return EngineArgs(
        model=target,
        skip_tokenizer_init=True,
        max_model_len=256,
        max_num_batched_tokens=64,
        load_format="dummy",
        enforce_eager=True,
        speculative_config={"method": "dflash", "model": draft, "num_speculative_tokens": k},
    ).create_engine_config()


def probe_case(target: str, draft: str, k: int) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {}
    try:
        config = build_config(target, draft, k, v2=True)
    except Exception as exc:
        out["v2_config_error"] = _error(exc)
        return out
    speculative = config.speculative_config
    out["architectures"] = list(speculative.draft_model_config.architectures)
    out["num_lookahead_tokens"] = config.num_lookahead_tokens
    out["max_num_active_seqs"] = config.scheduler_config.max_num_active_seqs
    out["compute_hash"] = compile_hash(speculative)
    speculator_config = getattr(speculative, "speculator_config", None)  # 0.34.0: per-method config class
    if speculator_config is not None:
        out["speculator_config"] = {
            "class": type(speculator_config).__name__,
            "num_lookahead_tokens": speculator_config.num_lookahead_tokens,
            "max_num_draft_seqs_64": speculator_config.max_num_draft_seqs(64),
            "hash_factors": [str(f) for f in speculator_config.hash_factors()],
        }

    from vllm.config import set_current_vllm_config
    from vllm.v1.worker.gpu.spec_decode import init_speculator

    with set_current_vllm_config(config):
        init_single_process_group()
        try:
            speculator = init_speculator(config, torch.device("cpu"), None)  # req_states: n-gram only
            out["speculator"] = {
                "class": type(speculator).__name__,
                "num_query_per_req": speculator.num_query_per_req,
                "sample_from_anchor": speculator.sample_from_anchor,
            }
        except Exception as exc:
            out["speculator_error"] = _error(exc)
        if "DFlash2DraftModel" in out["architectures"]:
            from vllm.model_executor.models.qwen3_dflash2 import DFlash2Qwen3DecoderLayer

            hf_config = speculative.draft_model_config.hf_config
            try:
                layer = DFlash2Qwen3DecoderLayer(config, config=hf_config, layer_idx=0, prefix="probe.layers.0")
                out["conv_block_sizes"] = [layer.attention_conv.block_size, layer.mlp_conv.block_size]
            except Exception as exc:
                out["conv_error"] = _error(exc)

        if "DFlashDraftModel" in out["architectures"] and has_v1_runner():
            # The V1 proposer given a config V1 validation never saw: the plugin's second line.
            from vllm.v1.spec_decode.dflash import DFlashProposer

            try:
                DFlashProposer(config, torch.device("cpu"))
                out["v1_proposer_direct"] = "accepted"
            except Exception as exc:
                out["v1_proposer_direct"] = _error(exc)

    try:
        v1 = build_config(target, draft, k, v2=False)
        out["v1_config"] = "accepted"
    except Exception as exc:
        out["v1_config"] = _error(exc)
        v1 = None
    finally:
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    if v1 is not None and has_v1_runner():
        from vllm.v1.spec_decode.dflash import DFlashProposer

        with set_current_vllm_config(v1):
            try:
                proposer = DFlashProposer(v1, torch.device("cpu"))
                out["v1_proposer"] = f"accepted: {type(proposer).__name__}"
            except Exception as exc:
                out["v1_proposer"] = _error(exc)
    return out


def compile_hash(speculative: Any) -> str:
    """The speculative config's share of the compile-cache key: `compute_hash()` on 0.33.0; on
    0.34.0 that method is gone and vLLM hashes `compile_factors()` (vllm/config/utils.py)."""
    if hasattr(speculative, "compute_hash"):
        return str(speculative.compute_hash())
    from vllm.config.utils import hash_factors

    return str(hash_factors(speculative.compile_factors()))


_group: dict[str, Any] = {}


def init_single_process_group() -> None:
    """A one-rank gloo group through a rendezvous file: vLLM's layers ask for the TP group.

    vLLM reads the current config while it builds the groups, so this runs inside one case.
    """
    if _group.get("ready"):
        return
    _group["ready"] = True
    from vllm.distributed.parallel_state import init_distributed_environment, initialize_model_parallel

    folder = _group["folder"]
    init_distributed_environment(1, 0, f"file://{folder}/rendezvous", 0, backend="gloo")
    initialize_model_parallel(1, 1)


def main() -> None:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    cases_file = sys.argv[1]
    cases = json.loads(Path(cases_file).read_text(encoding="utf-8"))
    state: Any = None
    if "--foreign-plugin" in sys.argv:
        # Another plugin got there first and replaced a function the dflash-tools plugin wraps:
        # the compile hash on 0.33.0, the DFlash config's lookahead on 0.34.0.
        from vllm.config.speculative import SpeculativeConfig

        if "compute_hash" in SpeculativeConfig.__dict__:
            stock_hash = SpeculativeConfig.compute_hash

            def compute_hash(self: Any) -> str:
                return stock_hash(self)

            SpeculativeConfig.compute_hash = compute_hash
        else:
            from vllm.v1.worker.gpu.spec_decode.dflash.config import DFlashSpeculatorConfig

            stock_lookahead = DFlashSpeculatorConfig.__dict__["num_lookahead_tokens"].fget

            def num_lookahead_tokens(self: Any) -> int:
                return stock_lookahead(self)

            DFlashSpeculatorConfig.num_lookahead_tokens = property(num_lookahead_tokens)
    register_error = None
    if "--register" in sys.argv:
        from dflash_tools import vllm_plugin

        try:
            vllm_plugin.register()
        except Exception as exc:  # DFLASH_TOOLS_REQUIRE_PLUGIN=1 and a refusal
            register_error = _error(exc)
    import vllm
    from vllm.config.speculative import SpeculativeConfig

    state = getattr(SpeculativeConfig, "_dflash_tools_patch", None)
    _group["folder"] = str(Path(cases_file).resolve().parent)
    if register_error is not None:
        results: dict[str, Any] = {}
    else:
        results = {name: probe_case(case["target"], case["draft"], case["k"]) for name, case in cases.items()}
    document = {
        "plugin": state,
        "register_error": register_error,
        "vllm_file": vllm.__file__,
        "vllm_version": vllm.__version__,
        "has_v1_runner": has_v1_runner(),
        "cases": results,
    }
    print(json.dumps(document))


if __name__ == "__main__":
    main()
