"""The plugin's fingerprints and its decision, checked against the installed vLLM sources (0.33.0 or 0.34.0).

The sources are read from the installed package (never imported here). Refusals are exercised on
copies of the real files with one function edited; native support on a copy whose speculator
accepts `sample_from_anchor` and whose DFlash2 convolution follows the query count.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dflash_tools.serving.vllm_capability import capability_from_sources, detect_vllm
from dflash_tools.vllm_plugin import decide
from dflash_tools.vllm_plugin.fingerprints import (
    DFLASH2_MODEL_FILE,
    SPECULATOR_FILE,
    SUPPORTED_VERSIONS,
    V1_RUNNER_FILE,
    Classification,
    check_sites,
    classify,
    native_evidence,
    sites_for,
)
from dflash_tools.vllm_plugin.markers import DISABLE_ENV, REQUIRE_ENV
from dflash_tools.vllm_plugin.sources import SourceReader, directory_reader
from tests.real_vllm.conftest import HAS_V1, VLLM_VERSION

pytestmark = pytest.mark.real_vllm
SITES = sites_for(VLLM_VERSION)
OTHER_SUPPORTED = [v for v in SUPPORTED_VERSIONS if v != VLLM_VERSION]


@pytest.fixture(scope="module")
def installed(vllm_root: Path) -> SourceReader:
    return directory_reader(vllm_root)


@pytest.fixture
def source_tree(vllm_root: Path, tmp_path: Path) -> Path:
    """The files the plugin reads, copied from the installed package into a site-packages-like folder."""
    wanted = {site.path for site in SITES} | {
        SPECULATOR_FILE,
        DFLASH2_MODEL_FILE,
        "vllm/__init__.py",
        "vllm/_version.py",
    }
    wanted |= {V1_RUNNER_FILE, "vllm/v1/spec_decode/dflash.py"} if HAS_V1 else set()
    for name in wanted:
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(vllm_root / name, target)
    return tmp_path


def test_every_fingerprint_matches_the_installed_release(installed: SourceReader) -> None:
    checks = check_sites(installed, SITES)
    assert [c.describe() for c in checks if not c.ok] == []
    classification = classify(VLLM_VERSION, installed)
    assert classification.support == "patchable"
    assert f"all {len(SITES)} fingerprinted functions match" in classification.reason


def test_the_installed_release_is_the_one_the_plugin_names(installed: SourceReader) -> None:
    version_file = installed("vllm/_version.py") or ""
    assert f"__version__ = version = '{VLLM_VERSION}'" in version_file
    capability = detect_vllm({})
    assert (capability.version, capability.support, capability.serves_anchor_first) == (
        VLLM_VERSION,
        "patchable",
        True,
    )
    assert capability.has_v1_runner is HAS_V1
    assert capability.anchor_first_status == "patched"


# docs/tier-vllm.md names these lines, so a reader can find each site in the release.
SITE_LINES = {
    "0.33.0": {
        "dflash_speculator_init": 41,  # the raise sits at speculator.py:84-88
        "dflash2_decoder_layer_init": 230,  # block_size=1 + K at qwen3_dflash2.py:255-256
        "num_lookahead_tokens": 626,  # vllm.py:625-652
        "v1_unsupported_features": 3089,  # vllm.py:3089-3137
        "speculative_compute_hash": 662,  # speculative.py:662-707
        "dflash_prepare_inputs_kernel": 638,
        "dflash_prepare_inputs": 842,
    },
    "0.34.0": {
        "dflash_speculator_init": 42,  # the raise sits at speculator.py:80-85
        "dflash2_decoder_layer_init": 231,  # block_size=1 + K at qwen3_dflash2.py:257
        "dflash_config_num_lookahead_tokens": 54,  # dflash/config.py:53-56
        "speculator_config_hash_factors": 138,  # speculator_config.py
        "dflash_config_class": 14,
        "vllm_draft_budget": 2263,
        "dflash_prepare_inputs_kernel": 726,
        "dflash_prepare_inputs": 920,
    },
}


def test_the_patched_sites_are_where_the_docs_say(installed: SourceReader) -> None:
    lines = {c.site.key: c.location.def_line for c in check_sites(installed, SITES) if c.location}
    assert {key: lines[key] for key in SITE_LINES[VLLM_VERSION]} == SITE_LINES[VLLM_VERSION]


def test_no_native_anchor_sampling_in_the_release(installed: SourceReader) -> None:
    speculator = installed(SPECULATOR_FILE) or ""
    assert "sample_from_anchor=True is not supported for DFlash" in speculator
    assert native_evidence(installed) == []
    assert classify(VLLM_VERSION, installed).native_markers == []


@pytest.mark.parametrize("version", ["0.33.1", "0.35.0", "0.32.9", "0.33.0rc1", "", None])
def test_refuses_versions_it_was_not_written_against(installed: SourceReader, version: str | None) -> None:
    classification = classify(version, installed)
    assert classification.support == "unsupported"
    assert "not a release the plugin was written against (supported: 0.33.0, 0.34.0)" in classification.reason


@pytest.mark.parametrize("version", OTHER_SUPPORTED)
def test_another_releases_table_does_not_match_these_sources(installed: SourceReader, version: str) -> None:
    """Each release has its own fingerprints: these sources under the other release's name refuse."""
    classification = classify(version, installed)
    assert classification.support == "unsupported"
    assert f"vLLM {version} has been modified" in classification.reason


