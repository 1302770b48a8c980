"""dflash-tools: inspect, normalize and smoke-test DFlash-family speculative-decoding drafts.

The library API is plain dataclasses; nothing here imports typer, rich, torch or vLLM. Each
command has its core entry point here (docs/python-api.md):

    from dflash_tools import inspect_checkpoint
    report = inspect_checkpoint("z-lab/Qwen3.8-27B-DFlash2", num_speculative_tokens=7)
    report.geometry.num_query_tokens, [f.code for f in report.findings]

- inspect: `inspect_checkpoint`; convert: `plan_conversion`, `convert_checkpoint`, `push_folder`;
- plan: `plan_launch(PlanRequest(...))` (or `plan_request(PlanOptions(...))` to merge a preset as the
  CLI does);
- smoke-test: `smoke_test(SmokeOptions(...))` (or `resolve_options(args)`, as the CLI does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "ConvertPlan",
    "ConvertResult",
    "InspectReport",
    "LaunchPlan",
    "PlanDraft",
    "PlanOptions",
    "PlanRequest",
    "Runtime",
    "SmokeOptions",
    "__version__",
    "convert_checkpoint",
    "inspect_checkpoint",
    "plan_conversion",
    "plan_launch",
    "plan_request",
    "push_folder",
    "resolve_options",
    "smoke_test",
]

if TYPE_CHECKING:
    from dflash_tools._version import __version__
    from dflash_tools.convert import ConvertPlan, ConvertResult, convert_checkpoint, plan_conversion, push_folder
    from dflash_tools.inspect import InspectReport, inspect_checkpoint
    from dflash_tools.plan.model import LaunchPlan, PlanDraft, PlanRequest
    from dflash_tools.plan.options import PlanOptions
    from dflash_tools.plan.request import plan_request
    from dflash_tools.plan.run import plan_launch
    from dflash_tools.smoke.options import Runtime, SmokeOptions, resolve_options
    from dflash_tools.smoke.run import smoke_test

# name -> the module that holds it, imported on first use.
_LAZY = {
    "plan_launch": "dflash_tools.plan.run",
    "LaunchPlan": "dflash_tools.plan.model",
    "PlanDraft": "dflash_tools.plan.model",
    "PlanRequest": "dflash_tools.plan.model",
    "PlanOptions": "dflash_tools.plan.options",
    "plan_request": "dflash_tools.plan.request",
    "Runtime": "dflash_tools.smoke.options",
    "SmokeOptions": "dflash_tools.smoke.options",
    "resolve_options": "dflash_tools.smoke.options",
    "smoke_test": "dflash_tools.smoke.run",
}


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
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
