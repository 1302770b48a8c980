"""Every corpus file (tests/corpus/) through the installed vLLM's own code.

First, what vLLM does with each file at load, re-measured and compared with the record
(`tests/corpus/engine_outcomes.json`, which the default suite compares with the tool's vLLM
column): `corpus_probe.py`, in a child process with no plugin, runs `get_config`, builds the
engine config with the speculative method left to vLLM and builds the speculator; and
transformers' AutoConfig of this environment's pinned release on every file
(`tests/corpus/autoconfig_probe.py`). With `DFLASH_TOOLS_RECORD_OUTCOMES=1` both write the record
instead (tests/corpus/README.md).

Then, for each file vLLM loads: vLLM has a loader for it when its architecture (or the
`DFlash{architecture}` name vLLM's EAGLEConfig asks for) is a key of `_SPECULATIVE_DECODING_MODELS`
in `vllm/model_executor/models/registry.py`; the column must then not call it unsupported, and
where it reads the config, the mask token, captured layers and layout must be what vLLM's own
readers give (`tests/real_vllm/test_engine_table_sources.py` runs the same readers on our cases).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from tests.corpus import outcomes
from tests.corpus.entries import CORPUS, ENTRIES, PENDING_ARCHITECTURES, Entry
from tests.engine_sources import top_level
from tests.real_vllm.conftest import HAS_V1
from tests.real_vllm.test_engine_table_sources import SPEC, hf_config, sources_for, vllm_readers

pytestmark = pytest.mark.real_vllm

PROBE = Path(__file__).parent / "corpus_probe.py"
AUTOCONFIG_PROBE = CORPUS / "autoconfig_probe.py"
PROBE_SOURCE = (
    f"ran vLLM {SPEC.split('==')[1]} in its tier (tests/real_vllm/corpus_probe.py): "
    "vllm/transformers_utils/config.py get_config; EngineArgs.create_engine_config with the method left to vLLM; "
    "vllm/v1/worker/gpu/spec_decode init_speculator (V2 model runner)"
)


def child_environment() -> dict[str, str]:
    """Stock vLLM: no dflash-tools plugin (vLLM's plugin loader would apply it), offline, CPU."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH_TOOLS_", "VLLM_"))}
    environment.update(VLLM_TARGET_DEVICE="cpu", VLLM_PLUGINS="", HF_HUB_OFFLINE="1")
    if HAS_V1:
        environment["VLLM_USE_V2_MODEL_RUNNER"] = "1"  # 0.33.0: DSpark and DFlash2 need it; 0.34.0 has no other
    return environment


def run_child(command: list[str], cwd: Path) -> dict[str, Any]:
    completed = subprocess.run(
        command, capture_output=True, text=True, env=child_environment(), cwd=cwd, timeout=900, check=False
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    document: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return document


@pytest.fixture(scope="module")
def measured_vllm(vllm_root: Path, target: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("corpus-probe")
    document = run_child([sys.executable, str(PROBE), str(CORPUS), target], folder)
    assert document["vllm"] == SPEC.split("==")[1]
    return {entry: {**outcome, "source": PROBE_SOURCE} for entry, outcome in document["entries"].items()}


def test_vllm_does_with_every_corpus_file_what_the_record_says(measured_vllm: dict[str, Any]) -> None:
    assert set(measured_vllm) == {entry.dir for entry in ENTRIES}
    differs = outcomes.check_or_record(SPEC, measured_vllm)
    assert not differs, outcomes.explain(differs)


def test_transformers_autoconfig_does_with_every_corpus_file_what_the_record_says(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """This environment's transformers (the release this vLLM tier pins), without vLLM imported."""
    release = f"transformers=={version('transformers')}"
    document = run_child([sys.executable, "-I", str(AUTOCONFIG_PROBE), str(CORPUS)], tmp_path_factory.mktemp("ac"))
    assert f"transformers=={document['transformers']}" == release
    # Both vLLM tiers pin this release and check the same record: the source names neither.
    source = (
        f"ran AutoConfig.from_pretrained of {release} (tests/corpus/autoconfig_probe.py) in a vLLM tier environment"
    )
    measured = {entry: {**outcome, "source": source} for entry, outcome in document["entries"].items()}
    differs = outcomes.check_or_record(release, measured)
    assert not differs, outcomes.explain(differs)


REGISTRY = "vllm/model_executor/models/registry.py"
# Files the release has a loader for and the column calls unsupported until issue 26 item 1
# lands (strict xfails).
PENDING: dict[str, str] = {
    **{name: PENDING_ARCHITECTURES[name] for name in ()},
    **{name: reason for (name, release), reason in outcomes.TOOL_BUGS.items() if release == SPEC},
}


@pytest.fixture(scope="module")
def registry() -> set[str]:
    node = top_level(sources_for(SPEC).tree(REGISTRY))["_SPECULATIVE_DECODING_MODELS"]
    assert isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
    models = ast.literal_eval(node.value)
    assert isinstance(models, dict) and "DFlashDraftModel" in models
    return set(models)


@pytest.fixture(scope="module")
def readers() -> dict[str, Any]:
    return vllm_readers(sources_for(SPEC))


def loaded_by_vllm(architecture: str, registry: set[str]) -> bool:
    return architecture in registry or f"DFlash{architecture}" in registry


def corpus_params() -> list[Any]:
    out = []
    for entry in ENTRIES:
        reason = PENDING.get(entry.dir)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(entry, id=entry.dir, marks=marks))
    return out


@pytest.mark.parametrize("entry", corpus_params())
def test_the_vllm_column_agrees_with_vllm_on_the_corpus(
    entry: Entry, registry: set[str], readers: dict[str, Any]
) -> None:
    if outcomes.recorded(SPEC)[entry.dir]["config"]["outcome"] != "loads":
        pytest.skip("vLLM's get_config raises: tests/corpus/test_engine_outcomes.py checks the column's outcome")
    config = entry.config()
    architecture = (config.get("architectures") or [""])[0]
    view = inspect_for_engines(load_checkpoint(str(entry.folder)), [SPEC]).extra["engines"][SPEC]
    if not loaded_by_vllm(architecture, registry):
        # wont-load: it stops earlier, at config load (test_generated_tables.py checks that verdict).
        assert view["outcome"] in ("refused", "unsupported", "wont-load"), (architecture, view["outcome"])
        return
    assert view["outcome"] != "unsupported", (architecture, view["refusal"])
    if not view["reads_format"] or view["path"] is None:
        return
    hf = hf_config(readers, config)
    try:
        mask = readers["get_parallel_drafting_token_id"](hf)
    except ValueError:
        mask = None
        assert view["outcome"] == "refused"
    assert view["mask_token_id"] == mask
    captured = readers["get_eagle3_aux_layers_from_config"](
        SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=hf))
    )
    if captured is None:
        assert view["target_layer_ids_source"] == "derived"
    else:
        assert view["target_layer_ids"] == sorted({i - 1 for i in captured})
    # What inspect says the draft was trained with is what vLLM reads from the file. Every
    # published file reads; a partial copy may lack decoder fields (DFT006) and read as nothing.
    trained = inspect_checkpoint(str(entry.folder)).description
    assert trained is not None or entry.klass != "published", entry.dir
    if trained is not None and captured is not None:
        assert sorted(set(trained.target_layer_ids)) == sorted({i - 1 for i in captured})
    if trained is not None and mask is not None:
        assert trained.mask_token_id == mask
    if view["path"] == "dflash":
        anchor = bool((getattr(hf, "dflash_config", None) or {}).get("sample_from_anchor", False))
    else:
        anchor = bool(getattr(hf, "sample_from_anchor", True))
    assert view["layout"] == ("anchor-first" if anchor else "bonus")


def test_every_corpus_architecture_is_known_to_the_release_or_refused(registry: set[str]) -> None:
    """The corpus is a fair test: most of its architectures are ones this release loads."""
    architectures = {entry.architecture for entry in ENTRIES if entry.architecture}
    loaded = {a for a in architectures if loaded_by_vllm(a, registry)}
    assert {"DFlashDraftModel", "DFlash2DraftModel", "Qwen3DSparkModel", "MuseGlimmerAssistantModel"} <= loaded
