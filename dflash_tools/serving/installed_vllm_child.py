"""Child process of `inspect --engine vllm`: ask the installed vLLM's own code what it builds.

Run by `installed_vllm.read_installed_vllm` as `python installed_vllm_child.py REQUEST RESULT` with
the Python that runs vLLM, never imported by dflash-tools itself: it imports vLLM (which logs to
stdout, may patch itself through its plugins, and can take half a minute to import), and a
process of its own keeps all of that, and any crash, away from `inspect`. It imports nothing of
dflash-tools, so that what it reports is vLLM's alone.

For each draft (a folder with its config.json), the steps vLLM itself takes, each recorded with
what it read or what it raised:

1. `get_config` (vllm/transformers_utils/config.py): vLLM's config registry by `model_type`, the
   speculators translation (`speculators_config`), else transformers' AutoConfig;
2. `engine_config`: `EngineArgs(...).create_engine_config()` with the draft in
   `speculative_config` (the method and K the launch line gives) on a stand-in target: the
   method, K, the query positions (`num_lookahead_tokens`), the architecture vLLM resolved and
   whether its speculative-decoding registry has it. vLLM's plugins (the dflash-tools plugin
   among them) are loaded by vLLM as `vllm serve` would;
3. `draft_reads`: the mask token (`get_parallel_drafting_token_id`) and the captured target
   layers (`get_eagle3_aux_layers_from_config`), vLLM's own readers on its own objects;
4. `speculator`: `init_speculator(config, cpu)`, which reads the layout (`sample_from_anchor`)
   and the query positions per request, and refuses what the release does not serve.

Steps 2 and 4 first run on a bundled draft that every release serves (the canary): where even
that fails, the step cannot run in this environment (no GPU platform, no Triton, ...), and it is
reported `unavailable` instead of blaming the draft. Nothing needs a GPU or weights.

The result (JSON) is rewritten after every draft, so a run stopped by its time limit still says
what it found.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

# What a step records when vLLM raises: the exception's type and its first lines.
_MESSAGE_CHARS = 600
# What vLLM raises when neither the launch line nor the draft gives K.
ASKS_FOR_K = "`num_speculative_tokens` was not provided"
K_UNKNOWN = "K is unknown (vLLM needs num_speculative_tokens for this draft): pass -k K"


def raised(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > _MESSAGE_CHARS:
        text = text[: _MESSAGE_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def where_raised(exc: BaseException) -> str:
    """The innermost vLLM frame that raised (`vllm/config/speculative.py:1642`), else the last one."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        marker = f"{os.sep}vllm{os.sep}"
        if marker in frame.filename:
            return f"vllm/{frame.filename.rsplit(marker, 1)[1].replace(os.sep, '/')}:{frame.lineno}"
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


def step(name: str, cite: str) -> dict[str, Any]:
    return {"step": name, "from": cite, "status": "skipped", "read": {}}


