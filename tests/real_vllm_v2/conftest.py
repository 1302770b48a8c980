"""The V2-on-CPU tier: vLLM's V2 DFlash speculators executed under Triton's interpreter.

Every test here carries the `real_vllm_v2` marker, which the default run deselects; the tier runs
them in the environment of one vLLM release, shared with the real-vLLM tier (`.ci/tier-vllm-v2.sh
RELEASE`, docs/tier-vllm-v2.md).
vLLM runs in child processes (`harness.py`), one per plugin state, because the plugin's patches
are process-global: `patched` registers it the way serving does (vLLM's plugin loader finds our
entry point), `stock` sets `VLLM_PLUGINS=` so that nothing registers it. Both start at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest

from dflash_tools.inspect import inspect_checkpoint
from dflash_tools_testing.demos import vllm_cpu_demo
from tests.real_vllm_v2 import workarounds

HARNESS = Path(__file__).parent / "harness.py"

# The scenario every draft runs: three requests of different lengths, at request-state slots that
# are not their batch rows, on shuffled KV blocks (block 0 is vLLM's null block), one slot of
# max_num_seqs left empty so that the kernel's padding is visible. Request 0 walks a cycle of the
# demo's pattern for 5 tokens (its drafts are rejected until the last L + 1 = 10 tokens walk one,
# then all accepted), request 1 is random (rejected throughout), request 2 walks for 8 tokens.
PROMPTS = [[52, 53, 45, 46, 47], [6, 18, 68, 103, 8, 86, 95, 99, 110, 24, 69, 101], [22, 23, 24, 25, 26, 18, 19, 20]]
PLAN: dict[str, Any] = {
    "prompts": PROMPTS,
    "state_indices": [2, 0, 3],
    "block_ids": [[5, 9, 1, 14, 3, 20], [2, 17, 8, 11, 23, 6], [12, 4, 19, 7, 15, 10]],
    "num_blocks_per_req": 6,
    "max_num_seqs": 4,
    "steps": 6,
}
# The generation: requests 0 and 2 of the scenario (the random one would only add blind steps),
# 16 tokens each.
GENERATE_REQUESTS = [0, 2]
GENERATE_MAX_TOKENS = 16


@dataclass(frozen=True)
class V2Draft:
    """One draft in one layout, with the geometry our own `inspect` derives for it."""

    name: str
    path: str
    target: str
    algorithm: str
    sample_from_anchor: bool
    k: int
    num_query_tokens: int

    @property
    def case(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "draft": self.path,
            "k": self.k,
            "algorithm": self.algorithm,
            "sample_from_anchor": self.sample_from_anchor,
        }


def layout(sample_from_anchor: bool) -> str:
    return "anchor-first" if sample_from_anchor else "bonus-anchor"


def installed_vllm() -> str:
    try:
        return version("vllm")
    except PackageNotFoundError:
        pytest.fail("the V2 tier needs vLLM installed; see .ci/tier-vllm-v2.sh")


@pytest.fixture(scope="session")
def vllm_version() -> str:
    found = installed_vllm()
    workarounds.for_version(found)  # refuses a release without a work-around table
    return found


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("real-vllm-v2")


def _draft(name: str, path: Path, target: Path) -> V2Draft:
    report = inspect_checkpoint(str(path))
    assert report.description is not None and report.geometry is not None, name
    geometry = report.geometry
    return V2Draft(
        name=name,
        path=str(path),
        target=str(target),
        algorithm=report.description.algorithm.value,
        sample_from_anchor=geometry.sample_from_anchor,
        k=geometry.num_speculative_tokens,
        num_query_tokens=geometry.num_query_tokens,
    )


@pytest.fixture(scope="session")
def drafts(workspace: Path) -> dict[str, V2Draft]:
    """The planted vllm-cpu-demo pair (its target, DFlash and DFlash2 drafts in both layouts),
    written here: the scenario's acceptance is known in advance only for the planted pattern (the
    bundled pair is trained, docs/cpu-smoke.md)."""
    demo = vllm_cpu_demo.write_planted_demo(workspace / "planted")
    target = demo["target"]
    found = {}
    for sample_from_anchor in (False, True):
        name = f"dflash@{layout(sample_from_anchor)}"
        found[name] = _draft(name, demo["zlab-dflash-anchor-first" if sample_from_anchor else "zlab-dflash"], target)
        name = f"dflash2@{layout(sample_from_anchor)}"
        path = vllm_cpu_demo.write_dflash2_draft(workspace / name, sample_from_anchor=sample_from_anchor)
        found[name] = _draft(name, path, target)
    return found


def _child_environment(workspace: Path, vllm_version: str, *, plugin: bool) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH_TOOLS_", "VLLM_", "TRITON_"))}
    environment.update(
        VLLM_TARGET_DEVICE="cpu",
        VLLM_USE_V2_MODEL_RUNNER="1",
        TRITON_INTERPRET="1",
        HF_HUB_OFFLINE="1",
        VLLM_CACHE_ROOT=str(workspace / "vllm-cache"),
        TRITON_CACHE_DIR=str(workspace / "triton-cache"),
    )
    for workaround in workarounds.for_version(vllm_version):
        environment.update(workaround.env)
    if not plugin:
        environment["VLLM_PLUGINS"] = ""  # vLLM's own plugin loader would register it otherwise
    return environment


_child_seconds: dict[str, tuple[float, float]] = {}


@pytest.fixture(scope="session")
def runs(vllm_version: str, workspace: Path, drafts: dict[str, V2Draft]) -> dict[str, dict[str, Any]]:
    """Both children, started together: `patched` (the plugin registered by vLLM's plugin loader)
    and `stock` (nothing registered). Each runs the scenario for every draft; the greedy generation
    runs for the anchor-first drafts in `patched` and for the bonus-anchor ones in `stock` (the
    plugin leaves those untouched), which also splits the work evenly between the two."""
    started: dict[str, subprocess.Popen[str]] = {}
    for state in ("patched", "stock"):
        folder = workspace / state
        folder.mkdir()
        plan = {**PLAN, "cases": {name: draft.case for name, draft in drafts.items()}}
        plan["generate"] = {
            "requests": GENERATE_REQUESTS,
            "max_tokens": GENERATE_MAX_TOKENS,
            "cases": [name for name, draft in drafts.items() if draft.sample_from_anchor is (state == "patched")],
        }
        (folder / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
        process = subprocess.Popen(
            [sys.executable, str(HARNESS), str(folder / "plan.json")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_child_environment(workspace, vllm_version, plugin=state == "patched"),
            cwd=folder,
        )
        started[state] = process
    outputs = {}
    try:
        for state, process in started.items():
            outputs[state] = process.communicate(timeout=900)
    finally:
        for process in started.values():  # a timeout must not leave the other child running
            if process.poll() is None:
                process.kill()
                process.wait()
    results = {}
    for state, (stdout, stderr) in outputs.items():
        assert started[state].returncode == 0, f"{state} child failed:\n{stderr[-6000:]}"
        document: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
        document["stderr"] = stderr
        _child_seconds[state] = (document["seconds"], document["cpu_seconds"])
        results[state] = document
    return results


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for state, (seconds, cpu_seconds) in _child_seconds.items():
        terminalreporter.write_line(f"real_vllm_v2: the {state} child ran {seconds} s ({cpu_seconds} s of CPU)")


@pytest.fixture(scope="session")
def patched(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return runs["patched"]


@pytest.fixture(scope="session")
def stock(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return runs["stock"]
