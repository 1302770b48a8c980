"""What each serving engine release reads from a draft, what it defaults and what it refuses.

One table per engine and version (`vllm_0_33`, `vllm_0_34`, `sglang_0_5_23`, ...), each rule
citing the engine file it comes from. The tables are data: `inspect --engine`, `convert`, the
serving plan and the vLLM plugin all read them, so that what the tool says about an engine is
written down once. `docs/engines.md` is generated from them.

Imports: nothing else of dflash_tools (the vLLM plugin reads these tables inside vLLM's processes).
"""

from __future__ import annotations

from dflash_tools.engines import vllm_0_33, vllm_0_34
from dflash_tools.engines._model import EngineRules, Layout, LayoutRule, Outcome, QueryCountSite

__all__ = [
    "ENGINE_RULES",
    "EngineRules",
    "Layout",
    "LayoutRule",
    "Outcome",
    "QueryCountSite",
    "get_rules",
    "vllm_plugin_versions",
]

# Every engine release the tool has a table for, by `engine==version`.
ENGINE_RULES: dict[str, EngineRules] = {rules.spec: rules for rules in (vllm_0_33.RULES, vllm_0_34.RULES)}


def get_rules(spec: str) -> EngineRules | None:
    """The table for `vllm==0.34.0` (a local build label like `0.34.0+cpu` is the same release)."""
    engine, _, version = spec.partition("==")
    return ENGINE_RULES.get(f"{engine}=={version.split('+', 1)[0]}")


def vllm_plugin_versions() -> tuple[str, ...]:
    """The vLLM releases the dflash-tools plugin patches, oldest first."""
    return tuple(rules.version for rules in ENGINE_RULES.values() if rules.engine == "vllm" and rules.plugin_supported)
