"""Each supported vLLM's engine table lists every place it sizes draft work from the query count.

docs/engines.md renders these rows (generated, kept equal by tests/engine_rules/test_engine_tables.py);
docs/tier-vllm.md points at them.
"""

from __future__ import annotations

import pytest

from dflash_tools.engine_rules import get_rules, vllm_plugin_versions

WHAT = ("lookahead", "budget", "query positions", "CUDA-graph", "warm-up", "convolution", "compile")


@pytest.mark.parametrize("version", vllm_plugin_versions())
def test_the_sites_cover_what_the_plugin_changes(version: str) -> None:
    """Lookahead, budget, queries, CUDA-graph lengths, warm-up, DFlash2 block, hash: on each release."""
    rules = get_rules(f"vllm=={version}")
    assert rules is not None
    names = [site.name for site in rules.query_count_sites]
    assert [word for word in WHAT if not any(word in name for name in names)] == []
    assert len(names) == len(WHAT)
    for site in rules.query_count_sites:
        assert site.cite.startswith("vllm/") and site.stock and site.plugin, site
