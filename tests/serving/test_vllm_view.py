"""`inspect --engine vllm`: how the vLLM in this environment will serve an anchor-first draft.

vLLM itself is described here by source trees written in the test (version, hook points, the
upstream change's names), read through the same `capability_from_sources` that reads an installed
vLLM; the tier in tests/real_vllm checks the verdicts against what the real vLLM 0.33.0 does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.local import examples_dir
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.vllm_capability import VllmCapability, capability_from_sources
from dflash_tools.serving.vllm_view import inspect_for_vllm
from dflash_tools.vllm_plugin.sources import directory_reader

ANCHOR_DFLASH = str(examples_dir() / "engine-demo" / "zlab-dflash-anchor-first")
BONUS_DFLASH = "example:zlab-dflash"
ANCHOR_DFLASH2 = "example:zlab-dflash2-anchor-first"


def vllm_tree(root: Path, *, hooks: bool = True, native: bool = False) -> Path:
    files = {
        "vllm/config/vllm.py": "class VllmConfig:\n"
        + ("    def _get_v1_model_runner_unsupported_features(self):\n        return []\n" if hooks else ""),
        "vllm/v1/spec_decode/dflash.py": "class DFlashProposer(object):\n    pass\n" if hooks else "",
        "vllm/config/speculative.py": "num_dflash_query_tokens = None\n" if native else "",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


def capability(tree: Path, version: str = "0.34.0", registered: bool = True, **environ: str) -> VllmCapability:
    return capability_from_sources(version, directory_reader(tree), registered=registered, environ=environ)


def errors(source: str, vllm: VllmCapability) -> list[tuple[str, str]]:
    report = inspect_checkpoint(source)
    assert report.findings == [f for f in report.findings if f.severity.value != "error"]  # clean without engine
    findings = inspect_for_vllm(load_checkpoint(source), vllm).findings
    return [(f.code, f.message) for f in findings if f.severity.value == "error"]


def test_the_guard_makes_another_release_refuse(tmp_path: Path) -> None:
    (finding,) = errors(ANCHOR_DFLASH, capability(vllm_tree(tmp_path)))
    assert finding[0] == "DFT041" and "vLLM 0.34.0 refuses it" in finding[1]


@pytest.mark.parametrize(
    ("registered", "environ", "why"),
    [
        (False, {}, "the dflash-tools plugin is not installed with this vLLM"),
        (True, {"VLLM_PLUGINS": ""}, "VLLM_PLUGINS does not list dflash_tools"),
        (True, {"DFLASH_TOOLS_PLUGIN_DISABLE": "1"}, "the dflash-tools plugin is disabled"),
    ],
)
def test_without_the_plugin_v1_serves_it_silently(
    tmp_path: Path, registered: bool, environ: dict[str, str], why: str
) -> None:
    for version in ("0.34.0", "0.33.0"):
        (finding,) = errors(ANCHOR_DFLASH, capability(vllm_tree(tmp_path), version, registered, **environ))
        assert finding[0] == "DFT051" and why in finding[1]
        assert "bonus-anchor layout without an error" in finding[1]


def test_no_hook_point_means_no_guard(tmp_path: Path) -> None:
    (finding,) = errors(ANCHOR_DFLASH, capability(vllm_tree(tmp_path, hooks=False)))
    assert finding[0] == "DFT051" and "no hook point for the plugin's V1 guard" in finding[1]


def test_dflash2_is_refused_not_mis_served(tmp_path: Path) -> None:
    (finding,) = errors(ANCHOR_DFLASH2, capability(vllm_tree(tmp_path), VLLM_PLUGINS=""))
    assert finding[0] == "DFT041"


def test_served_as_declared_reports_nothing(tmp_path: Path) -> None:
    tree = vllm_tree(tmp_path)
    assert errors(BONUS_DFLASH, capability(tree, VLLM_PLUGINS="")) == []  # bonus-anchor: stock is right
    assert errors(ANCHOR_DFLASH, capability(vllm_tree(tmp_path / "n", native=True), VLLM_PLUGINS="")) == []


def test_cli_without_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # unimportable, whether or not it is installed
    result = CliRunner().invoke(app, ["inspect", ANCHOR_DFLASH, "--engine", "vllm", "--json"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert [f["code"] for f in document["findings"]] == ["DFT052"]
    assert document["vllm"]["support"] == "absent" and document["vllm"]["v1_refuses_anchor_first"] is False
    usage = CliRunner().invoke(app, ["inspect", ANCHOR_DFLASH, "--engine", "tensorrt"])
    assert usage.exit_code == 2 and "unknown engine" in usage.stderr
