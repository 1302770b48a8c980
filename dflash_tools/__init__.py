"""dflash-tools: inspect, normalize and smoke-test DFlash-family speculative-decoding drafts.

The library API is plain dataclasses; nothing here imports typer, rich, torch or vLLM. Each
command has its core entry point here (docs/python-api.md):

    from dflash_tools import inspect_checkpoint
    report = inspect_checkpoint("z-lab/Qwen3.8-27B-DFlash2", num_speculative_tokens=7, engines=["all"])
    report.geometry.num_query_tokens, [f.code for f in report.findings], report.to_dict()["engines"]

- inspect: `inspect_sources(InspectRequest(...))` (what the CLI calls), `inspect_checkpoint` (one
  source); convert: `plan_conversion`, `convert_checkpoint`, `push_folder`;
- plan: `plan_launch(PlanRequest(...))` (or `plan_request(PlanOptions(...))` to merge a preset as the
  CLI does);
- smoke-test: `smoke_test(SmokeOptions(...))` (or `resolve_options(SmokeArguments(...))`, as the CLI does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "ConvertPlan",
    "ConvertResult",
    "InspectReport",
    "InspectRequest",
    "InspectResult",
    "LaunchPlan",
    "PlanDraft",
    "PlanOptions",
    "PlanRequest",
    "Runtime",
    "SmokeArguments",
    "SmokeOptions",
    "__version__",
    "convert_checkpoint",
    "inspect_checkpoint",
    "inspect_sources",
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
    from dflash_tools.inspect import InspectReport
    from dflash_tools.plan.model import LaunchPlan, PlanDraft, PlanRequest
    from dflash_tools.plan.options import PlanOptions
    from dflash_tools.plan.request import plan_request
    from dflash_tools.plan.run import plan_launch
    from dflash_tools.serving.inspect_sources import InspectRequest, InspectResult, inspect_checkpoint, inspect_sources
    from dflash_tools.smoke.arguments import SmokeArguments
    from dflash_tools.smoke.options import Runtime, SmokeOptions, resolve_options
    from dflash_tools.smoke.run import smoke_test

# name -> the module that holds it, imported on first use.
_LAZY = {
    "inspect_checkpoint": "dflash_tools.serving.inspect_sources",
    "inspect_sources": "dflash_tools.serving.inspect_sources",
    "InspectRequest": "dflash_tools.serving.inspect_sources",
    "InspectResult": "dflash_tools.serving.inspect_sources",
    "plan_launch": "dflash_tools.plan.run",
    "LaunchPlan": "dflash_tools.plan.model",
    "PlanDraft": "dflash_tools.plan.model",
    "PlanRequest": "dflash_tools.plan.model",
    "PlanOptions": "dflash_tools.plan.options",
    "plan_request": "dflash_tools.plan.request",
    "Runtime": "dflash_tools.smoke.options",
    "SmokeArguments": "dflash_tools.smoke.arguments",
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
    if name == "InspectReport":
        from dflash_tools.inspect import InspectReport

        return InspectReport
    if name in ("convert_checkpoint", "plan_conversion", "push_folder", "ConvertPlan", "ConvertResult"):
        from dflash_tools import convert

        return getattr(convert, name)
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
