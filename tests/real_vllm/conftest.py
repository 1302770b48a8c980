"""The real-vLLM tiers: vLLM 0.33.0 or 0.34.0 for CPU, each in its own environment (docs/tier-vllm.md).

Every test here carries the `real_vllm` marker, which the default run deselects; each tier runs
them with its environment's Python: `bash .ci/tier-vllm.sh 0.33.0` and `bash .ci/tier-vllm.sh
0.34.0`. The release under test is `DFLASH_TOOLS_TIER_VLLM` (set by the script, 0.33.0 when
unset); what the tests expect of it (a V1 runner or not) comes from the project's engine table
for that release (`dflash_tools/engine_rules/`). vLLM's objects are built in child processes
(`probe.py`), one per plugin state, because the plugin's patches are process-global; the serving
plan's launch lines are parsed in one more (`launch_parse.py`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest

from dflash_tools.convert import convert_checkpoint
from dflash_tools.engine_rules import EngineRules, get_rules
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.local import examples_dir
from dflash_tools.vllm_plugin.sources import installed_package_root

PROBE = Path(__file__).parent / "probe.py"
VLLM_VERSION = os.environ.get("DFLASH_TOOLS_TIER_VLLM", "0.33.0")
_rules = get_rules(f"vllm=={VLLM_VERSION}")
assert _rules is not None, f"no engine table for vLLM {VLLM_VERSION}"
RULES: EngineRules = _rules
HAS_V1 = RULES.has_v1_runner  # 0.33.0: yes; 0.34.0: removed
# Every bundled DFlash / DFlash2 draft vLLM has a loader for: both dialects, both algorithms.
EXAMPLES = (
    "zlab-dflash",
    "zlab-dflash2",
    "zlab-dflash2-anchor-first",
    "speculators-dflash",
    "speculators-dflash-legacy",
    "speculators-dflash2",
)


@dataclass(frozen=True)
class Draft:
    """One bundled draft in one layout, with the geometry `inspect` derives for it."""

    name: str
    path: str
    algorithm: str
    sample_from_anchor: bool
    k: int
    num_query_tokens: int

    @property
    def dflash2(self) -> bool:
        return self.algorithm == "dflash2"


@pytest.fixture(scope="session")
def vllm_root() -> Path:
    root = installed_package_root("vllm")
    try:
        installed = version("vllm")
    except PackageNotFoundError:
        installed = None
    if root is None or installed != VLLM_VERSION:
        pytest.fail(
            f"the real-vLLM tier needs vLLM {VLLM_VERSION} installed (found {installed}); "
            f"see .ci/tier-vllm.sh {VLLM_VERSION}"
        )
    return root


def _draft(name: str, path: Path) -> Draft:
    report = inspect_checkpoint(str(path))
    assert report.description is not None and report.geometry is not None, name
    geometry = report.geometry
    return Draft(
        name=name,
        path=str(path),
        algorithm=report.description.algorithm.value,
        sample_from_anchor=geometry.sample_from_anchor,
        k=geometry.num_speculative_tokens,
        num_query_tokens=geometry.num_query_tokens,
    )


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("real-vllm")


@pytest.fixture(scope="session")
def drafts(workspace: Path) -> dict[str, Draft]:
    """Each bundled draft as shipped, and converted to the other layout (`convert`, our own output)."""
    found: dict[str, Draft] = {}
    for name in EXAMPLES:
        declared = _draft(name, examples_dir() / name)
        found[f"{name}@{layout(declared.sample_from_anchor)}"] = declared
        flipped_path = workspace / "drafts" / f"{name}-{layout(not declared.sample_from_anchor)}"
        if not flipped_path.exists():
            convert_checkpoint(
                f"example:{name}", flipped_path, sample_from_anchor=not declared.sample_from_anchor, force=True
            )
        flipped = _draft(name, flipped_path)
        assert flipped.sample_from_anchor is not declared.sample_from_anchor
        found[f"{name}@{layout(flipped.sample_from_anchor)}"] = flipped
    return found


def layout(sample_from_anchor: bool) -> str:
    return "anchor-first" if sample_from_anchor else "bonus-anchor"


@pytest.fixture(scope="session")
def target() -> str:
    return str(examples_dir() / "tiny-target")


ProbeRunner = Callable[..., dict[str, Any]]


@pytest.fixture(scope="session")
def run_probe(vllm_root: Path, workspace: Path, target: str) -> ProbeRunner:
    counter = iter(range(1000))

    def run(
        drafts: dict[str, Draft],
        *,
        register: bool,
        env: dict[str, str] | None = None,
        pythonpath: list[Path] | None = None,
        foreign_plugin: bool = False,
    ) -> dict[str, Any]:
        folder = workspace / f"probe-{next(counter)}"
        folder.mkdir()
        cases = {name: {"target": target, "draft": d.path, "k": d.k} for name, d in drafts.items()}
        (folder / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH_TOOLS_", "VLLM_"))}
        environment["VLLM_TARGET_DEVICE"] = "cpu"
        if not register:
            environment["VLLM_PLUGINS"] = ""  # vLLM's own plugin loader would apply them otherwise
        environment.update(env or {})
        paths = [str(p) for p in pythonpath or []]
        if paths:
            environment["PYTHONPATH"] = os.pathsep.join([*paths, environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        command = [sys.executable, str(PROBE), str(folder / "cases.json")]
        command += ["--register"] if register else []
        command += ["--foreign-plugin"] if foreign_plugin else []
        completed = subprocess.run(
            command, capture_output=True, text=True, env=environment, cwd=folder, timeout=600, check=False
        )
        assert completed.returncode == 0, completed.stderr[-4000:]
        result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
        result["stderr"] = completed.stderr
        return result

    return run


@pytest.fixture(scope="session")
def patched(run_probe: ProbeRunner, drafts: dict[str, Draft]) -> dict[str, Any]:
    """vLLM's objects with the plugin registered, for every draft and layout."""
    return run_probe(drafts, register=True)


@pytest.fixture(scope="session")
def stock(run_probe: ProbeRunner, drafts: dict[str, Draft]) -> dict[str, Any]:
    """The same objects on stock vLLM 0.33.0 (no plugin)."""
    return run_probe(drafts, register=False)
