"""Published drafts answer offline from the bundled profiles (reading/hub/published.py).

The issue's case: offline, `inspect z-lab/Qwen3.8-27B-DFlash2` stopped at "cannot connect"
although configs/profiles holds that release. Now a repo id that the Hub cannot answer (offline,
or unreachable) and the Hugging Face cache does not hold is read from the published config.json
a profile stores (configs/profiles/releases/, the bytes of tests/corpus/published), saying so
(DFT056: revision, sha256); a profile that stores none says what it knows instead.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from huggingface_hub import constants
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.errors import SourceError
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.local import configs_dir
from tests.corpus.entries import BY_DIR
from tests.hub_server import HubServer

QWEN38 = BY_DIR["published/z-lab__Qwen3.8-27B-DFlash2__50307d4c"]
PROFILES = configs_dir() / "profiles"
runner = CliRunner()


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_a_published_draft_is_answered_from_its_profile(offline: None) -> None:
    report = inspect_checkpoint("z-lab/Qwen3.8-27B-DFlash2")
    document = report.to_dict()
    assert document["config_sha256"] == QWEN38.sha256 and document["dialect"] == "zlab-dflash2"
    assert document["profile"]["release"]["revision"] == QWEN38.revision
    [note] = [f for f in report.findings if f.code == "DFT056"]
    assert "from the bundled profile of z-lab/Qwen3.8-27B-DFlash2" in note.message
    assert f"revision {QWEN38.revision}" in note.message and QWEN38.sha256[:16] in note.message
    assert note.values["config_sha256"] == QWEN38.sha256
    assert document["ok"] is True


def test_the_command_line_says_so_and_exits_0(offline: None) -> None:
    result = runner.invoke(app, ["inspect", "z-lab/Qwen3.8-27B-DFlash2"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "bundled profile" in " ".join(result.stdout.split())


def test_a_mirror_and_a_revision_prefix(offline: None) -> None:
    mirror = BY_DIR["published/incoai__Qwen3.8-27B-DFlash2__dedf8df6"]
    from dflash_tools.reading.source import load_checkpoint

    loaded = load_checkpoint("incoai/Qwen3.8-27B-DFlash2", revision=mirror.revision[:8])
    assert loaded.commit == mirror.revision and loaded.config == mirror.config()
    with pytest.raises(SourceError):  # a revision no profile knows is not made up
        load_checkpoint("incoai/Qwen3.8-27B-DFlash2", revision="0123abcd")


def test_a_profile_without_a_config_says_what_it_knows(offline: None) -> None:
    result = runner.invoke(app, ["inspect", "DaoCloud/Qwen3.8-27B-DFlash2-Exp", "--json"])
    assert result.exit_code == 2
    message = json.loads(result.stdout)["error"]["message"]
    assert "bundles no published config.json of it" in message
    assert "anchor-first, block_size 7, K 7, 7 query positions, for Qwen/Qwen3.8-27B" in message


def test_the_hub_unreachable_is_answered_the_same_way(hub: HubServer) -> None:
    hub.stop()  # connection refused
    report = inspect_checkpoint("z-lab/Qwen3.8-27B-DFlash2")
    [note] = [f for f in report.findings if f.code == "DFT056"]
    assert (
        note.message.startswith("the Hub could not be reached") and report.to_dict()["config_sha256"] == QWEN38.sha256
    )


def test_the_cache_comes_first(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repo in the Hugging Face cache is read from it (it may be a newer revision): no DFT056."""
    import huggingface_hub

    changed = {**QWEN38.config(), "my_key": 1}
    hub.add_repo("z-lab/Qwen3.8-27B-DFlash2", {"config.json": json.dumps(changed).encode()})
    huggingface_hub.hf_hub_download("z-lab/Qwen3.8-27B-DFlash2", "config.json")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    report = inspect_checkpoint("z-lab/Qwen3.8-27B-DFlash2")
    assert "DFT056" not in [f.code for f in report.findings] and report.loaded.config == changed


def test_every_bundled_release_is_the_published_file() -> None:
    """Each stored file hashes to its row's sha256, reads as its row's config, and is the corpus's
    published bytes; a profile without any says why (`releases_note`)."""
    rows = 0
    for path in sorted(PROFILES.glob("*.json")):
        profile = json.loads(path.read_text(encoding="utf-8"))
        if not profile.get("releases"):
            assert profile.get("releases_note"), path.name
            continue
        for row in profile["releases"]:
            stored = PROFILES / row["config_file"]
            data = stored.read_bytes()
            assert hashlib.sha256(data).hexdigest() == row["config_sha256"], stored
            assert json.loads(data) == row["config"], stored
            corpus = BY_DIR[f"published/{Path(row['config_file']).parent.name}"]
            assert corpus.config_path.read_bytes() == data
            rows += 1
    assert rows >= 14


def test_a_file_that_is_not_the_repos_root_config_is_not_answered(offline: None) -> None:
    """XiaomiMiMo's published draft config is dflash/config.json of its repo (`path`): the repo id
    itself has no such root config, so nothing is made up for it."""
    with pytest.raises(SourceError):
        inspect_checkpoint("XiaomiMiMo/MiMo-V2.5-Pro-FP4-DFlash")


def test_a_preset_plans_offline_once_its_target_config_is_cached(
    offline: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`plan` and `smoke-test --dry-run` of the Qwen3.8 preset offline: without the target's
    config.json its `not_read` error says only the drafts are bundled; with it cached (the
    stand-in of `testing.targets`), the z-lab draft is answered from its profile, and DaoCloud's,
    which has no bundled config, is not read and says what its profile records (DFT091)."""
    from dflash_tools_testing.targets import write_hub_cache

    plan = runner.invoke(app, ["plan", "--preset", "qwen3.8-27b-dflash2", "--json"])
    assert plan.exit_code == 2  # DaoCloud's draft is not read (DFT091); the z-lab one is planned
    zlab, daocloud = json.loads(plan.stdout)["plans"]
    assert (
        "bundles the published configs of its drafts (z-lab/Qwen3.8-27B-DFlash2), not the target's"
        in zlab["target"]["not_read"]["error"]
    )
    assert zlab["ok"] and "bundles no published config.json of it" in daocloud["findings"][0]["message"]
    cache = write_hub_cache(tmp_path / "hub", ["Qwen/Qwen3.8-27B"])
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    planned = runner.invoke(
        app, ["plan", "-t", "Qwen/Qwen3.8-27B", "-d", "z-lab/Qwen3.8-27B-DFlash2", "--gpu-memory", "80", "--json"]
    )
    document = json.loads(planned.stdout)
    assert planned.exit_code == 0, planned.stdout
    assert "DFT056" in [f["code"] for f in document["plans"][0]["findings"]]
    dry = runner.invoke(app, ["smoke-test", "--preset", "qwen3.8-27b-dflash2", "--dry-run", "--json"])
    drafts = {d["draft"]: d for d in json.loads(dry.stdout)["drafts"]}
    assert drafts["z-lab/Qwen3.8-27B-DFlash2"]["verdict"]["status"] == "planned"
    [unread] = drafts["DaoCloud/Qwen3.8-27B-DFlash2-Exp"]["preflight"]["findings"]
    assert unread["code"] == "DFT091" and "bundles no published config.json" in unread["message"]
