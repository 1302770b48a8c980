"""`convert` with the Hub on both ends: a repo id as SOURCE, and --push-to-hub (pull request or commit).

Both go through huggingface_hub's own code against local HTTP stand-ins (tests/hub_server.py for
reads, tests/hub_commit_server.py for writes): no network, no mocks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from huggingface_hub import constants
from typer.testing import CliRunner

import dflash_tools_testing as testing
from dflash_tools import convert_checkpoint, plan_conversion
from dflash_tools.cli import app
from dflash_tools.errors import OperationError, UsageError
from dflash_tools.inspect import inspect_checkpoint
from tests.conftest import CheckpointFactory
from tests.hub_commit_server import HubCommitServer
from tests.hub_server import HubServer, header_size, point_huggingface_hub_at

runner = CliRunner()
REPO = "z-lab/Qwen3.8-27B-DFlash2"


def checkpoint_files(tmp_path: Path) -> dict[str, bytes]:
    """A real (tiny) z-lab DFlash2 checkpoint, as the bytes a Hub repo would serve."""
    folder = testing.write_checkpoint(
        tmp_path / "upstream", "zlab-dflash2", replace(testing.TINY_DFLASH2, sample_from_anchor=None)
    )
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    files["README.md"] = b"# tiny draft\n"
    return files


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    server = HubServer().start()
    point_huggingface_hub_at(monkeypatch, tmp_path, server.url)
    server.add_repo(REPO, checkpoint_files(tmp_path))
    yield server
    server.stop()


@pytest.fixture
def commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubCommitServer]:
    server = HubCommitServer().start()
    point_huggingface_hub_at(monkeypatch, tmp_path, server.url)
    server.add_repo("me/draft-fixed")
    yield server
    server.stop()


# --------------------------------------------------------------------------------------------
# A Hub repo as the source
# --------------------------------------------------------------------------------------------


def test_hub_repo_is_downloaded_into_the_cache_and_converted(hub: HubServer, tmp_path: Path) -> None:
    out = tmp_path / "qwen38-dflash2"
    result = runner.invoke(app, ["convert", REPO, "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["dflash_config"]["sample_from_anchor"] is False and config["block_size"] == 8
    assert (out / "README.md").read_bytes() == b"# tiny draft\n"
    assert not {f.code for f in inspect_checkpoint(str(out)).findings} & {"DFT010", "DFT011", "DFT012"}
    # The cache blobs were linked, never written: their content is what the server holds.
    blobs = list((tmp_path / "hf-cache").rglob("blobs/*"))
    served = set(checkpoint_files(tmp_path / "again").values())
    assert blobs and all(b.read_bytes() in served for b in blobs)


def test_check_on_a_hub_repo_reads_headers_only(hub: HubServer, tmp_path: Path) -> None:
    plan = plan_conversion(REPO)
    assert plan.changed and plan.loaded.kind == "hub"
    data = checkpoint_files(tmp_path / "again")["model.safetensors"]
    # Headers only: a first range request, never the whole file.
    assert header_size(data) <= hub.bytes_served(REPO, "model.safetensors") < len(data)


def test_in_place_on_a_hub_repo_is_a_usage_error(hub: HubServer) -> None:
    with pytest.raises(UsageError, match="Hugging Face cache"):
        convert_checkpoint(REPO, in_place=True)
    result = runner.invoke(app, ["convert", REPO, "--in-place"])
    assert result.exit_code == 2


# --------------------------------------------------------------------------------------------
# --push-to-hub
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("xet", [True, False], ids=["xet-pipeline", "single-commit"])
def test_push_opens_a_pull_request(
    commits: HubCommitServer,
    make_checkpoint: CheckpointFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    xet: bool,
) -> None:
    if not xet:
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    source = make_checkpoint("zlab-dflash", replace(testing.TINY, sample_from_anchor=None), name="draft")
    out = tmp_path / "out"
    result = runner.invoke(app, ["convert", str(source), "-o", str(out), "--push-to-hub", "me/draft-fixed"])
    assert result.exit_code == 0, result.stderr
    assert f"pull request: {commits.url}/me/draft-fixed/discussions/1" in result.stdout
    [commit] = commits.commits
    assert commit.repo_id == "me/draft-fixed"
    assert commit.files["config.json"] == (out / "config.json").read_bytes()
    assert commit.files["model.safetensors"] == (out / "model.safetensors").read_bytes()
    assert "Normalize" in commit.summary and "sample_from_anchor" in commit.description
    assert commit.create_pr or commit.revision == "refs/pr/1"


def test_push_without_pr_commits_directly(
    commits: HubCommitServer, make_checkpoint: CheckpointFactory, tmp_path: Path
) -> None:
    source = make_checkpoint("zlab-dflash", name="draft")
    result = convert_checkpoint(str(source), tmp_path / "out", push_to_hub="me/new-repo", create_pr=False)
    assert result.push is not None and result.push.pr_url is None
    assert result.push.commit_url and result.push.commit_url.startswith(f"{commits.url}/me/new-repo/commit/")
    assert commits.created == ["me/new-repo"]
    [commit] = commits.commits
    assert commit.revision == "main" and not commit.create_pr


def test_push_to_a_missing_repo_fails_with_the_folder_kept(
    commits: HubCommitServer, make_checkpoint: CheckpointFactory, tmp_path: Path
) -> None:
    source = make_checkpoint("zlab-dflash", name="draft")
    with pytest.raises(OperationError, match="pushing .* failed") as caught:
        convert_checkpoint(str(source), tmp_path / "out", push_to_hub="me/missing")
    assert "hf upload" in caught.value.hint and (tmp_path / "out" / "config.json").exists()
    result = runner.invoke(app, ["convert", str(source), "-o", str(tmp_path / "out2"), "--push-to-hub", "me/missing"])
    assert result.exit_code == 1 and "Traceback" not in result.stderr


def test_dry_run_never_pushes(commits: HubCommitServer, make_checkpoint: CheckpointFactory, tmp_path: Path) -> None:
    source = make_checkpoint("zlab-dflash", name="draft")
    result = runner.invoke(
        app, ["convert", str(source), "-o", str(tmp_path / "o"), "--dry-run", "--push-to-hub", "me/draft-fixed"]
    )
    assert result.exit_code == 0 and "would open a pull request on me/draft-fixed" in result.stdout
    assert commits.commits == [] and commits.requests == []
