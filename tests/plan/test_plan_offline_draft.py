"""`plan` and `smoke-test --dry-run` offline with a draft the Hub cannot be asked about (DFT091).

The `qwen3.8-27b-dflash2` preset names two drafts: z-lab/Qwen3.8-27B-DFlash2, whose published
config.json a bundled profile stores (answered offline, DFT056), and DaoCloud's
Qwen3.8-27B-DFlash2-Exp, whose profile records only what its model card says (no config.json is
known). Offline with an empty Hugging Face cache the preset used to stop at exit 2 with one line
of error; now the z-lab draft is planned in full and DaoCloud's gets an entry saying it was not
read, with what its profile records. A draft that is a missing local path stays an error.

The cache is an empty tmp folder and huggingface_hub's own settings (read once at import) are
pointed at it as the environment is, so the machine's real cache cannot answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.plan.model import PlanDraft, PlanRequest
from dflash_tools.plan.run import plan_launch
from tests.hub_server import HubServer

runner = CliRunner()
PRESET = "qwen3.8-27b-dflash2"
ZLAB = "z-lab/Qwen3.8-27B-DFlash2"
DAOCLOUD = "DaoCloud/Qwen3.8-27B-DFlash2-Exp"
TARGET = "Qwen/Qwen3.8-27B"
# What configs/profiles/DaoCloud__Qwen3.8-27B-DFlash2-Exp.json records (its geometry and target).
DAOCLOUD_PROFILE = {
    "profile": DAOCLOUD,
    "algorithm": "dflash2",
    "layout": "anchor-first",
    "block_size": 7,
    "num_speculative_tokens": 7,
    "num_query_tokens": 7,
    "target": TARGET,
}


@pytest.fixture
def offline_empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf"
    cache.mkdir()
    for name in ("HF_HOME", "HF_HUB_CACHE"):
        monkeypatch.setenv(name, str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = runner.invoke(app, [*args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def codes(findings: list[dict[str, Any]]) -> list[str]:
    return [f["code"] for f in findings]


def test_the_preset_plans_offline_with_its_unread_draft_named(offline_empty_cache: Path) -> None:
    code, document = run_json("plan", "--preset", PRESET, "--gpu-memory", "80")
    # Exit 2 (a source that could not be read), now with the whole plan; `ok` agrees.
    assert (code, document["exit_code"], document["ok"], document["command"]) == (2, 2, False, "plan")
    zlab, daocloud = document["plans"]

    # The z-lab draft: planned in full, as `--draft z-lab/...` alone plans it.
    assert zlab["draft"]["source"] == ZLAB and "not_read" not in zlab["draft"]
    assert zlab["ok"] is True and "DFT056" in codes(zlab["findings"])
    assert set(zlab["engines"]) == {"sglang", "vllm==0.33.0", "vllm==0.34.0"}
    for engine in zlab["engines"].values():
        assert engine["ok"] and (engine["num_speculative_tokens"], engine["num_query_tokens"]) == (7, 8)
        assert ZLAB in engine["launch_command"]

    # DaoCloud's: not read, why, how to get it read, and what its profile records; nothing else.
    assert daocloud["ok"] is False
    assert daocloud["draft"]["source"] == DAOCLOUD and daocloud["draft"]["dialect"] is None
    not_read = daocloud["draft"]["not_read"]
    assert "HF_HUB_OFFLINE" in not_read["reason"]
    assert f"hf download {DAOCLOUD} config.json" in not_read["hint"]
    assert DAOCLOUD in not_read["error"]
    assert not_read["profile"] == DAOCLOUD_PROFILE
    assert daocloud["engines"] == {} and daocloud["geometry"] is None
    (finding,) = daocloud["findings"]
    assert (finding["code"], finding["severity"]) == ("DFT091", "error")
    assert finding["values"]["profile"] == DAOCLOUD_PROFILE
    message = finding["message"]
    assert "HF_HUB_OFFLINE is set" in message and "bundles no published config.json of it" in message
    assert "dflash2 draft, anchor-first, block_size 7, K 7, 7 query positions, for Qwen/Qwen3.8-27B" in message
    assert "config.json is not known" in message
    # The target was not read either: said on the entry as on the other.
    assert "not_read" in daocloud["target"] and daocloud["target"]["source"] == TARGET


def test_the_library_answers_the_same(offline_empty_cache: Path) -> None:
    request = PlanRequest(target=TARGET, drafts=(PlanDraft(ZLAB), PlanDraft(DAOCLOUD)), engines=("all",))
    launch = plan_launch(request)
    zlab, daocloud = launch.plans
    assert zlab.draft_unread is None and zlab.ok
    assert daocloud.draft_unread is not None and daocloud.draft_unread.profile is not None
    assert daocloud.draft_unread.profile.words().startswith("dflash2 draft, anchor-first, block_size 7")
    assert (launch.ok, launch.exit_code) == (False, 2)


def test_the_human_plan_says_so_within_80_columns(offline_empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, ["plan", "--preset", PRESET])
    assert result.exit_code == 2, result.stdout
    lines = result.stdout.splitlines()
    verdict = " ".join(" ".join(lines[:3]).split())
    assert verdict.startswith("FAIL: 1 of 2 drafts not read (DFT091); the other: OK for sglang")
    # The counts are both drafts' findings, not the other's alone.
    assert "vllm==0.34.0; in all: 2 drafts, 1 error(s)" in verdict
    assert "draft 1 of 2: ok" in lines and "draft 2 of 2: not read" in lines
    entry = lines[lines.index("draft 2 of 2: not read") :]
    assert any(line.startswith(f"draft   {DAOCLOUD} · not read (DFT091 below)") for line in entry)
    assert any(line.startswith("DFT091 error") for line in entry)
    assert any(f"`hf download {DAOCLOUD} config.json`" in line for line in entry)
    # The z-lab draft keeps its launch lines; DaoCloud's entry has none.
    assert sum(line.startswith(f"vllm serve {TARGET}") for line in lines) == 1
    assert not any(line.startswith("launch") for line in entry)
    assert all(len(line) <= 80 for line in lines if '"method"' not in line)


def test_smoke_dry_run_names_the_unread_draft(offline_empty_cache: Path) -> None:
    code, document = run_json("smoke-test", "--preset", PRESET, "--dry-run")
    assert (code, document["exit_code"], document["ok"]) == (2, 2, False)
    drafts = {d["draft"]: d for d in document["drafts"]}
    zlab, daocloud = drafts[ZLAB], drafts[DAOCLOUD]
    assert zlab["runnable"] and zlab["verdict"]["status"] == "planned" and "not_read" not in zlab
    assert daocloud["not_read"]["profile"] == DAOCLOUD_PROFILE
    assert codes(daocloud["preflight"]["findings"]) == ["DFT091"]
    assert daocloud["verdict"]["reasons"] == [f"not read (DFT091): {daocloud['not_read']['reason']}"]
    assert daocloud["refusal"]["kind"] == "setup"


def test_a_missing_local_draft_stays_an_error(
    offline_empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, document = run_json("plan", "--preset", PRESET, "-d", str(tmp_path / "no-such-draft"))
    assert code == 2 and document["error"]["kind"] == "source" and "plans" not in document
    # Shaped like a repo id, but its parent folder is here: a mistyped local path, not the Hub's.
    (tmp_path / "drafts").mkdir()
    monkeypatch.chdir(tmp_path)
    code, document = run_json("plan", "--preset", PRESET, "-d", ZLAB, "-d", "drafts/no-such-draft")
    assert code == 2 and "drafts/no-such-draft" in document["error"]["message"] and "plans" not in document
    code, document = run_json("smoke-test", "--preset", PRESET, "-d", "drafts/no-such-draft", "--dry-run")
    (draft,) = document["drafts"]
    assert code == 2 and "not_read" not in draft and draft["preflight"]["findings"] == []
    assert "drafts/no-such-draft" in draft["preflight"]["error"]["message"]


def test_a_draft_the_hub_says_does_not_exist_stays_an_error(hub: HubServer) -> None:
    """Online, the Hub answers that the repo does not exist (404): an error, as before."""
    code, document = run_json("plan", "-t", "example:tiny-target", "-d", DAOCLOUD)
    assert code == 2 and document["error"]["kind"] == "source" and "plans" not in document
    assert "no Hub repo of that name" in document["error"]["message"]


def test_an_unreachable_hub_names_the_unread_draft(hub: HubServer) -> None:
    """The Hub refusing connections (not offline): the same entry, saying that it was unreachable."""
    hub.stop()
    code, document = run_json("plan", "-t", "example:tiny-target", "-d", DAOCLOUD, "--timeout", "2")
    assert (code, document["exit_code"], document["ok"]) == (2, 2, False)
    (plan,) = document["plans"]
    assert "could not be reached" in plan["draft"]["not_read"]["reason"]
    assert plan["draft"]["not_read"]["profile"] == DAOCLOUD_PROFILE
    assert plan["target"]["location"] is not None and "not_read" not in plan["target"]
