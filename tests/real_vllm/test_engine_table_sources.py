"""The vLLM tables (`dflash_tools/engines/vllm_0_3*.py`) against the released vLLM sources.

vLLM 0.33.0 is the tier's installed one; 0.34.0 is read from `DFLASH_TOOLS_VLLM_034_SOURCES`
(its wheel, or the wheel unpacked) when that is set: the tier does not download the 240 MB
wheel on every run. Every cited file and function must exist, and every key location a rule
names must be a string that the cited files read.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dflash_tools.engines import ENGINE_RULES
from dflash_tools.vllm_plugin.sources import installed_package_root
from tests.engine_sources import Sources, cite_problems, function_source, key_problems

pytestmark = pytest.mark.real_vllm


def sources_for(spec: str) -> Sources:
    if spec == "vllm==0.33.0":
        root = installed_package_root("vllm")
        assert root is not None, "the tier installs vLLM 0.33.0"
        return Sources(root)
    given = os.environ.get("DFLASH_TOOLS_VLLM_034_SOURCES")
    if not given:
        pytest.skip("set DFLASH_TOOLS_VLLM_034_SOURCES to vLLM 0.34.0's wheel (or the wheel unpacked)")
    return Sources(Path(given))


@pytest.mark.parametrize("spec", ["vllm==0.33.0", "vllm==0.34.0"])
def test_table_cites_what_the_release_has(spec: str) -> None:
    sources = sources_for(spec)
    rules = ENGINE_RULES[spec]
    assert cite_problems(rules, sources) == []
    assert key_problems(rules, sources) == []


@pytest.mark.parametrize("spec", ["vllm==0.33.0", "vllm==0.34.0"])
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
