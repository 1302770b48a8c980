"""When the plugin does not patch, real vLLM refuses anchor-first drafts instead of mis-drafting them.

Stock 0.33.0's V1 runner accepts an anchor-first DFlash draft and drafts it in the bonus-anchor
layout without an error (`test_stock_vllm`); 0.34.0 has no V1 runner, and its V2 runner refuses
the draft. Each way the plugin can refuse is produced here on the real installed vLLM, through the
environment only:

- an unknown release: a `vllm-0.35.0.dist-info` ahead of site-packages on PYTHONPATH;
- changed source: a copy of the vllm package (symlinks, one file edited in the layout code);
- a half-applied patch: another plugin replaced a function first (`probe.py --foreign-plugin`);
- disabled (`DFLASH_TOOLS_PLUGIN_DISABLE=1`): vLLM left alone, and the log says what that means.

And the other way round: a copy whose own code serves anchor-first drafts is left alone.
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

from dflash_tools.vllm_plugin.fingerprints import DFLASH2_MODEL_FILE
from tests.real_vllm.conftest import HAS_V1, VLLM_VERSION, Draft, ProbeRunner

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


UNKNOWN_RELEASE = "0.35.0"


@pytest.fixture(scope="module")
def other_release(workspace: Path) -> Path:
    """A folder that makes `importlib.metadata.version("vllm")` answer a release the plugin does not know."""
    folder = workspace / f"vllm-{UNKNOWN_RELEASE}"
    info = folder / f"vllm-{UNKNOWN_RELEASE}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {UNKNOWN_RELEASE}\n", encoding="utf-8")
    return folder


def mirror_vllm(root: Path, vllm_root: Path, edits: dict[str, Callable[[str], str]]) -> Path:
    """The installed vllm package mirrored by symlinks, with the files in `edits` edited.

    `vllm/__init__.py` is a copy so that the plugin locates the mirror, not site-packages. The
    edited files' folders get no byte-code link, and none is written (PYTHONDONTWRITEBYTECODE).
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
        edited_here = any(relative == Path(path).parent for path in edits)
        if (Path(directory) / "__pycache__").is_dir() and not edited_here:
            (root / relative / "__pycache__").symlink_to(Path(directory) / "__pycache__")
    init = root / "vllm/__init__.py"
    init.unlink()
    init.write_bytes((source / "__init__.py").read_bytes())
    for path, edit in edits.items():
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

    return mirror_vllm(workspace / "edited-site", vllm_root, {LAYOUT_FILE: edit})


def accept_anchor_sampling(text: str) -> str:
    """DFlashSpeculator.__init__ reading the flag and sizing the queries by it (the upstream change)."""
    start = text.index('        if dflash_config.get("sample_from_anchor", False):\n            raise ValueError(')
    pinned = "        self.sample_from_anchor = False\n"
    end = text.index(pinned, start) + len(pinned)
    native = (
        '        self.sample_from_anchor = bool(dflash_config.get("sample_from_anchor", False))\n'
        "        self.num_query_per_req = self.num_speculative_steps + (0 if self.sample_from_anchor else 1)\n"
    )
    return text[:start] + native + text[end:]


def conv_follows_queries(text: str) -> str:
    stock = "block_size=1 + speculative_config.num_speculative_tokens"
    assert text.count(stock) == 1
    anchor = '(config.dflash_config.get("sample_from_anchor") is True)'
    return text.replace(stock, f"block_size=speculative_config.num_speculative_tokens + (0 if {anchor} else 1)")


@pytest.fixture(scope="module")
def native_vllm(workspace: Path, vllm_root: Path) -> Path:
    """A vLLM whose own code serves anchor-first DFlash drafts (K queries, conv block K)."""
    edits = {LAYOUT_FILE: accept_anchor_sampling, DFLASH2_MODEL_FILE: conv_follows_queries}
    return mirror_vllm(workspace / "native-site", vllm_root, edits)


