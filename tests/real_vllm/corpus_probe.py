"""Child process of the real-vLLM tier: what the installed vLLM does with every corpus file.

Run as `python corpus_probe.py CORPUS_DIR TARGET_DIR` with `VLLM_PLUGINS=` (stock vLLM: no
plugin may patch it) and offline. For each corpus folder ("<class>/<folder>") it runs vLLM's
own load path, as `vllm serve TARGET --speculative-config '{"model": DRAFT}'` would:

1. `vllm.transformers_utils.config.get_config` on the folder (vLLM's config registry, its
   speculators translation, then transformers' AutoConfig): the config loads or it raises;
2. `EngineArgs(...).create_engine_config()` with the speculative method left to vLLM to detect
   from the draft, on the tiny bundled target, with the V2 model runner (the only one on 0.34.0;
   `VLLM_USE_V2_MODEL_RUNNER=1` on 0.33.0, set by the caller). vLLM decides the method, the
   draft's architecture after its rewrites (`hf_config_override`), and, for DSpark, the draft
   count; when it asks for `num_speculative_tokens` (DFlash, DFlash2), K = 7 is given;
3. `init_speculator`: the speculator vLLM builds, its query positions per request and its
   `sample_from_anchor` (the layout).

Prints one JSON document (tests/corpus/README.md, "What each engine does").
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

K_WHEN_ASKED = 7  # vLLM takes K from the user for DFlash and DFlash2; any K shows the layout
ASKS_FOR_K = "`num_speculative_tokens` was not provided"


def message(exc: BaseException, folder: Path) -> str:
    """The error as vLLM words it: pydantic's wrapper removed, the folder and the list of every
    architecture vLLM supports (which changes between releases) cut off."""
    text = str(exc)
    wrapped = re.search(r"Value error, (.*?) \[type=", text, re.S)
    if wrapped:
        text = wrapped.group(1)
    text = text.replace(str(folder).rstrip("/") + "/", "<draft>").replace(str(folder), "<draft>")
    text = text.split(" Supported architectures:")[0]
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:240]


def classify(error: str) -> str:
    if "are not supported for now" in error:
        return "unsupported"
    return "refused"


_group: dict[str, bool] = {}


def speculator_of(config: Any) -> Any:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed.parallel_state import init_distributed_environment, initialize_model_parallel
    from vllm.v1.worker.gpu.spec_decode import init_speculator

    with set_current_vllm_config(config):
        if not _group:
            _group["ready"] = True
            rendezvous = Path(tempfile.mkdtemp()) / "rendezvous"
            init_distributed_environment(1, 0, f"file://{rendezvous}", 0, backend="gloo")
            initialize_model_parallel(1, 1)
        return init_speculator(config, torch.device("cpu"), None)


def engine_config(target: str, draft: Path, k: int | None) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    speculative: dict[str, Any] = {"model": str(draft)}
    if k is not None:
        speculative["num_speculative_tokens"] = k
    return EngineArgs(
        model=target,
        skip_tokenizer_init=True,
        max_model_len=256,
        max_num_batched_tokens=64,
        load_format="dummy",
        enforce_eager=True,
        speculative_config=speculative,
    ).create_engine_config()


def probe(folder: Path, target: str) -> dict[str, Any]:
    from vllm.transformers_utils.config import get_config

    out: dict[str, Any] = {}
    try:
        hf = get_config(str(folder), trust_remote_code=False)
        out["config"] = {"outcome": "loads", "config_class": type(hf).__name__, "model_type": hf.model_type}
    except Exception as exc:
        # `create_engine_config` builds the draft's model config with this same call first, so
        # the engine stops here with this error (and get_config waits 2 s before each retry).
        out["config"] = {"outcome": "wont-load", "error": message(exc, folder)}
        out.update(outcome="wont-load", error=out["config"]["error"])
        return out
    k = None
    try:
        try:
            config = engine_config(target, folder, k)
        except Exception as exc:
            if ASKS_FOR_K not in str(exc):
                raise
            k = K_WHEN_ASKED
            config = engine_config(target, folder, k)
    except Exception as exc:
        error = message(exc, folder)
        out.update(outcome=classify(error), error=error, k_given=k)
        return out
    speculative = config.speculative_config
    out.update(
        method=speculative.method,
        architecture=list(speculative.draft_model_config.architectures or [None])[0],
        k_given=k,
        num_speculative_tokens=speculative.num_speculative_tokens,
    )
    try:
        speculator = speculator_of(config)
    except Exception as exc:
        out.update(outcome="refused", error=message(exc, folder))
        return out
    anchor = bool(getattr(speculator, "sample_from_anchor", False))
    out.update(
        outcome="served",
        speculator=type(speculator).__name__,
        layout="anchor-first" if anchor else "bonus",
        query_positions=speculator.num_query_per_req,
    )
    return out


def main() -> None:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    corpus, target = Path(sys.argv[1]), sys.argv[2]
    import vllm
    from vllm.transformers_utils import repo_utils

    # get_config retries a config that fails to parse after 2 s (a Hub cache refresh may hide
    # config.json for a moment); the files here are local, so only the waiting is skipped.
    repo_utils.time = SimpleNamespace(sleep=lambda seconds: None)  # type: ignore[attr-defined]

    results = {}
    for path in sorted(corpus.glob("*/*/config.json")):
        started = time.monotonic()
        results[str(path.parent.relative_to(corpus))] = probe(path.parent, target)
        print(f"corpus_probe: {time.monotonic() - started:6.1f} s {path.parent.name}", file=sys.stderr)
    print(json.dumps({"vllm": vllm.__version__, "entries": results}))


if __name__ == "__main__":
    main()
