"""The one test that pins which engine releases the tool knows.

Every other test reads the registry (`ENGINE_RULES`, `vllm_plugin_versions()`), so adding a
release as docs/adding-an-engine-release.md says changes this list and nothing else among the
tests; an "unknown release" in a test is one no table can ever be (`999.0.0`), never the next one.
"""

from __future__ import annotations

from pathlib import Path

from dflash_tools.engine_rules import ENGINE_RULES, vllm_plugin_versions

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding-an-engine-release.md"

# Every table, in the registry's order; and the vLLM releases the plugin patches.
RELEASES = ("sglang==0.5.23", "vllm==0.33.0", "vllm==0.34.0")
PLUGIN_RELEASES = ("0.33.0", "0.34.0")


def test_the_releases_are_the_ones_the_docs_describe() -> None:
    hint = (
        "the registry has other releases than this list: a release added or removed? Follow "
        "docs/adding-an-engine-release.md (it names every file), then update RELEASES here"
    )
    assert tuple(ENGINE_RULES) == RELEASES, hint
    assert vllm_plugin_versions() == PLUGIN_RELEASES, hint.replace("RELEASES", "PLUGIN_RELEASES")


def test_the_release_page_names_this_test_and_every_file_a_test_asks_for() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for named in (
        "tests/engine_rules/test_release_list.py",
        "tests/test_packaging.py",
        "pyproject.toml",
        "docs/engines.md",
        "python -m dflash_tools.engine_rules.docs > docs/engines.md",
    ):
        assert named in page, f"docs/adding-an-engine-release.md does not name {named}"