def assert_refused_not_misdrafted(result: dict[str, Any], stock: dict[str, Any], reason: str) -> None:
    plugin = result["plugin"]
    assert plugin["status"] == "refused" and reason in plugin["reason"], plugin
    anchor, bonus, anchor2 = (result["cases"][n] for n in (ANCHOR, BONUS, ANCHOR2))
    # V2 refuses the anchor-first drafts as stock does; nothing of the change is applied.
    assert "sample_from_anchor=True is not supported for DFlash" in anchor["speculator_error"]
    assert "sample_from_anchor=True is not supported for DFlash" in anchor2["speculator_error"]
    for name in (ANCHOR, BONUS, ANCHOR2):
        assert result["cases"][name]["num_lookahead_tokens"] == stock["cases"][name]["num_lookahead_tokens"]
        assert result["cases"][name]["compute_hash"] == stock["cases"][name]["compute_hash"]
    # Bonus-anchor drafts are served exactly as by stock vLLM.
    assert bonus["speculator"]["num_query_per_req"] == stock["cases"][BONUS]["speculator"]["num_query_per_req"]
    assert "will be refused by vLLM" not in result["stderr"]
    if not HAS_V1:
        # 0.34.0: no V1 runner, so no guard is installed and none is claimed.
        assert plugin["v1_runner"] is False and "v1_refusal" not in plugin
        assert "this vLLM has no V1 runner: they fail to start, never run in the wrong layout" in result["stderr"]
        assert "V1 guard" not in result["stderr"]
        return
    # 0.33.0: V1 refuses the anchor-first DFlash draft it would otherwise take silently.
    assert "Model Runner V1 does not support: anchor-sampling DFlash drafts" in anchor["v1_config"]
    assert "not patching this vLLM" in anchor["v1_config"]
    assert plugin["v1_refusal"] == ["v1_unsupported_features", "v1_dflash_proposer_init"]
    assert "DFlash candidate-head drafts" in anchor2["v1_config"]
    assert bonus["v1_config"] == "accepted" and bonus["v1_proposer"] == "accepted: DFlashProposer"
    assert "the plugin's guard makes the V1 runner refuse them too" in result["stderr"]


def test_stock_takes_anchor_first_dflash_silently_only_with_v1(stock: dict[str, Any]) -> None:
    """The fact the refuse path exists for: on 0.33.0, no error anywhere on the V1 path. On 0.34.0
    stock refuses it loudly (its only runner, V2, raises when it builds the drafter)."""
    if HAS_V1:
        assert stock["cases"][ANCHOR]["v1_config"] == "accepted"
        assert stock["cases"][ANCHOR]["v1_proposer"] == "accepted: DFlashProposer"
    else:
        assert "no longer supported: Model Runner V1 has been removed" in stock["cases"][ANCHOR]["v1_config"]
        assert "sample_from_anchor=True is not supported for DFlash" in stock["cases"][ANCHOR]["speculator_error"]


def test_unknown_release_refuses(
    run_probe: ProbeRunner, some: dict[str, Draft], stock: dict[str, Any], other_release: Path
) -> None:
    result = run_probe(some, register=True, pythonpath=[other_release])
    assert_refused_not_misdrafted(
        result, stock, f"vLLM {UNKNOWN_RELEASE} is not a release the plugin was written against"
    )


