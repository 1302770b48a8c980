"""When the plugin does not patch, real vLLM refuses anchor-first drafts instead of mis-drafting them.

Stock 0.33.0's V1 runner accepts an anchor-first DFlash draft and drafts it in the bonus-anchor
layout without an error (`test_stock_vllm`). Each way the plugin can refuse is produced here on
the real installed vLLM, through the environment only:

- an unknown release: a `vllm-0.34.0.dist-info` ahead of site-packages on PYTHONPATH;
- changed source: a copy of the vllm package (symlinks, one file edited in the layout code);
- a half-applied patch: another plugin replaced a function first (`probe.py --foreign-plugin`);
- disabled (`DFLASH_TOOLS_PLUGIN_DISABLE=1`): vLLM left alone, and the log says what that means.

`inspect --engine vllm` is run in the same environments and must agree with what vLLM did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.real_vllm.conftest import Draft, ProbeRunner

pytestmark = pytest.mark.real_vllm

ANCHOR, BONUS, ANCHOR2 = (
    "zlab-dflash@anchor-first",
    "zlab-dflash@bonus-anchor",
    "zlab-dflash2-anchor-first@anchor-first",
)
LAYOUT_FILE = "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"


@pytest.fixture(scope="module")
def some(drafts: dict[str, Draft]) -> dict[str, Draft]:
    return {name: drafts[name] for name in (ANCHOR, BONUS, ANCHOR2)}


@pytest.fixture(scope="module")
def other_release(workspace: Path) -> Path:
    """A folder that makes `importlib.metadata.version("vllm")` answer 0.34.0."""
    folder = workspace / "vllm-0.34.0"
    info = folder / "vllm-0.34.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.0\n", encoding="utf-8")
    return folder


def mirror_vllm(root: Path, vllm_root: Path, path: str, edit: Callable[[str], str]) -> Path:
    """The installed vllm package mirrored by symlinks, with the file `path` edited.

    `vllm/__init__.py` is a copy so that the plugin locates the mirror, not site-packages. The
    edited file's folder gets no byte-code link, and none is written (PYTHONDONTWRITEBYTECODE).
    """
    if root.exists():
        return root
    source = vllm_root / "vllm"
    for directory, subdirs, files in os.walk(source):
        relative = Path(directory).relative_to(vllm_root)
        (root / relative).mkdir(parents=True, exist_ok=True)
        for name in files:
            (root / relative / name).symlink_to(Path(directory) / name)
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        if (Path(directory) / "__pycache__").is_dir() and relative != Path(path).parent:
            (root / relative / "__pycache__").symlink_to(Path(directory) / "__pycache__")
    init = root / "vllm/__init__.py"
    init.unlink()
    init.write_bytes((source / "__init__.py").read_bytes())
    edited = root / path
    text = edited.read_text(encoding="utf-8")
    edited.unlink()
    edited.write_text(edit(text), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def edited_vllm(workspace: Path, vllm_root: Path) -> Path:
    """`prepare_dflash_inputs` edited, behaviour-neutral (a comment in the layout code the plugin
    does not wrap): any change there must make the plugin refuse."""

    def edit(text: str) -> str:
        marker = "def prepare_dflash_inputs("
        assert text.count(marker) == 1
        head, tail = text.split(marker)
        body_start = tail.index(":\n") + 2
        return head + marker + tail[:body_start] + "    # edited upstream\n" + tail[body_start:]

    return mirror_vllm(workspace / "edited-site", vllm_root, LAYOUT_FILE, edit)


@pytest.fixture(scope="module")
def native_vllm(workspace: Path, vllm_root: Path) -> Path:
    """A vLLM whose sources carry a name the upstream change introduces."""
    path = "vllm/config/speculative.py"
    return mirror_vllm(
        workspace / "native-site", vllm_root, path, lambda text: text + "\nnum_dflash_query_tokens = None\n"
    )


def assert_refused_not_misdrafted(result: dict[str, Any], stock: dict[str, Any], reason: str) -> None:
    plugin = result["plugin"]
    assert plugin["status"] == "refused" and reason in plugin["reason"], plugin
    anchor, bonus, anchor2 = (result["cases"][n] for n in (ANCHOR, BONUS, ANCHOR2))
    # V1 refuses the anchor-first DFlash draft it would otherwise take silently ...
    assert "Model Runner V1 does not support: anchor-sampling DFlash drafts" in anchor["v1_config"]
    assert "not patching this vLLM" in anchor["v1_config"]
    assert plugin["v1_refusal"] == ["v1_unsupported_features", "v1_dflash_proposer_init"]
    # ... and V2 refuses it as stock does; nothing of the change is applied.
    assert "sample_from_anchor=True is not supported for DFlash" in anchor["speculator_error"]
    assert "sample_from_anchor=True is not supported for DFlash" in anchor2["speculator_error"]
    assert "DFlash candidate-head drafts" in anchor2["v1_config"]
    for name in (ANCHOR, BONUS, ANCHOR2):
        assert result["cases"][name]["num_lookahead_tokens"] == stock["cases"][name]["num_lookahead_tokens"]
    # Bonus-anchor drafts are served exactly as by stock vLLM.
    assert bonus["v1_config"] == "accepted" and bonus["v1_proposer"] == "accepted: DFlashProposer"
    assert bonus["speculator"]["num_query_per_req"] == stock["cases"][BONUS]["speculator"]["num_query_per_req"]
    assert "the plugin's guard makes the V1 runner refuse them too" in result["stderr"]
    assert "will be refused by vLLM" not in result["stderr"]


def test_stock_v1_takes_anchor_first_dflash_silently(stock: dict[str, Any]) -> None:
    """The fact the refuse path exists for: no error anywhere on the V1 path."""
    assert stock["cases"][ANCHOR]["v1_config"] == "accepted"
    assert stock["cases"][ANCHOR]["v1_proposer"] == "accepted: DFlashProposer"


def test_unknown_release_refuses(
    run_probe: ProbeRunner, some: dict[str, Draft], stock: dict[str, Any], other_release: Path
) -> None:
    result = run_probe(some, register=True, pythonpath=[other_release])
    assert_refused_not_misdrafted(result, stock, "vLLM 0.34.0 is neither a release the plugin was written against")


def test_changed_layout_code_refuses(
    run_probe: ProbeRunner, some: dict[str, Draft], stock: dict[str, Any], edited_vllm: Path
) -> None:
    result = run_probe(some, register=True, pythonpath=[edited_vllm], env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert_refused_not_misdrafted(result, stock, f"{LAYOUT_FILE}:prepare_dflash_inputs: source differs")
    assert "edited-site" in result["vllm_file"]  # the edited copy is what ran


def test_the_upstream_change_is_left_alone(
    run_probe: ProbeRunner, some: dict[str, Draft], stock: dict[str, Any], native_vllm: Path
) -> None:
    result = run_probe(some, register=True, pythonpath=[native_vllm], env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert result["plugin"]["status"] == "native", result["plugin"]
    assert "native-site" in result["vllm_file"]
    for name in (ANCHOR, BONUS, ANCHOR2):  # nothing patched, no guard: vLLM's own code throughout
        assert result["cases"][name]["num_lookahead_tokens"] == stock["cases"][name]["num_lookahead_tokens"]
        assert result["cases"][name]["v1_config"] == stock["cases"][name]["v1_config"]


def test_half_applied_patch_refuses(run_probe: ProbeRunner, some: dict[str, Draft], stock: dict[str, Any]) -> None:
    result = run_probe(some, register=True, foreign_plugin=True)
    assert_refused_not_misdrafted(result, stock, "another plugin may have replaced it")


def test_required_plugin_fails_the_process_on_refusal(
    run_probe: ProbeRunner, some: dict[str, Draft], other_release: Path
) -> None:
    result = run_probe(
        {ANCHOR: some[ANCHOR]}, register=True, pythonpath=[other_release], env={"DFLASH_TOOLS_REQUIRE_PLUGIN": "1"}
    )
    assert "PluginRefused" in result["register_error"] and "0.34.0" in result["register_error"]


def test_disabled_leaves_vllm_alone_and_says_so(
    run_probe: ProbeRunner, some: dict[str, Draft], stock: dict[str, Any]
) -> None:
    result = run_probe(some, register=True, env={"DFLASH_TOOLS_PLUGIN_DISABLE": "1"})
    assert result["plugin"]["status"] == "disabled"
    assert result["cases"][ANCHOR]["v1_config"] == "accepted"  # the escape hatch is stock vLLM
    assert result["cases"][ANCHOR]["compute_hash"] == stock["cases"][ANCHOR]["compute_hash"]
    assert (
        "serves anchor-first DFlash (not DFlash2) drafts in the bonus-anchor layout without an error"
        in (result["stderr"])
    )


# --- inspect --engine vllm agrees with what vLLM did ------------------------------------------


def inspect_codes(draft: Draft, env: dict[str, str], pythonpath: list[Path] | None = None) -> list[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH_TOOLS_", "VLLM_"))}
    environment.update(env)
    if pythonpath:
        environment["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    completed = subprocess.run(
        [sys.executable, "-m", "dflash_tools", "inspect", draft.path, "--engine", "vllm", "--json"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )
    document = json.loads(completed.stdout)
    codes = [f["code"] for f in document["findings"] if f["severity"] == "error"]
    assert completed.returncode == (1 if codes else 0), completed.stderr
    return codes


def test_inspect_reports_the_silent_case(drafts: dict[str, Draft], stock: dict[str, Any]) -> None:
    assert stock["cases"][ANCHOR]["v1_config"] == "accepted"
    assert inspect_codes(drafts[ANCHOR], {"VLLM_PLUGINS": ""}) == ["DFT051"]
    assert inspect_codes(drafts[ANCHOR], {"DFLASH_TOOLS_PLUGIN_DISABLE": "1"}) == ["DFT051"]
    assert inspect_codes(drafts[BONUS], {"VLLM_PLUGINS": ""}) == []
    # DFlash2 is refused by stock V1 and V2 alike: an error, but not the silent one.
    assert inspect_codes(drafts[ANCHOR2], {"VLLM_PLUGINS": ""}) == ["DFT041"]


def test_inspect_agrees_with_the_plugin(drafts: dict[str, Draft], patched: dict[str, Any], other_release: Path) -> None:
    assert patched["cases"][ANCHOR]["speculator"]["sample_from_anchor"] is True
    assert inspect_codes(drafts[ANCHOR], {}) == []  # served by the plugin
    # Another release: the guard refuses it (test_unknown_release_refuses), so refused, not silent.
    assert inspect_codes(drafts[ANCHOR], {}, [other_release]) == ["DFT041"]
