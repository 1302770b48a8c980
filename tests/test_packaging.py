"""What `pip install 'dflash-tools[vllm]'` resolves to is a vLLM the plugin patches.

The extra is read from pyproject.toml and matched with `packaging` (pip's own version logic)
against vLLM's published releases as of 0.34.0 and the next ones that could appear.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from dflash_tools.vllm_plugin.fingerprints import SUPPORTED_VERSIONS

ROOT = Path(__file__).resolve().parents[1]
# vLLM on PyPI up to today, then releases that do not exist yet but a resolver would take.
PUBLISHED = ["0.31.0", "0.32.0", "0.33.0", "0.34.0"]
FUTURE = ["0.33.1", "0.34.1", "0.35.0", "1.0.0"]


def vllm_extra() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (requirement,) = [Requirement(r) for r in project["optional-dependencies"]["vllm"]]
    assert requirement.name == "vllm"
    return requirement


def test_a_fresh_resolution_lands_on_a_supported_release() -> None:
    specifier = vllm_extra().specifier
    admitted = [v for v in PUBLISHED if specifier.contains(v)]
    # pip takes the newest admitted release: it must be one the plugin patches.
    assert max(admitted, key=Version) in SUPPORTED_VERSIONS
    # Every supported release stays installable with the extra (an existing 0.33.0 is kept).
    assert set(SUPPORTED_VERSIONS) <= set(admitted)
    assert [v for v in admitted if v not in SUPPORTED_VERSIONS] == []


def test_a_later_release_is_not_pulled_in_before_the_plugin_knows_it() -> None:
    specifier = vllm_extra().specifier
    newer = [v for v in FUTURE if Version(v) > max(map(Version, SUPPORTED_VERSIONS))]
    assert [v for v in newer if specifier.contains(v)] == []
