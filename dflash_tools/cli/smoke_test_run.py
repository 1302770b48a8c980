"""`dflash-tools smoke-test`, run: call the core (`smoke.options`, `smoke.run`), show progress, render (options: `smoke_test_cmd`)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.status import Status

from dflash_tools import smoke_contract as contract
from dflash_tools.cli._errors import handle_errors
from dflash_tools.cli._output import OutputFormat, safe_text, stderr_console, write_json
from dflash_tools.cli.smoke_test_render import labelled, render
from dflash_tools.errors import UsageError
from dflash_tools.smoke.run_plan import RunPlan

__all__ = ["render", "run"]

if TYPE_CHECKING:
    from dflash_tools.cli.smoke_test_cmd import SmokeTestArgs


def run(args: SmokeTestArgs) -> None:
    """Run `dflash-tools smoke-test`: resolve the options (`smoke.options.resolve_options`), run the
    test (`smoke.run.smoke_test`), render its document."""
    fmt = OutputFormat.JSON if args.json_flag else args.output_format
    args = _deprecated_spellings(args)
    with handle_errors("smoke-test", json_output=fmt is OutputFormat.JSON):
        from dflash_tools.smoke.options import resolve_options
        from dflash_tools.smoke.run import smoke_test

        if args.engine is not None and args.runtime not in ("auto", args.engine):
            raise UsageError(
                f"--engine {args.engine} (the old name of --runtime) and --runtime {args.runtime} disagree",
                "pass --runtime only",
            )
        options = resolve_options(replace(args, runtime=args.engine or args.runtime))
        document = smoke_test(options, _Progress(fmt, args.no_color))
        if fmt is OutputFormat.JSON:
            write_json(document)
        else:
            render(document, no_color=args.no_color, quiet=args.quiet)
        raise typer.Exit(document["exit_code"])


def _deprecated_spellings(args: SmokeTestArgs) -> SmokeTestArgs:
    """Old option names still accepted, each with a note on stderr (docs/development.md)."""
    notes = []
    if args.hub_timeout is not None:
        notes.append(
            "--hub-timeout is deprecated: use --timeout (seconds for each Hub request, as in inspect and convert); "
            "the engine's wall clock is --run-timeout"
        )
        args = replace(args, timeout=args.hub_timeout)
    if args.engine is not None:
        notes.append(
            "--engine is deprecated here: use --runtime (auto, vllm or torch); --engine names engine releases "
            "in inspect and plan"
        )
    for note in notes:
        stderr_console(args.no_color).print(f"note: {note}", soft_wrap=True, markup=False)
    return args


class _Progress:
    """Each run on stderr as it starts and ends (a live status line on a terminal)."""

    def __init__(self, fmt: OutputFormat, no_color: bool) -> None:
        self.fmt = fmt
        self.console = stderr_console(no_color)
        self.live = sys.stderr.isatty()
        self.status: Status | None = None
        self.current = ""

    def work_dir(self, path: Path) -> None:
        self._lines("requests, results and logs:", safe_text(path), style="dim")

    def started(self, run: RunPlan, log: Path, reference: bool) -> None:
        self.current = safe_text(run.label) + (" (torch reference)" if reference else "")
        self.console.print(f"running {self.current}", soft_wrap=True, markup=False)
        self._lines("  log:", safe_text(log), style="dim")
        if self.live:
            self.status = self.console.status(f"{safe_text(run.label)}: starting")
            self.status.start()

    def progressed(self, message: str) -> None:
        if self.status is not None:
            self.status.update(f"{self.current}: {safe_text(message)}")

    def done(self, run: RunPlan, result: contract.SmokeResult, reference: bool) -> None:
        self._stop()
        if result["ok"]:
            self.console.print(
                f"  done: mean acceptance length {result['mean_acceptance_length']:.2f} over {result['num_drafts']} draft steps",
                soft_wrap=True,
            )
        else:
            # The error itself is in the verdict on stdout; printed here too only when stdout is JSON.
            detail = safe_text(result["error"]) if self.fmt is OutputFormat.JSON else "the error is in the verdict"
            self.console.print(f"  [red]failed:[/red] {detail}", soft_wrap=True)

    def _lines(self, head: str, item: str, style: str) -> None:
        """`head item` on one line when it fits the terminal, else two: a path is never split."""
        for line in labelled(head, item, max(20, self.console.width)):
            self.console.print(line, style=style, soft_wrap=True, markup=False, highlight=False)

    def _stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
