"""What each serving engine release reads from a draft, what it defaults and what it refuses.

One table per engine and version (`vllm_0_33`, `vllm_0_34`, `sglang_0_5_23`, ...), each rule
citing the engine file it comes from. The tables are data: `inspect --engine`, `convert`, the
serving plan and the vLLM plugin all read them, so that what the tool says about an engine is
written down once. `docs/engines.md` is generated from them.

Imports: nothing else of dflash_tools (the vLLM plugin reads these tables inside vLLM's processes).
"""

from __future__ import annotations

from dflash_tools.engine_rules import sglang_0_5_23, vllm_0_33, vllm_0_34
from dflash_tools.engine_rules._model import (
    Check,
    EngineRules,
    FormatRule,
    KeyRead,
    LaunchFlag,
    Layout,
    LayoutRule,
    Outcome,
    QueryCountSite,
    Route,
    ServingDefault,
    ServingRule,
    WhenMissing,
)

__all__ = [
    "ENGINE_RULES",
    "Check",
    "EngineRules",
    "FormatRule",
    "KeyRead",
    "LaunchFlag",
    "Layout",
    "LayoutRule",
    "Outcome",
    "QueryCountSite",
    "Route",
    "ServingDefault",
    "ServingRule",
    "WhenMissing",
    "get_rules",
    "json_key",
    "latest",
    "vllm_plugin_versions",
]

# Every engine release the tool has a table for, by `engine==version`, oldest first per engine.
ENGINE_RULES: dict[str, EngineRules] = {
    rules.spec: rules for rules in (sglang_0_5_23.RULES, vllm_0_33.RULES, vllm_0_34.RULES)
}


def get_rules(spec: str) -> EngineRules | None:
    """The table for `vllm==0.34.0` (a local build label like `0.34.0+cpu` is the same release)."""
    engine, _, version = spec.partition("==")
    return ENGINE_RULES.get(f"{engine}=={version.split('+', 1)[0]}")


def vllm_plugin_versions() -> tuple[str, ...]:
    """The vLLM releases the dflash-tools plugin patches, oldest first."""
    return tuple(rules.version for rules in ENGINE_RULES.values() if rules.engine == "vllm" and rules.plugin_supported)


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
