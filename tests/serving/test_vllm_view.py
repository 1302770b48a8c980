"""`inspect --engine vllm`: how the vLLM in this environment will serve an anchor-first draft.

vLLM itself is described here by source trees written in the test (version, V1 runner and hook
points, native anchor sampling), read through the same `capability_from_sources` that reads an
installed vLLM; the tiers in tests/real_vllm check the verdicts against what the real vLLM 0.33.0
and 0.34.0 do.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.engine_rules import vllm_plugin_versions
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.local import examples_dir
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.vllm_capability import VllmCapability, capability_from_sources
from dflash_tools.serving.vllm_view import inspect_for_vllm
from dflash_tools.vllm_plugin.sources import directory_reader

ANCHOR_DFLASH = str(examples_dir() / "engine-demo" / "zlab-dflash-anchor-first")
BONUS_DFLASH = "example:zlab-dflash"
ANCHOR_DFLASH2 = "example:zlab-dflash2-anchor-first"


NATIVE_SPECULATOR = """
class DFlashSpeculator:
    def __init__(self, vllm_config, device):
        dflash_config = self.draft_model_config.hf_config.dflash_config
        self.sample_from_anchor = bool(dflash_config.get("sample_from_anchor", False))
        self.num_query_per_req = self.num_speculative_steps + (0 if self.sample_from_anchor else 1)
"""


def vllm_tree(root: Path, *, hooks: bool = True, native: bool = False, v1: bool = True) -> Path:
    """A vLLM source tree: with a V1 runner (0.33.0 and older) or without (0.34.0 on)."""
    files = {
        "vllm/config/vllm.py": "class VllmConfig:\n"
        + ("    def _get_v1_model_runner_unsupported_features(self):\n        return []\n" if hooks else ""),
        "vllm/v1/spec_decode/dflash.py": "class DFlashProposer(object):\n    pass\n" if hooks else "",
    }
    if v1:
        files["vllm/v1/worker/gpu_model_runner.py"] = "class GPUModelRunner:\n    pass\n"
    if native:
        files["vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"] = NATIVE_SPECULATOR
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


def capability(tree: Path, version: str = "0.32.0", registered: bool = True, **environ: str) -> VllmCapability:
    return capability_from_sources(version, directory_reader(tree), registered=registered, environ=environ)


def errors(source: str, vllm: VllmCapability) -> list[tuple[str, str]]:
    report = inspect_checkpoint(source)
    assert report.findings == [f for f in report.findings if f.severity.value != "error"]  # clean without engine
    findings = inspect_for_vllm(load_checkpoint(source), vllm).findings
    return [(f.code, f.message) for f in findings if f.severity.value == "error"]


def test_the_guard_makes_another_release_refuse(tmp_path: Path) -> None:
    (finding,) = errors(ANCHOR_DFLASH, capability(vllm_tree(tmp_path)))
    assert finding[0] == "DFT041" and "vLLM 0.32.0 refuses it" in finding[1]
    assert f"(supported: {', '.join(vllm_plugin_versions())})" in finding[1]


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
    for version in ("0.32.0", "0.33.0"):
        (finding,) = errors(ANCHOR_DFLASH, capability(vllm_tree(tmp_path), version, registered, **environ))
        assert finding[0] == "DFT051" and why in finding[1]
        assert "bonus-anchor layout without an error" in finding[1]


def test_no_hook_point_means_no_guard(tmp_path: Path) -> None:
    (finding,) = errors(ANCHOR_DFLASH, capability(vllm_tree(tmp_path, hooks=False)))
    assert finding[0] == "DFT051" and "no hook point for the plugin's V1 guard" in finding[1]


@pytest.mark.parametrize(
    ("registered", "environ"),
    [(False, {}), (True, {"VLLM_PLUGINS": ""}), (True, {"DFLASH_TOOLS_PLUGIN_DISABLE": "1"}), (True, {})],
)
def test_without_a_v1_runner_nothing_is_served_silently(
    tmp_path: Path, registered: bool, environ: dict[str, str]
) -> None:
    """0.34.0 removed V1: an anchor-first draft the plugin does not serve is refused, never mis-served."""
    tree = vllm_tree(tmp_path, hooks=False, v1=False)
    for version in ("0.34.0", "999.0.0"):  # and a release no table can ever be
        vllm = capability(tree, version, registered, **environ)
        assert vllm.anchor_first_status == "refused" and not vllm.has_v1_runner
        (finding,) = errors(ANCHOR_DFLASH, vllm)
        assert finding[0] == "DFT041", finding
        assert "V1" not in finding[1] and "bonus-anchor layout" not in finding[1]


def test_dflash2_is_refused_not_mis_served(tmp_path: Path) -> None:
    (finding,) = errors(ANCHOR_DFLASH2, capability(vllm_tree(tmp_path), VLLM_PLUGINS=""))
    assert finding[0] == "DFT041"


def test_served_as_declared_reports_no_error(tmp_path: Path) -> None:
    tree = vllm_tree(tmp_path)
    assert errors(BONUS_DFLASH, capability(tree, VLLM_PLUGINS="")) == []  # bonus-anchor: stock is right
    native = capability(vllm_tree(tmp_path / "n", native=True, v1=False), "999.1.0", VLLM_PLUGINS="")
    assert native.support == "native" and native.anchor_first_status == "native"
    assert errors(ANCHOR_DFLASH, native) == []
    (info,) = inspect_for_vllm(load_checkpoint(ANCHOR_DFLASH), native).findings
    assert (info.code, info.message) == ("DFT053", "vLLM 999.1.0 (installed here) serves it itself")


def test_cli_without_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # unimportable, whether or not it is installed
    result = CliRunner().invoke(app, ["inspect", ANCHOR_DFLASH, "--engine", "vllm", "--json"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert [f["code"] for f in document["findings"]] == ["DFT052"]
    assert document["vllm"]["support"] == "absent" and document["vllm"]["v1_refuses_anchor_first"] is False
    usage = CliRunner().invoke(app, ["inspect", ANCHOR_DFLASH, "--engine", "tensorrt"])
    assert usage.exit_code == 2 and "unknown engine" in usage.stderr
