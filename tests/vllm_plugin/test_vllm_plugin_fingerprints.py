"""The plugin's fingerprint reader and the vLLM capability, without vLLM.

The fingerprints themselves are checked against the installed vLLM 0.33.0 in the real-vLLM tier
(tests/real_vllm/test_fingerprints.py); these tests hold wherever they run, with or without vLLM.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dflash_tools.serving.vllm_capability import capability_from_sources, detect_vllm, plugin_allowed, plugin_registered
from dflash_tools.vllm_plugin.fingerprints import SITES, classify, version_supported
from dflash_tools.vllm_plugin.sources import directory_reader, find_function, normalize


def test_a_local_build_label_of_the_release_is_accepted() -> None:
    assert version_supported("0.33.0+cu130")
    assert not version_supported("0.33.0.post1")
    assert not version_supported(None)


def test_capability_without_vllm_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules is how Python marks a module as unimportable: find_spec says absent.
    monkeypatch.setitem(sys.modules, "vllm", None)
    capability = detect_vllm({})
    assert capability.installed is False
    assert capability.support == "absent"
    assert "pip install 'dflash-tools[vllm]'" in capability.reason


def test_an_empty_tree_is_refused_with_every_site_missing(tmp_path: Path) -> None:
    classification = classify("0.33.0", directory_reader(tmp_path))
    assert classification.support == "unsupported"
    assert {c.status for c in classification.checks} == {"missing-file"}
    assert len(classification.checks) == len(SITES)
    capability = capability_from_sources("0.34.0", directory_reader(tmp_path), registered=True, environ={})
    assert capability.v1_hook_points == [] and not capability.v1_refuses_anchor_first


def test_our_entry_point_is_registered() -> None:
    """pyproject's [project.entry-points."vllm.general_plugins"] is in the installed metadata."""
    assert plugin_registered()
    assert plugin_allowed({})
    assert plugin_allowed({"VLLM_PLUGINS": "lora_filesystem_resolver, dflash_tools"})
    assert not plugin_allowed({"VLLM_PLUGINS": ""})


def test_function_extraction() -> None:
    module = (
        "class A:\n"
        "    @property\n"
        "    def value(self):\n"
        "        return 1\n"
        "\n"
        "    @value.setter\n"
        "    def value(self, v):\n"
        "        pass\n"
        "\n"
        "def free(x):\n"
        "    return x\n"
    )
    getter = find_function(module, "A.value")
    assert getter is not None
    assert (getter.first_line, getter.def_line, getter.last_line) == (2, 3, 4)
    assert normalize(getter.text) == "def value(self):\n    return 1\n"
    assert find_function(module, "free") is not None
    assert find_function(module, "A.missing") is None
    assert find_function(module, "B.value") is None
    assert find_function("def broken(:\n", "broken") is None
