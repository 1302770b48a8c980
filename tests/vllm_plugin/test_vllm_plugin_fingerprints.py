"""The plugin's fingerprint reader and the vLLM capability, without vLLM.

The fingerprints themselves are checked against each installed release (0.33.0, 0.34.0) in the
real-vLLM tiers (tests/real_vllm/test_fingerprints.py); these tests hold wherever they run, with or
without vLLM.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dflash_tools.engine_rules import get_rules, vllm_plugin_versions
from dflash_tools.serving.vllm_capability import capability_from_sources, detect_vllm, plugin_allowed, plugin_registered
from dflash_tools.vllm_plugin import releases
from dflash_tools.vllm_plugin.fingerprints import (
    SUPPORTED_VERSIONS,
    classify,
    find_class,
    native_evidence,
    sites_for,
)
from dflash_tools.vllm_plugin.sources import directory_reader, find_function, normalize

SITE_TABLES = {version: releases.sites_for(version) for version in SUPPORTED_VERSIONS}


def test_a_local_build_label_of_the_release_is_the_release() -> None:
    assert sites_for("0.33.0+cu130") == SITE_TABLES["0.33.0"] != ()
    assert sites_for("0.34.0+cpu") == SITE_TABLES["0.34.0"] != ()
    assert sites_for("0.33.0.post1") == ()
    assert sites_for(None) == ()


def test_every_supported_release_has_its_own_complete_site_table() -> None:
    """The engine tables say which releases the plugin patches; each names its own module, which
    has fingerprints of its own and says which release it is for."""
    assert set(SITE_TABLES) == set(SUPPORTED_VERSIONS) == set(vllm_plugin_versions())
    for version, sites in SITE_TABLES.items():
        rules = get_rules(f"vllm=={version}")
        assert rules is not None and rules.plugin_supported
        module = releases.release_module(version)
        assert module is not None and module.__name__ == rules.plugin_module and version == module.VERSION
        assert len({site.key for site in sites}) == len(sites), version
        assert all(len(site.sha256) == 64 and int(site.sha256, 16) >= 0 for site in sites), version
        assert any(site.patched for site in sites)
    # 0.34.0 has no V1 runner: nothing of V1 is fingerprinted there.
    assert not [s for s in SITE_TABLES["0.34.0"] if "v1" in s.key]
    assert not get_rules("vllm==0.34.0").has_v1_runner  # type: ignore[union-attr]


def test_an_unknown_release_is_refused_naming_the_supported_ones(tmp_path: Path) -> None:
    classification = classify("999.0.0", directory_reader(tmp_path))  # a release no table can ever be
    assert classification.support == "unsupported"
    assert f"(supported: {', '.join(vllm_plugin_versions())})" in classification.reason
    assert classification.checks == []


def test_capability_without_vllm_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules is how Python marks a module as unimportable: find_spec says absent.
    monkeypatch.setitem(sys.modules, "vllm", None)
    capability = detect_vllm({})
    assert capability.installed is False
    assert capability.support == "absent"
    assert "pip install '.[vllm]'" in capability.reason


@pytest.mark.parametrize("version", vllm_plugin_versions())
def test_an_empty_tree_is_refused_with_every_site_missing(tmp_path: Path, version: str) -> None:
    classification = classify(version, directory_reader(tmp_path))
    assert classification.support == "unsupported"
    assert {c.status for c in classification.checks} == {"missing-file"}
    assert len(classification.checks) == len(SITE_TABLES[version])
    capability = capability_from_sources("999.0.0", directory_reader(tmp_path), registered=True, environ={})
    # No V1 runner file: nothing can serve it silently, and nothing to guard.
    assert capability.v1_hook_points == [] and not capability.has_v1_runner
    assert capability.anchor_first_status == "refused"


# --- a vLLM that serves anchor-first DFlash itself is recognised from its code -----------------

SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"
LAYER = "vllm/model_executor/models/qwen3_dflash2.py"
STOCK_INIT = """
class DFlashSpeculator(DraftModelSpeculator):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
        self.num_query_per_req = 1 + self.num_speculative_steps
        dflash_config = getattr(self.draft_model_config.hf_config, "dflash_config", None) or {}
        if dflash_config.get("sample_from_anchor", False):
            raise ValueError("sample_from_anchor=True is not supported for DFlash.")
        self.sample_from_anchor = False
"""
NATIVE_INIT = """
class DFlashSpeculator(DraftModelSpeculator):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
        dflash_config = getattr(self.draft_model_config.hf_config, "dflash_config", None) or {}
        self.sample_from_anchor = bool(dflash_config.get("sample_from_anchor", False))
        self.num_query_per_req = self.num_speculative_steps + (0 if self.sample_from_anchor else 1)
"""
PINNED_OFF_INIT = NATIVE_INIT.replace(
    'self.sample_from_anchor = bool(dflash_config.get("sample_from_anchor", False))', "self.sample_from_anchor = False"
)
STOCK_LAYER = """
class DFlash2Qwen3DecoderLayer(Qwen3DecoderLayer):
    def __init__(self, vllm_config, *, config, layer_idx, prefix=""):
        conv_args = dict(block_size=1 + speculative_config.num_speculative_tokens)
"""
NATIVE_LAYER = STOCK_LAYER.replace(
    "block_size=1 + speculative_config.num_speculative_tokens", "block_size=speculative_config.num_query_tokens"
)


def tree(tmp_path: Path, speculator: str, layer: str) -> Path:
    for path, text in ((SPECULATOR, speculator), (LAYER, layer)):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("speculator", "layer", "native"),
    [
        (STOCK_INIT, STOCK_LAYER, False),  # 0.33.0 / 0.34.0: refuses the flag
        (NATIVE_INIT, NATIVE_LAYER, True),  # the change upstream: reads it, K queries, conv block follows
        (NATIVE_INIT, STOCK_LAYER, False),  # accepts the flag but DFlash2 would convolve 1 + K: not native
        (PINNED_OFF_INIT, NATIVE_LAYER, False),  # reads nothing useful: still the bonus layout
    ],
)
def test_native_support_is_read_from_the_code(tmp_path: Path, speculator: str, layer: str, native: bool) -> None:
    reader = directory_reader(tree(tmp_path, speculator, layer))
    assert bool(native_evidence(reader)) is native
    # The version string does not matter: a supported release's number with native code stands aside.
    assert (classify("0.34.0", reader).support == "native") is native


def test_class_extraction() -> None:
    module = "import x\n\n@decorate\nclass A(B):\n    x = 1\n\n    def f(self):\n        return 2\n\ny = 3\n"
    found = find_class(module, "A")
    assert found is not None and (found.first_line, found.def_line, found.last_line) == (3, 4, 8)
    assert found.text.startswith("class A(B):") and found.text.endswith("return 2")
    assert find_class(module, "B") is None and find_class("class (:\n", "A") is None


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
