"""`inspect --engine vllm` on the serving host: the installed vLLM's own reading of the draft.

The engine table (`dflash_tools/engine_rules/vllm_*.py`) is a hand-kept model of one release; the
vLLM installed here is the real thing. `read_installed_vllm` asks it, in a child process
(`installed_vllm_child.py`, run with this Python), what it builds from each draft: its
`get_config` (with the speculators translation), the engine config with the draft as the
speculative model (method, K, query positions, the architecture and whether the registry has it),
its mask-token and captured-layer readers, and its speculator's reading of the layout. No GPU,
no weights: the target is a small stand-in (nothing read here depends on it), and the draft is a
local folder or, for a Hub source, the config.json `inspect` already read, written to a private
temporary folder that is removed afterwards (never the Hugging Face cache; the child runs with
`HF_HUB_OFFLINE=1`). The result is an `EngineReading` per draft (`installed_reading`).

Bounded: the child has a time limit (`DEFAULT_TIMEOUT_S`), and anything vLLM raises is recorded
as text with the step that raised it. Nothing here imports vLLM; `inspect` without `--engine
vllm` never gets here.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_tools.reading.local import examples_dir
from dflash_tools.serving.installed_reading import OK, EngineReading, ReadStep, run_child

CHILD = Path(__file__).with_name("installed_vllm_child.py")

# vLLM's import alone takes 5-30 s (longer on a busy machine); each draft then a second or less.
DEFAULT_TIMEOUT_S = 300.0

# The target the engine config is built on: the draft's reads do not depend on it (the captured
# layers vLLM derives from a target's own layer count are not read here), so a small Qwen3 does.
STAND_IN_TARGET: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_hidden_layers": 8,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
}

# Bundled drafts every release serves: a step that fails on them cannot run in this environment
# (the child then reports it `unavailable` instead of blaming the draft).
CANARIES = {
    "dflash": ("zlab-dflash", 7),
    "dspark": ("dspark-native", 7),
}


# `DFLASH_TOOLS_ENGINE_READING=0`: `inspect --engine vllm` answers from the table alone, as before
# the installed engine was asked (no child process: some seconds faster).
READING_ENV = "DFLASH_TOOLS_ENGINE_READING"


def engine_reading_enabled(environ: dict[str, str] | None = None) -> bool:
    value = (os.environ if environ is None else environ).get(READING_ENV, "1")
    return value.strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class DraftRequest:
    """One draft to read: a local folder with its config.json, or the config's text (written to
    the private folder); the method and K the launch line gives (None: vLLM's own default).
    `skip_engine`: why only `get_config` is run (K unknown for a DFlash draft)."""

    id: str
    folder: Path | None = None
    config_text: str | None = None
    method: str | None = None
    num_speculative_tokens: int | None = None
    skip_engine: str = ""


@dataclass
class InstalledVllmRun:
    """What one child process reported: a reading per draft id, or why there is none."""

    readings: dict[str, EngineReading]
    failure: str = ""  # why the installed vLLM could not be asked at all
    vllm_version: str | None = None  # `vllm.__version__` as the child imported it
    plugin: Any = None  # the dflash-tools plugin's state in the child (None: not applied)
    unavailable: dict[str, str] | None = None


def read_installed_vllm(
    requests: Sequence[DraftRequest],
    *,
    version: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    python: str | None = None,
    environ: dict[str, str] | None = None,
) -> InstalledVllmRun:
    """Run the child once for every draft in `requests`. `version`: the installed release as its
    package metadata names it (what `vllm_capability.detect_vllm` reports)."""
    with tempfile.TemporaryDirectory(prefix="dflash-tools-vllm-") as scratch:
        folder = Path(scratch)  # mkdtemp: readable by this user only
        request = _write_request(folder, requests)
        document, failure = run_child(CHILD, request, folder, timeout_s=timeout_s, python=python, environ=environ)
    return _run_of(document, requests, version, failure)


def _write_request(folder: Path, requests: Sequence[DraftRequest]) -> Path:
    target = folder / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(STAND_IN_TARGET), encoding="utf-8")
    drafts = []
    for index, draft in enumerate(requests):
        model = draft.folder
        if model is None:
            model = folder / f"draft-{index}"
            model.mkdir()
            (model / "config.json").write_text(draft.config_text or "", encoding="utf-8")
        drafts.append(
            {
                "id": draft.id,
                "model": str(model),
                "method": draft.method,
                "num_speculative_tokens": draft.num_speculative_tokens,
                "skip_engine": draft.skip_engine,
            }
        )
    methods = {draft["method"] for draft in drafts if not draft["skip_engine"]}
    canaries = [
        {"id": f"canary-{method}", "name": f"example:{name}", "model": str(examples_dir() / name), "method": method,
         "num_speculative_tokens": k}
        for method, (name, k) in CANARIES.items()
        if method in methods
    ]  # fmt: skip
    request = {"target": str(target), "folder": str(folder), "canaries": canaries, "drafts": drafts}
    path = folder / "request.json"
    path.write_text(json.dumps(request), encoding="utf-8")
    return path


def _run_of(
    document: dict[str, Any] | None, requests: Sequence[DraftRequest], version: str, failure: str
) -> InstalledVllmRun:
    if document is None:
        return InstalledVllmRun({}, failure=failure or "it wrote no result")
    if document.get("import_error"):
        return InstalledVllmRun({}, failure=f"vLLM does not import here: {document['import_error']}")
    child = document.get("vllm") or {}
    readings = {}
    for draft in requests:
        found = (document.get("readings") or {}).get(draft.id)
        if found is not None:
            readings[draft.id] = reading_of(found, version, child_version=child.get("version"))
    missing = [draft.id for draft in requests if draft.id not in readings]
    if missing and not failure:
        failure = f"it returned no reading for {len(missing)} draft(s)"
    return InstalledVllmRun(
        readings,
        failure=failure if missing else "",
        vllm_version=child.get("version"),
        plugin=document.get("plugin"),
        unavailable=document.get("unavailable") or {},
    )


def reading_of(found: dict[str, Any], version: str, *, child_version: str | None = None) -> EngineReading:
    """The child's record of one draft as an `EngineReading` (the tier's captured records too)."""
    steps = tuple(ReadStep.from_dict(step) for step in found.get("steps", []))
    by_name = {step.name: step for step in steps}

    def read(step: str, key: str) -> Any:
        record = by_name.get(step)
        return record.read.get(key) if record is not None and record.status == OK else None

    architectures = read("get_config", "architectures") or []
    aux = read("draft_reads", "aux_hidden_state_layer_ids")
    # vLLM's readers give hidden-state indices (the z-lab id + 1), and its models capture a layer
    # once, in layer order (vllm/model_executor/models/llama.py: LlamaModel.forward tests
    # `idx in self.aux_hidden_state_layers`): sorted, without duplicates.
    layers = tuple(sorted({int(i) - 1 for i in aux})) if isinstance(aux, list) else None
    mask = read("draft_reads", "mask_token_id")
    sample_from_anchor = read("speculator", "sample_from_anchor")
    return EngineReading(
        engine="vllm",
        version=version,
        steps=steps,
        method=read("engine_config", "method"),
        architecture=read("engine_config", "architecture") or (architectures[0] if architectures else None),
        registered=read("engine_config", "registered"),
        num_speculative_tokens=read("engine_config", "num_speculative_tokens"),
        query_positions=read("speculator", "num_query_per_req"),
        sample_from_anchor=bool(sample_from_anchor) if sample_from_anchor is not None else None,
        mask_token_id=int(mask) if mask is not None else None,
        target_layer_ids=layers,
        extra={"vllm_module_version": child_version} if child_version and child_version != version else {},
    )
