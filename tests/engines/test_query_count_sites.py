"""docs/tier-vllm.md lists every place each supported vLLM sizes draft work from the query count.

The rows live in the engine tables (`dflash_tools/engines/vllm_*.py`); the page must show each
one, under its release's heading, with the file it comes from and what the plugin does there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_tools.engines import get_rules, vllm_plugin_versions

DOC = Path(__file__).resolve().parents[2] / "docs" / "tier-vllm.md"


def section(text: str, version: str) -> str:
    start = text.index(f"### vLLM {version}\n")
    end = text.find("\n## ", start)
    following = text.find("\n### ", start + 1)
    ends = [e for e in (end, following) if e != -1]
    return text[start : min(ends) if ends else len(text)]


@pytest.mark.parametrize("version", vllm_plugin_versions())
def test_every_query_count_site_is_documented(version: str) -> None:
    rules = get_rules(f"vllm=={version}")
    assert rules is not None and rules.query_count_sites
    rows = section(DOC.read_text(encoding="utf-8"), version)
    for site in rules.query_count_sites:
        assert f"| {site.name} | `{site.cite}` | {site.stock} | {site.plugin} |" in rows, site.name
    # Nothing documented that the table does not hold: one row per site, plus the header.
    assert rows.count("\n| ") == len(rules.query_count_sites) + 2


def test_the_sites_cover_what_the_plugin_changes() -> None:
    """Lookahead, budget, queries, CUDA-graph lengths, warm-up, DFlash2 block, hash: on each release."""
    for version in vllm_plugin_versions():
        rules = get_rules(f"vllm=={version}")
        assert rules is not None
        names = " / ".join(site.name for site in rules.query_count_sites)
        for word in ("lookahead", "budget", "query positions", "CUDA-graph", "warm-up", "convolution", "compile"):
            assert word in names, (version, word)
        assert all(site.plugin for site in rules.query_count_sites)
