"""The vLLM tables (`dflash_tools/engine_rules/vllm_0_3*.py`) against the released vLLM sources.

Each tier checks its own release (`bash .ci/tier-vllm.sh 0.33.0` / `0.34.0`), read from the
installed package. Every cited file and function must exist, and every key location a rule
names must be a string that the cited files read.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dflash_tools.engine_rules import ENGINE_RULES, VLLM_V2_ENV, DraftTrait
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from dflash_tools.vllm_plugin.sources import installed_package_root
from tests.engine_cases import case_folders
from tests.engine_sources import Sources, cite_problems, extract, function_source, key_problems
from tests.real_vllm.conftest import VLLM_VERSION

pytestmark = pytest.mark.real_vllm


SPEC = f"vllm=={VLLM_VERSION}"  # the release this tier installs


def sources_for(spec: str) -> Sources:
    assert spec == SPEC
    root = installed_package_root("vllm")
    assert root is not None, f"the tier installs vLLM {VLLM_VERSION}"
    return Sources(root)


@pytest.mark.parametrize("spec", [SPEC])
def test_table_cites_what_the_release_has(spec: str) -> None:
    sources = sources_for(spec)
    rules = ENGINE_RULES[spec]
    assert cite_problems(rules, sources) == []
    assert key_problems(rules, sources) == []


@pytest.mark.parametrize("spec", [SPEC])
def test_layout_keys_where_the_table_says(spec: str) -> None:
    sources = sources_for(spec)
    speculator = function_source(
        sources, "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py", "DFlashSpeculator.__init__"
    )
    assert 'dflash_config.get("sample_from_anchor", False)' in speculator
    dspark = function_source(
        sources, "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py", "DSparkSpeculator.__init__"
    )
    assert '"sample_from_anchor", True' in dspark
    translated = function_source(sources, "vllm/transformers_utils/configs/speculators/algos.py", "update_dspark")
    assert 'config_dict.get("sample_from_anchor", False)' in translated


def vllm_readers(sources: Sources) -> dict[str, Any]:
    """vLLM's own readers of the draft config, executed from its source: the speculators
    translation (`algos.py`), the mask token and the captured layers."""
    namespace: dict[str, Any] = {"cast": lambda _type, value: value}
    extract(
        sources,
        "vllm/transformers_utils/configs/speculators/algos.py",
        ["SUPPORTED_SPECULATORS_TYPES", "register_speculator", "update_dflash", "update_dflash2", "update_dspark"],
        namespace,
    )
    extract(sources, "vllm/v1/worker/gpu/spec_decode/utils.py", ["get_parallel_drafting_token_id"], namespace)
    extract(
        sources,
        "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py",
        ["get_eagle3_aux_layers_from_config"],
        namespace,
    )
    return namespace


def hf_config(readers: dict[str, Any], config: dict[str, Any]) -> SimpleNamespace:
    """The draft's hf_config as vLLM sees it: a speculators config translated by vLLM's updater
    for its type; any other config as its keys (vLLM's EAGLEConfig copies them onto itself)."""
    kind = config.get("speculators_model_type")
    if kind is None:
        return SimpleNamespace(**config)
    base = dict(config.get("transformer_layer_config") or {})
    readers[f"update_{kind}"](config, base)
    return SimpleNamespace(**base)


@pytest.mark.parametrize("spec", [SPEC])
def test_the_vllm_column_agrees_with_vllms_own_readers(spec: str, tmp_path: Path) -> None:
    readers = vllm_readers(sources_for(spec))
    checked = 0
    for name, folder in case_folders(tmp_path).items():
        config = json.loads((folder / "config.json").read_text())
        view = inspect_for_engines(load_checkpoint(str(folder)), [spec]).extra["engines"][spec]
        if not view["reads_format"] or view["path"] is None:
            continue
        hf = hf_config(readers, config)
        try:
            mask = readers["get_parallel_drafting_token_id"](hf)
        except ValueError:
            mask = None
            assert view["outcome"] == "refused", name
        assert view["mask_token_id"] == mask, name
        captured = readers["get_eagle3_aux_layers_from_config"](
            SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=hf))
        )
        if captured is None:
            assert view["target_layer_ids_source"] == "derived", name
        else:
            assert view["target_layer_ids"] == sorted({i - 1 for i in captured}), name
        if view["path"] == "dflash":
            anchor = bool((getattr(hf, "dflash_config", None) or {}).get("sample_from_anchor", False))
        else:
            anchor = bool(getattr(hf, "sample_from_anchor", True))
        assert view["layout"] == ("anchor-first" if anchor else "bonus"), name
        checked += 1
    assert checked > 30


@pytest.mark.parametrize("spec", [SPEC])
def test_what_only_v2_serves_is_what_the_releases_v1_refuses(spec: str) -> None:
    """The table's runner rules (docs/engines.md, "Drafts only the V2 model runner serves") against
    the release: a release lists them exactly when it ships V1, each phrase V1 refuses with is in
    the cited function, the anchor-first rule's V1 drafter hard-codes 1 + K query positions, and the
    release reads the variable its launch line sets."""
    sources = sources_for(spec)
    rules = ENGINE_RULES[spec]
    ships_v1 = sources.read("vllm/v1/worker/gpu_model_runner.py") is not None
    assert rules.has_v1_runner is ships_v1
    assert bool(rules.v2_only) is ships_v1
    for rule in rules.v2_only:
        path, _, name = rule.cite.split(";")[0].partition(": ")
        body = function_source(sources, path, name)
        if rule.v1_refuses:
            assert f'"{rule.v1_refuses}"' in body, rule
        if rule.trait is DraftTrait.ANCHOR_FIRST:
            assert "num_query_per_req = 1 + self.num_speculative_tokens" in body, rule
    if ships_v1:
        assert [flag.name for flag in rules.flags("env")] == [f"{VLLM_V2_ENV}=1"]
        assert f'"{VLLM_V2_ENV}"' in (sources.read("vllm/envs.py") or "")
    else:
        assert rules.flags("env") == ()
