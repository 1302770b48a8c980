"""The table of published releases (configs/profiles/*.json, `releases`) as inspect uses it.

A config is identified as a published release by its sha256 (or, re-serialized, by its content);
a checkpoint named like a published draft whose config is none of its releases gets DFT054 with
the keys that differ from the nearest release (docs/findings.md, docs/json.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from dflash_tools.cli.app import app
from dflash_tools.inspect import inspect_checkpoint
from tests.corpus.entries import BY_DIR
from tests.hub_server import HubServer

QWEN38 = BY_DIR["published/z-lab__Qwen3.8-27B-DFlash2__50307d4c"]
QWEN36_OLD = BY_DIR["published/z-lab__Qwen3.6-35B-A3B-DFlash__unknown-revision"]


def write(folder: Path, config: dict[str, object] | bytes) -> Path:
    folder.mkdir(parents=True)
    data = config if isinstance(config, bytes) else json.dumps(config, indent=2).encode()
    (folder / "config.json").write_bytes(data)
    return folder


def codes(folder: Path | str) -> list[str]:
    return [f.code for f in inspect_checkpoint(str(folder)).findings]


def test_the_config_sha256_is_in_the_json_report() -> None:
    document = inspect_checkpoint(str(QWEN38.folder)).to_dict()
    assert document["config_sha256"] == QWEN38.sha256
    assert document["profile"]["release"] == {
        "repo": "z-lab/Qwen3.8-27B-DFlash2",
        "revision": QWEN38.revision,
        "other_revisions": [],
        "config_sha256": QWEN38.sha256,
    }
    assert document["profile"]["matched_by"] == "config sha256"


def test_a_reserialized_release_is_identified_by_its_content(tmp_path: Path) -> None:
    folder = write(tmp_path / "copy", json.dumps(QWEN38.config(), indent=4, sort_keys=True).encode())
    report = inspect_checkpoint(str(folder))
    assert report.to_dict()["config_sha256"] != QWEN38.sha256
    assert report.profile is not None and report.profile.matched_by == "config content"
    assert report.profile.release is not None and report.profile.release.revision == QWEN38.revision
    assert "DFT054" not in codes(folder)


def test_a_stale_download_in_the_hub_cache_says_which_keys_changed(tmp_path: Path) -> None:
    """The issue's case: z-lab/Qwen3.6-35B-A3B-DFlash changed its mask id between revisions."""
    config = QWEN36_OLD.config()
    config["dflash_config"]["mask_token_id"] = 248077
    snapshot = write(tmp_path / "hub" / "models--z-lab--Qwen3.6-35B-A3B-DFlash" / "snapshots" / "abc123", config)
    report = inspect_checkpoint(str(snapshot))
    [finding] = [f for f in report.findings if f.code == "DFT054"]
    assert finding.severity.value == "warning"
    assert "dflash_config.mask_token_id 248077 (published 248070)" in finding.message
    assert "z-lab/Qwen3.6-35B-A3B-DFlash (revision not recorded)" in finding.message
    assert finding.keys == ("dflash_config.mask_token_id",)
    assert finding.values["config_differences"] == [
        {"key": "dflash_config.mask_token_id", "published": 248070, "actual": 248077, "change": "changed"}
    ]
    profile = report.to_dict()["profile"]
    assert profile["matched_by"] == "folder name" and profile["release"] is None
    assert profile["nearest_release"]["repo"] == "z-lab/Qwen3.6-35B-A3B-DFlash"


def test_a_folder_named_like_the_repo_names_added_and_removed_keys(tmp_path: Path) -> None:
    config = QWEN38.config()
    del config["use_cache"]
    config["rope_parameters"]["rope_type"] = "yarn"
    config["my_new_key"] = 1
    folder = write(tmp_path / "Qwen3.8-27B-DFlash2", config)
    report = inspect_checkpoint(str(folder))
    [finding] = [f for f in report.findings if f.code == "DFT054"]
    assert finding.keys == ("rope_parameters.rope_type", "use_cache", "my_new_key")
    assert "use_cache absent (published true)" in finding.message
    assert "my_new_key 1 (not in the published config)" in finding.message
    assert f"z-lab/Qwen3.8-27B-DFlash2@{QWEN38.revision[:8]}" in finding.message


