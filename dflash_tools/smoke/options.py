"""What one smoke test is asked to do: the runtime it runs on and every option, resolved.

`Runtime` names where the generation runs (the choice that travels through smoke-test);
`SmokeOptions` is everything the command line or a preset says about one smoke test.

Imports: `serving.presets` (a draft entry and its acceptance floor).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dflash_tools.serving.presets import DraftEntry, Floor


class Runtime(StrEnum):
    """Where a smoke test generates: its value is the contract's `engine` (dflash_tools.smoke_contract)."""

    VLLM = "vllm"  # vLLM's offline LLM API in a child process
    TORCH = "torch"  # the PyTorch reference engine in a child process
    VLLM_SERVER = "vllm-server"  # a running server, measured over HTTP (--server)
    SGLANG_SERVER = "sglang-server"  # a running SGLang server, measured over HTTP (--server)


@dataclass
class SmokeOptions:
    """Everything the command line (or a preset) says about one smoke test."""

    target: str | None
    drafts: list[DraftEntry]
    prompts: list[str]
    prompts_source: str = ""
    prompt_token_ids: list[list[int]] | None = None
    num_speculative_tokens: int | None = None
    engine: Runtime = Runtime.VLLM  # already resolved from "auto"
    device: str | None = None
    dtype: str | None = None
    max_tokens: int = 128
    baseline: bool = True
    compare_layouts: bool = False
    force: bool = False
    engine_args: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    revision: str | None = None
    target_revision: str | None = None
    token: str | None = None
    hub_timeout: float | None = 10.0
    chat: bool = False
    enable_thinking: bool = False
    floor: Floor | None = None
    inherited_env: Mapping[str, str] = field(default_factory=dict)
    # `-k 3,5,7` / `-k 3-7`: run each K (two or more values; one value is num_speculative_tokens).
    k_values: list[int] | None = None
    # Greedy identity with vLLM's prefix caching on and off; None: on for the vLLM engine.
    prefix_caching_check: bool | None = None

    def __post_init__(self) -> None:
        self.engine = Runtime(self.engine)  # a caller's plain "vllm" is the same runtime

    @property
    def sweep(self) -> bool:
        return bool(self.k_values) and len(self.k_values or []) > 1

    @property
    def checks_prefix_caching(self) -> bool:
        if self.engine != Runtime.VLLM:
            return False
        return self.prefix_caching_check if self.prefix_caching_check is not None else True
