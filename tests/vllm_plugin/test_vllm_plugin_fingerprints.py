"""The plugin's fingerprints and refusals, checked against the real vLLM 0.33.0 sources.

The wheel is read as a zip (never installed); see tests/vllm_wheel.py for where it comes from.
Refusals are exercised on copies of the real files with one function edited, and on a tree that
carries the upstream change's names.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from dflash_tools.smoke.capability import capability_from_sources, detect_vllm, plugin_allowed, plugin_registered
from dflash_tools.vllm_plugin import decide
from dflash_tools.vllm_plugin.fingerprints import (
    NATIVE_MARKER_FILES,
    SITES,
    SUPPORTED_VERSIONS,
    check_sites,
    classify,
    version_supported,
)
from dflash_tools.vllm_plugin.markers import DISABLE_ENV, REQUIRE_ENV
from dflash_tools.vllm_plugin.sources import SourceReader, directory_reader, find_function, normalize, wheel_reader
from tests.vllm_wheel import wheel_fixture


@pytest.fixture(scope="session")
def vllm_wheel(request: pytest.FixtureRequest) -> Path:
    return wheel_fixture(request)


@pytest.fixture(scope="session")
def wheel_source(vllm_wheel: Path) -> SourceReader:
    return wheel_reader(vllm_wheel)


@pytest.fixture
def source_tree(vllm_wheel: Path, tmp_path: Path) -> Path:
    """The files the plugin reads, unpacked from the wheel into a site-packages-like folder."""
    wanted = {site.path for site in SITES} | set(NATIVE_MARKER_FILES) | {"vllm/__init__.py", "vllm/_version.py"}
    with zipfile.ZipFile(vllm_wheel) as archive:
        for name in wanted:
            target = tmp_path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(name))
    return tmp_path


def test_every_fingerprint_matches_the_real_release(wheel_source: SourceReader) -> None:
    checks = check_sites(wheel_source)
    assert [c.site.key for c in checks if not c.ok] == []
    assert all(c.location is not None for c in checks)
    classification = classify("0.33.0", wheel_source)
    assert classification.support == "patchable"
    assert "all 10 fingerprinted functions match" in classification.reason


def test_the_wheel_is_the_release_the_plugin_names(wheel_source: SourceReader) -> None:
    version_file = wheel_source("vllm/_version.py") or ""
    assert "__version__ = version = '0.33.0'" in version_file
    assert SUPPORTED_VERSIONS == ("0.33.0",)


def test_the_patched_sites_are_the_ones_the_research_names(wheel_source: SourceReader) -> None:
    """research/vllm-dflash.md §3 and §5.1 line numbers, so a reader can find each site."""
    lines = {c.site.key: c.location.def_line for c in check_sites(wheel_source) if c.location}
    assert lines["dflash_speculator_init"] == 41  # the raise sits at speculator.py:84-88
    assert lines["dflash2_decoder_layer_init"] == 230  # block_size=1 + K at qwen3_dflash2.py:255-256
    assert lines["num_lookahead_tokens"] == 626  # vllm.py:625-652
    assert lines["v1_unsupported_features"] == 3089  # vllm.py:3089-3137
    assert lines["speculative_compute_hash"] == 662  # speculative.py:662-707
    assert {s.key for s in SITES if s.patched} == {
        "speculative_compute_hash",
        "num_lookahead_tokens",
        "v1_unsupported_features",
        "dflash_speculator_init",
        "dflash2_decoder_layer_init",
        "v1_dflash_proposer_init",
    }


def test_no_upstream_change_in_0_33_0(wheel_source: SourceReader) -> None:
    speculator = wheel_source("vllm/v1/worker/gpu/spec_decode/dflash/speculator.py") or ""
    assert "sample_from_anchor=True is not supported for DFlash" in speculator
    assert classify("0.33.0", wheel_source).native_markers == []


@pytest.mark.parametrize("version", ["0.33.1", "0.34.0", "0.32.9", "0.33.0rc1", "", None])
def test_refuses_versions_it_was_not_written_against(wheel_source: SourceReader, version: str | None) -> None:
    classification = classify(version, wheel_source)
    assert classification.support == "unsupported"
    assert "neither a release the plugin was written against" in classification.reason


def test_a_local_build_label_of_the_release_is_accepted() -> None:
    assert version_supported("0.33.0+cu130")
    assert not version_supported("0.33.0.post1")


def test_refuses_when_a_patched_function_changed(source_tree: Path) -> None:
    path = source_tree / "vllm/model_executor/models/qwen3_dflash2.py"
    text = path.read_text(encoding="utf-8")
    edited = text.replace(
        "block_size=1 + speculative_config.num_speculative_tokens",
        "block_size=speculative_config.num_dflash_conv_block",
    )
    assert edited != text
    path.write_text(edited, encoding="utf-8")
    classification = classify("0.33.0", directory_reader(source_tree))
    assert classification.support == "unsupported"
    assert "DFlash2Qwen3DecoderLayer.__init__" in classification.reason
    assert "no longer contains 'block_size=1 + speculative_config.num_speculative_tokens'" in classification.reason
    bad = [c for c in classification.checks if not c.ok]
    assert [c.site.key for c in bad] == ["dflash2_decoder_layer_init"]


def test_a_comment_only_change_still_counts_as_a_change(source_tree: Path) -> None:
    path = source_tree / "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("# Multimodal inputs not currently supported.", "# edited"), encoding="utf-8")
    classification = classify("0.33.0", directory_reader(source_tree))
    assert classification.support == "unsupported"
    assert [c.site.key for c in classification.checks if not c.ok] == ["dflash_speculator_init"]


def test_moving_a_function_without_changing_it_keeps_the_fingerprint(source_tree: Path) -> None:
    """Hashes cover the function's own text, not its line number."""
    path = source_tree / "vllm/v1/spec_decode/dflash.py"
    path.write_text("# a new header line\n\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    assert classify("0.33.0", directory_reader(source_tree)).support == "patchable"


def test_refuses_when_a_file_or_function_is_missing(source_tree: Path) -> None:
    (source_tree / "vllm/v1/spec_decode/dflash.py").unlink()
    speculator = source_tree / "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py"
    speculator.write_text(
        speculator.read_text(encoding="utf-8").replace("class DFlash2Speculator(", "class Renamed("), encoding="utf-8"
    )
    classification = classify("0.33.0", directory_reader(source_tree))
    statuses = {c.site.key: c.status for c in classification.checks if not c.ok}
    assert statuses == {"v1_dflash_proposer_init": "missing-file", "dflash2_speculator_init": "missing-function"}
    assert classification.support == "unsupported"


def test_upstream_change_makes_it_native(source_tree: Path) -> None:
    path = source_tree / "vllm/config/speculative.py"
    path.write_text(
        path.read_text(encoding="utf-8")
        + "\n\ndef num_dflash_query_tokens(config):\n    return config.num_speculative_tokens\n",
        encoding="utf-8",
    )
    classification = classify("0.34.0", directory_reader(source_tree))
    assert classification.support == "native"
    assert classification.native_markers == ["vllm/config/speculative.py: num_dflash_query_tokens"]


def test_decide_patches_refuses_or_stands_aside(source_tree: Path) -> None:
    reader = directory_reader(source_tree)
    assert decide("0.33.0", reader, {}).action == "patch"
    refused = decide("0.34.0", reader, {})
    assert (refused.action, refused.raise_error) == ("refuse", False)
    required = decide("0.34.0", reader, {REQUIRE_ENV: "1"})
    assert (required.action, required.raise_error, required.status) == ("refuse", True, "refused")
    disabled = decide("0.33.0", reader, {DISABLE_ENV: "1", REQUIRE_ENV: "1"})
    assert (disabled.action, disabled.raise_error) == ("disabled", True)
    assert decide("0.33.0", reader, {REQUIRE_ENV: "0"}).action == "patch"


def test_capability_from_an_installed_looking_tree(source_tree: Path) -> None:
    capability = capability_from_sources(
        "0.33.0", directory_reader(source_tree), location=str(source_tree / "vllm"), registered=True, environ={}
    )
    assert capability.support == "patchable"
    assert capability.serves_anchor_first
    document = capability.to_dict()
    assert len(document["fingerprints"]) == len(SITES)
    assert all(f["status"] == "match" for f in document["fingerprints"])
    unregistered = capability_from_sources("0.33.0", directory_reader(source_tree), registered=False, environ={})
    assert not unregistered.serves_anchor_first
    assert "entry point" in unregistered.notes[0]
    blocked = capability_from_sources(
        "0.33.0", directory_reader(source_tree), registered=True, environ={"VLLM_PLUGINS": "other"}
    )
    assert not blocked.plugin_allowed
    assert "VLLM_PLUGINS does not list dflash_tools" in blocked.notes[0]


def test_capability_without_vllm_installed() -> None:
    capability = detect_vllm({})
    assert capability.installed is False
    assert capability.support == "absent"
    assert "pip install 'dflash-tools[vllm]'" in capability.reason


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
