"""One run of a smoke-test plan, typed: which runner, how the draft is served, what it launches.

The run's choices are enums (`Runner`, `Serving`), compared as members everywhere in smoke-test;
their words (the enum values) appear only in the JSON document (`RunPlan.to_dict`) and the
rendering, as docs/smoke-test.md tables them. A run measured on a server someone else launched
is a `ServerRun`: smoke-test chose no runner, launched no child and sent it no request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from dflash_tools import smoke_contract as contract
from dflash_tools.documents import JsonDocument
from dflash_tools.draft.geometry import layout_name
from dflash_tools.serving.plugin_state import PluginState
from dflash_tools.serving.vllm_runtime import VllmRuntime


class Runner(StrEnum):
    """The vLLM model runner a run asks for (`VllmRuntime.runner`)."""

    V2 = "v2"  # pinned (the draft needs it), or the release has no other
    AUTO = "auto"  # the release picks its runner
    NOT_VLLM = "n/a"  # not a vLLM child: the torch engine, or a server measured over HTTP

    @classmethod
    def of(cls, runtime: VllmRuntime | None) -> Runner:
        return cls.NOT_VLLM if runtime is None else cls(runtime.runner)


class Serving(StrEnum):
    """How a run's draft is served: JSON `drafts[].runs[].serving` (docs/smoke-test.md's table)."""

    STOCK = "stock"  # the draft needs nothing vLLM lacks
    NATIVE = "native"  # this vLLM serves anchor-first DFlash itself (the upstream change)
    PLUGIN = "plugin"  # through the dflash-tools plugin (loaded by the child where not allowed)
    UNKNOWN = "unknown"  # no vLLM was inspected: the plugin is loaded if it is there
    UNAVAILABLE = "unavailable"  # this vLLM cannot serve the layout (DFT041)
    UNSUPPORTED = "unsupported"  # --compare-layouts: launched as published on a vLLM that cannot serve it
    NOT_VLLM = "n/a"  # the torch reference engine
    SERVER = "server"  # --server: served by someone else's launch, only measured

    @classmethod
    def of(cls, state: PluginState, *, needed: bool) -> Serving:
        """A vLLM run's serving from the vLLM's `PluginState` (the table in `serving.plugin_state`)."""
        if not needed:
            return cls.STOCK
        if state is PluginState.NATIVE:
            return cls.NATIVE
        if state in (PluginState.ACTIVE, PluginState.NOT_LOADED):
            return cls.PLUGIN
        if state in (PluginState.ABSENT, PluginState.ASSUMED):
            return cls.UNKNOWN
        return cls.UNAVAILABLE

    @property
    def may_load_plugin(self) -> bool:
        """The child may need the plugin added to `VLLM_PLUGINS` (it is there, or may be)."""
        return self in (Serving.PLUGIN, Serving.UNKNOWN)


@dataclass
class RunPlan(JsonDocument):
    """One child process: one draft served in one layout."""

    label: str
    slug: str
    layout_role: str  # "declared" | "flipped"
    sample_from_anchor: bool | None  # None: not known (a server measured without its draft)
    num_speculative_tokens: int
    num_query_tokens: int | None
    runner: Runner
    serving: Serving
    env: dict[str, str]
    request: contract.SmokeRequest | None
    skip_reason: str | None = None
    sweep: bool = False  # one K of a `-k` sweep
    # Warnings about this K from the geometry rules (a sweep's K above the trained K, unused taps).
    notes: list[str] = field(default_factory=list)

    json_keys: ClassVar[tuple[str, ...]] = (
        "label",
        "slug",
        "layout_role",
        "layout",
        "sample_from_anchor",
        "num_speculative_tokens",
        "num_query_tokens",
        "runner",
        "serving",
        "env",
        "skip_reason",
        "sweep",
        "notes",
        "prefix_caching_check",
        "request",
    )
    json_properties: ClassVar[Mapping[str, str]] = {"layout": "layout", "prefix_caching_check": "prefix_caching_check"}

    @property
    def layout(self) -> str | None:
        return layout_name(self.sample_from_anchor) if self.sample_from_anchor is not None else None

    @property
    def prefix_caching_check(self) -> bool:
        return bool(self.request and self.request.get("prefix_caching_check"))


@dataclass
class ServerRun(RunPlan):
    """The one run of `--server`: measured on a server someone else launched, so no runner, no
    environment and no request of ours; the layout and K are the planned draft's where one was given."""

    slug: str = field(init=False, default="01-server")
    layout_role: str = field(init=False, default="declared")
    runner: Runner = field(init=False, default=Runner.NOT_VLLM)
    serving: Serving = field(init=False, default=Serving.SERVER)
    env: dict[str, str] = field(init=False, default_factory=dict)
    request: contract.SmokeRequest | None = field(init=False, default=None)
