"""The plugin's fingerprints and its decision, checked against the installed vLLM 0.33.0 sources.

The sources are read from the installed package (never imported here). Refusals are exercised on
copies of the real files with one function edited, and on a tree that carries the upstream
change's names.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dflash_tools.serving.vllm_capability import capability_from_sources, detect_vllm
from dflash_tools.vllm_plugin import decide
from dflash_tools.vllm_plugin.fingerprints import NATIVE_MARKER_FILES, SITES, Classification, check_sites, classify
from dflash_tools.vllm_plugin.markers import DISABLE_ENV, REQUIRE_ENV
from dflash_tools.vllm_plugin.sources import SourceReader, directory_reader

pytestmark = pytest.mark.real_vllm


@pytest.fixture(scope="module")
def installed(vllm_root: Path) -> SourceReader:
    return directory_reader(vllm_root)


@pytest.fixture
def source_tree(vllm_root: Path, tmp_path: Path) -> Path:
    """The files the plugin reads, copied from the installed package into a site-packages-like folder."""
    wanted = {site.path for site in SITES} | set(NATIVE_MARKER_FILES) | {"vllm/__init__.py", "vllm/_version.py"}
    for name in wanted:
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(vllm_root / name, target)
    return tmp_path


def test_every_fingerprint_matches_the_installed_release(installed: SourceReader) -> None:
    checks = check_sites(installed)
    assert [c.describe() for c in checks if not c.ok] == []
    classification = classify("0.33.0", installed)
    assert classification.support == "patchable"
    assert f"all {len(SITES)} fingerprinted functions match" in classification.reason


def test_the_installed_release_is_the_one_the_plugin_names(installed: SourceReader) -> None:
    version_file = installed("vllm/_version.py") or ""
    assert "__version__ = version = '0.33.0'" in version_file
    capability = detect_vllm({})
    assert (capability.version, capability.support, capability.serves_anchor_first) == ("0.33.0", "patchable", True)
    assert capability.v1_refuses_anchor_first


def test_the_patched_sites_are_where_the_research_says(installed: SourceReader) -> None:
    """docs/tier-vllm.md names these lines, so a reader can find each site in 0.33.0."""
    lines = {c.site.key: c.location.def_line for c in check_sites(installed) if c.location}
    assert lines["dflash_speculator_init"] == 41  # the raise sits at speculator.py:84-88
    assert lines["dflash2_decoder_layer_init"] == 230  # block_size=1 + K at qwen3_dflash2.py:255-256
    assert lines["num_lookahead_tokens"] == 626  # vllm.py:625-652
    assert lines["v1_unsupported_features"] == 3089  # vllm.py:3089-3137
    assert lines["speculative_compute_hash"] == 662  # speculative.py:662-707
    assert lines["dflash_prepare_inputs_kernel"] == 638
    assert lines["dflash_prepare_inputs"] == 842


def test_no_upstream_change_in_0_33_0(installed: SourceReader) -> None:
    speculator = installed("vllm/v1/worker/gpu/spec_decode/dflash/speculator.py") or ""
    assert "sample_from_anchor=True is not supported for DFlash" in speculator
    assert classify("0.33.0", installed).native_markers == []


@pytest.mark.parametrize("version", ["0.33.1", "0.34.0", "0.32.9", "0.33.0rc1", "", None])
def test_refuses_versions_it_was_not_written_against(installed: SourceReader, version: str | None) -> None:
    classification = classify(version, installed)
    assert classification.support == "unsupported"
    assert "neither a release the plugin was written against" in classification.reason


def edit(tree: Path, path: str, old: str, new: str) -> None:
    file = tree / path
    text = file.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    file.write_text(text.replace(old, new), encoding="utf-8")


def refused(tree: Path) -> tuple[Classification, list[str]]:
    """0.33.0 read from `tree` must be refused: the classification and the keys of the failing sites."""
    classification = classify("0.33.0", directory_reader(tree))
    assert classification.support == "unsupported"
    return classification, [c.site.key for c in classification.checks if not c.ok]


def test_refuses_when_a_patched_function_changed(source_tree: Path) -> None:
    edit(
        source_tree,
        "vllm/model_executor/models/qwen3_dflash2.py",
        "block_size=1 + speculative_config.num_speculative_tokens",
        "block_size=speculative_config.num_dflash_conv_block",
    )
    classification, failing = refused(source_tree)
    assert "DFlash2Qwen3DecoderLayer.__init__" in classification.reason
    assert "no longer contains 'block_size=1 + speculative_config.num_speculative_tokens'" in classification.reason
    assert failing == ["dflash2_decoder_layer_init"]


@pytest.mark.parametrize(
    ("key", "path", "old", "new"),
    [
        (
            "dflash_prepare_inputs_kernel",
            "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py",
            "    query_base = req_idx * num_query_per_req\n",
            "    query_base = req_idx * (num_query_per_req + 1)\n",
        ),
        (
            "dflash_prepare_inputs",
            "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py",
            "        SAMPLE_FROM_ANCHOR=sample_from_anchor,\n",
            "        SAMPLE_FROM_ANCHOR=False,\n",
        ),
        (
            "dflash2_score_candidates",
            "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py",
            ": num_reqs * self.num_query_per_req : self.num_query_per_req",
            ": num_reqs * self.num_query_per_req : 1 + self.num_speculative_steps",
        ),
    ],
)
def test_refuses_when_the_layout_code_changed(source_tree: Path, key: str, path: str, old: str, new: str) -> None:
    """The code the wrappers rely on but do not wrap: a change there must refuse, not serve."""
    edit(source_tree, path, old, new)
    assert refused(source_tree)[1] == [key]


def test_a_comment_only_change_still_counts_as_a_change(source_tree: Path) -> None:
    edit(
        source_tree,
        "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py",
        "# Multimodal inputs not currently supported.",
        "# edited",
    )
    assert refused(source_tree)[1] == ["dflash_speculator_init"]


def test_moving_a_function_without_changing_it_keeps_the_fingerprint(source_tree: Path) -> None:
    """Hashes cover the function's own text, not its line number."""
    path = source_tree / "vllm/v1/spec_decode/dflash.py"
    path.write_text("# a new header line\n\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    assert classify("0.33.0", directory_reader(source_tree)).support == "patchable"


def test_refuses_when_a_file_or_function_is_missing(source_tree: Path) -> None:
    (source_tree / "vllm/v1/spec_decode/dflash.py").unlink()
    edit(
        source_tree,
        "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py",
        "class DFlash2Speculator(",
        "class Renamed(",
    )
    classification = classify("0.33.0", directory_reader(source_tree))
    statuses = {c.site.key: c.status for c in classification.checks if not c.ok}
    missing = {s.key for s in SITES if s.qualname.startswith("DFlash2Speculator.")}
    assert statuses == {"v1_dflash_proposer_init": "missing-file", **dict.fromkeys(missing, "missing-function")}
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
    assert document["v1_refuses_anchor_first"] is True
    unregistered = capability_from_sources("0.33.0", directory_reader(source_tree), registered=False, environ={})
    assert not unregistered.serves_anchor_first and not unregistered.v1_refuses_anchor_first
    assert "entry point" in unregistered.notes[0]
    blocked = capability_from_sources(
        "0.33.0", directory_reader(source_tree), registered=True, environ={"VLLM_PLUGINS": "other"}
    )
    assert not blocked.plugin_allowed
    assert "VLLM_PLUGINS does not list dflash_tools" in blocked.notes[0]
    other = capability_from_sources("0.34.0", directory_reader(source_tree), registered=True, environ={})
    assert other.support == "unsupported" and other.v1_refuses_anchor_first  # the plugin's guard
    (source_tree / "vllm/v1/spec_decode/dflash.py").unlink()
    edit(
        source_tree,
        "vllm/config/vllm.py",
        "def _get_v1_model_runner_unsupported_features(",
        "def _v1_features(",
    )
    bare = capability_from_sources("0.34.0", directory_reader(source_tree), registered=True, environ={})
    assert bare.v1_hook_points == [] and not bare.v1_refuses_anchor_first