def edit(tree: Path, path: str, old: str, new: str) -> None:
    file = tree / path
    text = file.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    file.write_text(text.replace(old, new), encoding="utf-8")


def refused(tree: Path) -> tuple[Classification, list[str]]:
    """The release read from `tree` must be refused: the classification and the keys of the failing sites."""
    classification = classify(VLLM_VERSION, directory_reader(tree))
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
    # That edit alone is not native support either: the speculator still refuses the flag.
    assert native_evidence(directory_reader(source_tree)) == []


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
    path = source_tree / DFLASH2_MODEL_FILE
    path.write_text("# a new header line\n\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    assert classify(VLLM_VERSION, directory_reader(source_tree)).support == "patchable"


def test_refuses_when_a_file_or_function_is_missing(source_tree: Path) -> None:
    (source_tree / "vllm/v1/worker/gpu/spec_decode/__init__.py").unlink()
    edit(
        source_tree,
        "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py",
        "class DFlash2Speculator(",
        "class Renamed(",
    )
    classification = classify(VLLM_VERSION, directory_reader(source_tree))
    statuses = {c.site.key: c.status for c in classification.checks if not c.ok}
    missing = {s.key for s in SITES if s.qualname.startswith("DFlash2Speculator.")}
    assert statuses == {"init_speculator": "missing-file", **dict.fromkeys(missing, "missing-function")}
    assert classification.support == "unsupported"


# An upstream change in the spirit of vllm-project/vllm#54154, written into the real file: the
# speculator reads the flag and sizes the queries by it, and the DFlash2 convolution follows.
ACCEPT_FLAG = (
    '        if dflash_config.get("sample_from_anchor", False):\n'
    "            raise ValueError(\n"
    '                "sample_from_anchor=True is not supported for DFlash. "\n'
)


def make_native(tree: Path, *, conv: bool = True) -> None:
    speculator = tree / SPECULATOR_FILE
    text = speculator.read_text(encoding="utf-8")
    start = text.index(ACCEPT_FLAG)
    end = text.index("        self.sample_from_anchor = False\n", start) + len(
        "        self.sample_from_anchor = False\n"
    )
    native = (
        '        self.sample_from_anchor = bool(dflash_config.get("sample_from_anchor", False))\n'
        "        self.num_query_per_req = self.num_speculative_steps + (0 if self.sample_from_anchor else 1)\n"
    )
    speculator.write_text(text[:start] + native + text[end:], encoding="utf-8")
    if conv:
        edit(
            tree,
            DFLASH2_MODEL_FILE,
            "block_size=1 + speculative_config.num_speculative_tokens",
            "block_size=speculative_config.num_speculative_tokens + int(not anchor_first(config))",
        )


def test_native_anchor_sampling_is_read_from_the_code(source_tree: Path) -> None:
    make_native(source_tree)
    reader = directory_reader(source_tree)
    # Whatever the version says: a supported release's number, an unknown one, none.
    for version in (VLLM_VERSION, "0.35.0", None):
        classification = classify(version, reader)
        assert classification.support == "native", classification.reason
        assert classification.native_markers[0].endswith("DFlashSpeculator.__init__ accepts sample_from_anchor")
    assert decide(VLLM_VERSION, reader, {REQUIRE_ENV: "1"}).action == "native"


def test_half_native_code_is_refused_not_trusted(source_tree: Path) -> None:
    """The speculator accepts the flag but DFlash2 still convolves 1 + K blocks: not native, and
    the changed speculator no longer matches the fingerprints, so nothing is patched either."""
    make_native(source_tree, conv=False)
    classification = classify(VLLM_VERSION, directory_reader(source_tree))
    assert classification.support == "unsupported"
    assert "DFlashSpeculator.__init__: source differs" in classification.reason


def test_decide_patches_refuses_or_stands_aside(source_tree: Path) -> None:
    reader = directory_reader(source_tree)
    assert decide(VLLM_VERSION, reader, {}).action == "patch"
    refused = decide("0.35.0", reader, {})
    assert (refused.action, refused.raise_error) == ("refuse", False)
    required = decide("0.35.0", reader, {REQUIRE_ENV: "1"})
    assert (required.action, required.raise_error, required.status) == ("refuse", True, "refused")
    disabled = decide(VLLM_VERSION, reader, {DISABLE_ENV: "1", REQUIRE_ENV: "1"})
    assert (disabled.action, disabled.raise_error) == ("disabled", True)
    assert decide(VLLM_VERSION, reader, {REQUIRE_ENV: "0"}).action == "patch"


def test_capability_from_an_installed_looking_tree(source_tree: Path) -> None:
    capability = capability_from_sources(
        VLLM_VERSION, directory_reader(source_tree), location=str(source_tree / "vllm"), registered=True, environ={}
    )
    assert capability.support == "patchable"
    assert capability.serves_anchor_first and capability.anchor_first_status == "patched"
    document = capability.to_dict()
    assert len(document["fingerprints"]) == len(SITES)
    assert all(f["status"] == "match" for f in document["fingerprints"])
    assert document["v1_refuses_anchor_first"] is True
    assert document["has_v1_runner"] is HAS_V1
    unregistered = capability_from_sources(VLLM_VERSION, directory_reader(source_tree), registered=False, environ={})
    assert not unregistered.serves_anchor_first
    # With V1 (0.33.0) an unregistered plugin means V1 drafts it wrongly; without V1 it is refused.
    assert unregistered.anchor_first_status == ("misaligned" if HAS_V1 else "refused")
    assert "entry point" in unregistered.notes[0]
    blocked = capability_from_sources(
        VLLM_VERSION, directory_reader(source_tree), registered=True, environ={"VLLM_PLUGINS": "other"}
    )
    assert not blocked.plugin_allowed
    assert "VLLM_PLUGINS does not list dflash_tools" in blocked.notes[0]
    if not HAS_V1:
        return
    other = capability_from_sources("0.35.0", directory_reader(source_tree), registered=True, environ={})
    assert other.support == "unsupported" and other.v1_refuses_anchor_first  # the plugin's guard
    (source_tree / "vllm/v1/spec_decode/dflash.py").unlink()
    edit(
        source_tree,
        "vllm/config/vllm.py",
        "def _get_v1_model_runner_unsupported_features(",
        "def _v1_features(",
    )
    bare = capability_from_sources("0.35.0", directory_reader(source_tree), registered=True, environ={})
    assert bare.v1_hook_points == [] and not bare.v1_refuses_anchor_first