KIMI_YARN = BY_DIR["published/RadixArk__Kimi-K3-DSpark__9c4b2577"]


def test_a_release_of_a_repo_with_two_revisions_is_identified(tmp_path: Path) -> None:
    folder = write(tmp_path / "kimi", KIMI_YARN.config())
    report = inspect_checkpoint(str(folder))
    assert report.profile is not None and report.profile.release is not None
    assert report.profile.release.revision == KIMI_YARN.revision
    assert report.profile.matched_by == "config content" and report.profile.releases_known == 2


def test_the_nearest_of_several_releases_is_named(tmp_path: Path) -> None:
    """RadixArk/Kimi-K3-DSpark has two revisions: default rope (eb03982e), then YaRN (9c4b2577)."""
    config = KIMI_YARN.config()
    config["rms_norm_eps"] = 1e-6
    report = inspect_checkpoint(str(write(tmp_path / "Kimi-K3-DSpark", config)))
    [finding] = [f for f in report.findings if f.code == "DFT054"]
    assert "RadixArk/Kimi-K3-DSpark@9c4b2577" in finding.message
    assert finding.keys == ("rms_norm_eps",)


def test_a_look_alike_by_dimensions_gets_the_comparison_but_no_finding(tmp_path: Path) -> None:
    config = QWEN38.config()
    config["dflash_config"]["mask_token_id"] = 248077
    folder = write(tmp_path / "my-finetune", config)
    report = inspect_checkpoint(str(folder))
    assert "DFT054" not in codes(folder)
    profile = report.to_dict()["profile"]
    assert profile["matched_by"] == "dimensions"
    assert profile["config_differences"] == [
        {"key": "dflash_config.mask_token_id", "published": 248070, "actual": 248077, "change": "changed"}
    ]


def test_a_hub_repo_is_compared_with_its_releases(hub: HubServer) -> None:
    hub.add_repo("z-lab/Qwen3.8-27B-DFlash2", {"config.json": QWEN38.config_path.read_bytes()})
    same = inspect_checkpoint("z-lab/Qwen3.8-27B-DFlash2").to_dict()
    assert same["config_sha256"] == QWEN38.sha256 and same["commit"]
    assert same["profile"]["release"]["revision"] == QWEN38.revision
    changed = QWEN38.config()
    changed["dflash_config"]["target_layer_ids"] = [1, 16, 31, 46, 61]
    hub.add_repo("z-lab/Qwen3.8-27B-DFlash2", {"config.json": json.dumps(changed).encode()})
    report = inspect_checkpoint("z-lab/Qwen3.8-27B-DFlash2")
    [finding] = [f for f in report.findings if f.code == "DFT054"]
    assert "matched by repo id" in finding.message
    assert finding.keys == ("dflash_config.target_layer_ids",)


def test_the_human_report_shows_the_sha256_and_the_release() -> None:
    result = CliRunner().invoke(app, ["inspect", str(QWEN38.folder)])
    assert result.exit_code == 0, result.output
    assert f"sha256 {QWEN38.sha256[:16]}" in result.output
    assert (
        f"the published config of z-lab/Qwen3.8-27B-DFlash2@{QWEN38.revision[:8]} (by config sha256)" in result.output
    )


def test_non_finite_values_in_the_comparison_stay_strict_json(tmp_path: Path) -> None:
    """A fuzzed config with NaN where the release has a number: the report is still strict JSON."""
    text = QWEN38.config_path.read_text().replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN')
    assert "NaN" in text
    folder = write(tmp_path / "Qwen3.8-27B-DFlash2", text.encode())
    document = inspect_checkpoint(str(folder)).to_dict()
    json.dumps(document, allow_nan=False)
    [difference] = [d for d in document["profile"]["config_differences"] if d["key"] == "rms_norm_eps"]
    assert difference == {"key": "rms_norm_eps", "published": 1e-06, "actual": "NaN", "change": "changed"}
