"""The vLLM column on every corpus file (tests/corpus/) against the installed vLLM's own code.

For each real published config: vLLM has a loader for it when its architecture (or the
`DFlash{architecture}` name vLLM's EAGLEConfig asks for) is a key of `_SPECULATIVE_DECODING_MODELS`
in `vllm/model_executor/models/registry.py`; the column must then not call it unsupported, and
where it reads the config, the mask token, captured layers and layout must be what vLLM's own
readers give (`tests/real_vllm/test_engine_table_sources.py` runs the same readers on our cases).
"""

from __future__ import annotations

import ast
from types import SimpleNamespace
from typing import Any

import pytest

from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from tests.corpus.entries import ENTRIES, PENDING_ARCHITECTURES, Entry
from tests.engine_sources import top_level
from tests.real_vllm.test_engine_table_sources import SPEC, hf_config, sources_for, vllm_readers

pytestmark = pytest.mark.real_vllm

REGISTRY = "vllm/model_executor/models/registry.py"
# Files the release has a loader for and the column calls unsupported until issue 26 item 1
# lands (strict xfails).
PENDING: dict[str, str] = {name: PENDING_ARCHITECTURES[name] for name in ()}


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