def test_changed_layout_code_refuses(
    run_probe: ProbeRunner, some: dict[str, Draft], stock: dict[str, Any], edited_vllm: Path
) -> None:
    result = run_probe(some, register=True, pythonpath=[edited_vllm], env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert_refused_not_misdrafted(result, stock, f"{LAYOUT_FILE}:prepare_dflash_inputs: source differs")
    assert "edited-site" in result["vllm_file"]  # the edited copy is what ran


def test_the_upstream_change_is_left_alone(
    run_probe: ProbeRunner, some: dict[str, Draft], stock: dict[str, Any], native_vllm: Path
) -> None:
    """A vLLM whose own speculator serves the layout: the plugin steps aside, whatever the version."""
    result = run_probe(some, register=True, pythonpath=[native_vllm], env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert result["plugin"]["status"] == "native", result["plugin"]
    assert f"vLLM {VLLM_VERSION} serves anchor-first DFlash drafts itself" in result["plugin"]["reason"]
    assert "native-site" in result["vllm_file"]
    for name in (ANCHOR, BONUS, ANCHOR2):  # nothing patched, no guard: vLLM's own code throughout
        assert result["cases"][name]["num_lookahead_tokens"] == stock["cases"][name]["num_lookahead_tokens"]
        assert result["cases"][name]["compute_hash"] == stock["cases"][name]["compute_hash"]
        assert result["cases"][name]["v1_config"] == stock["cases"][name]["v1_config"]
    # Its own code now drafts with K queries and samples from the anchor; the plugin did none of it.
    assert result["cases"][ANCHOR]["speculator"] == {
        "class": "DFlashSpeculator",
        "num_query_per_req": some[ANCHOR].k,
        "sample_from_anchor": True,
    }
    assert result["cases"][ANCHOR2]["conv_block_sizes"] == [some[ANCHOR2].k] * 2


def test_half_applied_patch_refuses(run_probe: ProbeRunner, some: dict[str, Draft], stock: dict[str, Any]) -> None:
    result = run_probe(some, register=True, foreign_plugin=True)
    assert_refused_not_misdrafted(result, stock, "another plugin may have replaced it")


def test_required_plugin_fails_the_process_on_refusal(
    run_probe: ProbeRunner, some: dict[str, Draft], other_release: Path
) -> None:
    result = run_probe(
        {ANCHOR: some[ANCHOR]}, register=True, pythonpath=[other_release], env={"DFLASH_TOOLS_REQUIRE_PLUGIN": "1"}
    )
    assert "PluginRefused" in result["register_error"] and UNKNOWN_RELEASE in result["register_error"]


def test_disabled_leaves_vllm_alone_and_says_so(
    run_probe: ProbeRunner, some: dict[str, Draft], stock: dict[str, Any]
) -> None:
    result = run_probe(some, register=True, env={"DFLASH_TOOLS_PLUGIN_DISABLE": "1"})
    assert result["plugin"]["status"] == "disabled"
    for name in (ANCHOR, BONUS, ANCHOR2):  # the escape hatch is stock vLLM
        assert result["cases"][name]["compute_hash"] == stock["cases"][name]["compute_hash"]
        assert result["cases"][name]["v1_config"] == stock["cases"][name]["v1_config"]
    if HAS_V1:
        assert (
            "serves anchor-first DFlash (not DFlash2) drafts in the bonus-anchor layout without an error"
            in (result["stderr"])
        )
    else:
        assert "vLLM runs unpatched: the V2 runner refuses anchor-first DFlash drafts" in result["stderr"]


# --- inspect --engine vllm agrees with what vLLM did ------------------------------------------


def inspect_codes(
    draft: Draft, env: dict[str, str], pythonpath: list[Path] | None = None, severity: str = "error"
) -> list[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH_TOOLS_", "VLLM_"))}
    # The findings checked here come from vLLM's files; asking vLLM itself (a child process, some
    # 7 s of CPU per call) is test_installed_vllm.py's.
    environment["DFLASH_TOOLS_ENGINE_READING"] = "0"
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
    errors = [f["code"] for f in document["findings"] if f["severity"] == "error"]
    assert completed.returncode == (1 if errors else 0), completed.stderr
    return [f["code"] for f in document["findings"] if f["severity"] == severity]


def test_inspect_reports_the_silent_case(drafts: dict[str, Draft], stock: dict[str, Any]) -> None:
    # 0.33.0: stock V1 would take it silently (DFT051); 0.34.0: nothing can, it is refused (DFT041).
    silent = ["DFT051"] if HAS_V1 else ["DFT041"]
    assert (stock["cases"][ANCHOR]["v1_config"] == "accepted") is HAS_V1
    assert inspect_codes(drafts[ANCHOR], {"VLLM_PLUGINS": ""}) == silent
    assert inspect_codes(drafts[ANCHOR], {"DFLASH_TOOLS_PLUGIN_DISABLE": "1"}) == silent
    assert inspect_codes(drafts[BONUS], {"VLLM_PLUGINS": ""}) == []
    # DFlash2 is refused by stock V1 and V2 alike: an error, but not the silent one.
    assert inspect_codes(drafts[ANCHOR2], {"VLLM_PLUGINS": ""}) == ["DFT041"]


def test_inspect_agrees_with_the_plugin(drafts: dict[str, Draft], patched: dict[str, Any], other_release: Path) -> None:
    assert patched["cases"][ANCHOR]["speculator"]["sample_from_anchor"] is True
    assert inspect_codes(drafts[ANCHOR], {}) == []  # served by the plugin, and it says so:
    assert inspect_codes(drafts[ANCHOR], {}, severity="info") == ["DFT053"]
    # Another release: the guard refuses it (test_unknown_release_refuses), so refused, not silent.
    assert inspect_codes(drafts[ANCHOR], {}, [other_release]) == ["DFT041"]
