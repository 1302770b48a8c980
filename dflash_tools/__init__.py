"""dflash-tools: inspect, normalize and smoke-test DFlash-family speculative-decoding drafts.

The library API is plain dataclasses; nothing here imports typer, rich, torch or vLLM.

    from dflash_tools import inspect_checkpoint
    report = inspect_checkpoint("z-lab/Qwen3.8-27B-DFlash2", num_speculative_tokens=7)
    report.geometry.num_query_tokens, [f.code for f in report.findings]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "ConvertPlan",
    "ConvertResult",
    "InspectReport",
    "__version__",
    "convert_checkpoint",
    "inspect_checkpoint",
    "plan_conversion",
    "push_folder",
]

if TYPE_CHECKING:
    from dflash_tools._version import __version__
    from dflash_tools.convert import ConvertPlan, ConvertResult, convert_checkpoint, plan_conversion, push_folder
    from dflash_tools.inspect import InspectReport, inspect_checkpoint


def __getattr__(name: str) -> Any:
    # Lazy so that `import dflash_tools` stays cheap for the CLI's --help (even the version:
    # importlib.metadata costs half of typer's start-up).
    if name == "__version__":
        from dflash_tools._version import __version__

        return __version__
    if name in ("inspect_checkpoint", "InspectReport"):
        from dflash_tools import inspect

        return getattr(inspect, name)
    if name in ("convert_checkpoint", "plan_conversion", "push_folder", "ConvertPlan", "ConvertResult"):
        from dflash_tools import convert

        return getattr(convert, name)
    raise AttributeError(name)
