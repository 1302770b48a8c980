"""The shape of an engine table: what one engine release reads, defaults, refuses and sizes.

Plain frozen dataclasses (not pydantic): the tables are constants read in every vLLM process by
the plugin and on every `inspect --engine`, and they are rendered into `docs/engines.md`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Layout(StrEnum):
    """Which query slot predicts what (docs/inspect.md, "Geometry")."""

    BONUS = "bonus"  # slot 0 is the last verified token; K + 1 query positions for K drafts
    ANCHOR_FIRST = "anchor-first"  # slot j predicts anchor + j + 1; K query positions


class Outcome(StrEnum):
    """What an engine release does with drafts of one algorithm in one layout."""

    SERVED = "served"  # as trained, by the engine itself
    SERVED_WITH_PLUGIN = "served-with-plugin"  # as trained, only with the dflash-tools vLLM plugin
    REFUSED = "refused"  # the engine fails loudly (at start-up or when it builds the drafter)
    MISALIGNED = "misaligned"  # served without an error in the wrong layout: acceptance collapses
    UNSUPPORTED = "unsupported"  # the engine has no loader for it at all


@dataclass(frozen=True)
class LayoutRule:
    """The engine's outcome for one algorithm ("dflash", "dflash2", "dspark") in one layout."""

    algorithm: str
    layout: Layout
    outcome: Outcome
    cite: str
    note: str = ""


@dataclass(frozen=True)
class QueryCountSite:
    """A place where the engine sizes draft work from the per-request query count.

    `stock` is what the release computes there; `plugin` what the dflash-tools plugin makes it
    compute for an anchor-first draft (empty for an engine the plugin does not patch).
    """

    name: str
    cite: str  # engine file and function, e.g. "vllm/config/vllm.py: VllmConfig.num_lookahead_tokens"
    stock: str
    plugin: str = ""


@dataclass(frozen=True)
class EngineRules:
    """One engine release: the rules `inspect --engine`, `convert`, the plan and the plugin share."""

    engine: str  # "vllm" | "sglang"
    version: str
    released: str  # the date the release was published (PyPI upload)
    summary: str
    layouts: tuple[LayoutRule, ...] = ()
    query_count_sites: tuple[QueryCountSite, ...] = ()
    # vLLM: the release still ships the V1 model runner (removed in 0.34.0).
    has_v1_runner: bool = False
    # vLLM: the dflash-tools plugin applies the anchor-sampling change on this release.
    plugin_supported: bool = False
    # How the plugin does it on this release, in a sentence (docs/tier-vllm.md explains why).
    plugin_route: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def spec(self) -> str:
        """`vllm==0.34.0`: how the release is named on the command line and in JSON."""
        return f"{self.engine}=={self.version}"

    def outcome(self, algorithm: str, layout: Layout) -> LayoutRule | None:
        for rule in self.layouts:
            if rule.algorithm == algorithm and rule.layout is layout:
                return rule
        return None