def failed(record: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    record.update(status="raised", raised=raised(exc), at=where_raised(exc))
    return record


def read_get_config(model: str) -> tuple[dict[str, Any], Any]:
    record = step("get_config", "vllm/transformers_utils/config.py: get_config")
    try:
        from vllm.transformers_utils.config import get_config

        hf_config = get_config(model, trust_remote_code=False)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failed(record, exc), None
    record["status"] = "ok"
    record["read"] = {
        "config_class": type(hf_config).__name__,
        "model_type": getattr(hf_config, "model_type", None),
        "architectures": list(getattr(hf_config, "architectures", None) or []),
    }
    return record, hf_config


def build_engine_config(target: str, draft: dict[str, Any]) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    speculative: dict[str, Any] = {"model": draft["model"]}
    if draft.get("method"):
        speculative["method"] = draft["method"]
    if draft.get("num_speculative_tokens") is not None:
        speculative["num_speculative_tokens"] = draft["num_speculative_tokens"]
    return EngineArgs(
        model=target,
        skip_tokenizer_init=True,
        max_model_len=256,
        max_num_batched_tokens=256,
        load_format="dummy",
        enforce_eager=True,
        speculative_config=speculative,
    ).create_engine_config()


def speculative_decoding_registry() -> set[str]:
    from vllm.model_executor.models import registry

    return set(getattr(registry, "_SPECULATIVE_DECODING_MODELS", {}))


def read_engine_config(target: str, draft: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    record = step("engine_config", "vllm/engine/arg_utils.py: EngineArgs.create_engine_config")
    try:
        config = build_engine_config(target, draft)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failed(record, exc), None
    speculative = config.speculative_config
    architectures = list(speculative.draft_model_config.architectures or [])
    speculator_config = getattr(speculative, "speculator_config", None)  # 0.34.0: one class per method
    record["status"] = "ok"
    record["read"] = {
        "method": speculative.method,
        "num_speculative_tokens": speculative.num_speculative_tokens,
        "num_lookahead_tokens": config.num_lookahead_tokens,
        "architecture": architectures[0] if architectures else None,
        "registered": bool(architectures) and architectures[0] in speculative_decoding_registry(),
        "speculator_config": type(speculator_config).__name__ if speculator_config is not None else None,
    }
    return record, config


def read_draft(config: Any) -> dict[str, Any]:
    record = step(
        "draft_reads",
        "vllm/v1/worker/gpu/spec_decode/utils.py: get_parallel_drafting_token_id; "
        "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py: get_eagle3_aux_layers_from_config",
    )
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
    from vllm.v1.worker.gpu.spec_decode.utils import get_parallel_drafting_token_id

    speculative = config.speculative_config
    try:
        layers = get_eagle3_aux_layers_from_config(speculative)
        record["read"]["aux_hidden_state_layer_ids"] = list(layers) if layers is not None else None
        record["read"]["mask_token_id"] = get_parallel_drafting_token_id(speculative.draft_model_config.hf_config)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return failed(record, exc)
    record["status"] = "ok"
    return record


_GROUP: dict[str, Any] = {}


def _process_group(config: Any, folder: str) -> None:
    """One gloo rank through a rendezvous file: vLLM's layers ask for the TP group."""
    if _GROUP.get("ready"):
        return
    from vllm.distributed.parallel_state import init_distributed_environment, initialize_model_parallel

    init_distributed_environment(1, 0, f"file://{folder}/rendezvous", 0, backend="gloo")
    initialize_model_parallel(1, 1)
    _GROUP["ready"] = True


def read_speculator(config: Any, folder: str) -> dict[str, Any]:
    record = step("speculator", "vllm/v1/worker/gpu/spec_decode/__init__.py: init_speculator")
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.v1.worker.gpu.spec_decode import init_speculator

    with set_current_vllm_config(config):
        try:
            _process_group(config, folder)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            record.update(status="unavailable", why=raised(exc))
            return record
        try:
            speculator = init_speculator(config, torch.device("cpu"), None)  # req_states: n-gram only
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return failed(record, exc)
    record["status"] = "ok"
    record["read"] = {
        "class": type(speculator).__name__,
        "num_query_per_req": getattr(speculator, "num_query_per_req", None),
        "sample_from_anchor": getattr(speculator, "sample_from_anchor", None),
    }
    return record


def read_one(request: dict[str, Any], draft: dict[str, Any], unavailable: dict[str, str]) -> dict[str, Any]:
    """Every step for one draft; a step after one that raised is skipped."""
    steps: list[dict[str, Any]] = []
    record, _hf_config = read_get_config(draft["model"])
    steps.append(record)
    names = ("engine_config", "draft_reads", "speculator")
    if record["status"] != "ok" or draft.get("skip_engine"):
        why = draft.get("skip_engine") or "get_config raised"
        steps += [{**step(name, ""), "why": why} for name in names]
        return {"steps": steps}
    if "engine_config" in unavailable:
        steps += [{**step(name, ""), "status": "unavailable", "why": unavailable["engine_config"]} for name in names]
        return {"steps": steps}
    record, config = read_engine_config(request["target"], draft)
    if config is None and draft.get("num_speculative_tokens") is None and ASKS_FOR_K in record.get("raised", ""):
        # Not the draft's fault: the launch line lacks K, and this draft carries none vLLM reads
        # (no `n_predict`: vllm/v1/worker/gpu/spec_decode/speculator_config.py,
        # resolve_num_speculative_tokens); as a DFlash draft without K, only get_config is read.
        record = {**step("engine_config", record["from"]), "why": K_UNKNOWN}
        steps.append(record)
        steps += [{**step(name, ""), "why": K_UNKNOWN} for name in names[1:]]
        return {"steps": steps}
    steps.append(record)
    if config is None:
        steps += [{**step(name, ""), "why": "engine_config raised"} for name in names[1:]]
        return {"steps": steps}
    steps.append(read_draft(config))
    if "speculator" in unavailable:
        steps.append({**step("speculator", ""), "status": "unavailable", "why": unavailable["speculator"]})
    else:
        steps.append(read_speculator(config, request["folder"]))
    return {"steps": steps}


def canary_checks(request: dict[str, Any]) -> dict[str, str]:
    """Steps that fail on a draft every release serves cannot run here: step -> why."""
    unavailable: dict[str, str] = {}
    for canary in request.get("canaries", []):
        result = read_one(request, canary, {})
        for record in result["steps"]:
            if record["status"] in ("raised", "unavailable") and record["step"] in ("engine_config", "speculator"):
                why = record.get("raised") or record.get("why") or ""
                unavailable.setdefault(record["step"], f"it fails on {canary['name']} too ({why})")
    return unavailable


def plugin_state() -> Any:
    """What the dflash-tools plugin did in this process, as it records it on vLLM's class."""
    try:
        from vllm.config.speculative import SpeculativeConfig
    except BaseException:
        return None
    return getattr(SpeculativeConfig, "_dflash_tools_patch", None)


def write(path: Path, document: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(document, default=str), encoding="utf-8")
    partial.replace(path)


def main() -> None:
    request = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    out = Path(sys.argv[2])
    document: dict[str, Any] = {"vllm": None, "readings": {}, "unavailable": {}}
    try:
        import vllm
    except BaseException as exc:
        document["import_error"] = raised(exc)
        write(out, document)
        return
    document["vllm"] = {"version": getattr(vllm, "__version__", None), "file": getattr(vllm, "__file__", None)}
    write(out, document)
    unavailable = canary_checks(request)
    document["unavailable"] = unavailable
    document["plugin"] = plugin_state()
    write(out, document)
    for draft in request["drafts"]:
        document["readings"][draft["id"]] = read_one(request, draft, unavailable)
        write(out, document)


if __name__ == "__main__":
    main()
