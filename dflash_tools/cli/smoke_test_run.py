"""`dflash-tools smoke-test`, run: call the core (`smoke.options`, `smoke.run`), show progress, render (options: `smoke_test_cmd`)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.status import Status
from rich.text import Text

from dflash_tools import smoke_contract as contract
from dflash_tools.cli._errors import handle_errors
from dflash_tools.cli._layout import (
    Fix,
    console_width,
    pack,
    print_findings,
    print_fixes,
    print_line,
    table_or_blocks,
    wrap_words,
)
from dflash_tools.cli._output import (
    OutputFormat,
    printable,
    safe_text,
    stderr_console,
    stdout_console,
    write_json,
)
from dflash_tools.errors import UsageError
from dflash_tools.smoke.options import Runtime
from dflash_tools.smoke.plan import RunPlan

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
        self.console.print(f"[dim]requests, results and logs: {safe_text(path)}[/dim]", soft_wrap=True)

    def started(self, run: RunPlan, log: Path, reference: bool) -> None:
        self.current = safe_text(run.label) + (" (torch reference)" if reference else "")
        self.console.print(f"running {self.current} [dim](log: {safe_text(log)})[/dim]", soft_wrap=True)
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

    def _stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


# --- rendering -------------------------------------------------------------------------------


STATUS_STYLE = {
    "pass": "bold green",
    "fail": "bold red",
    "error": "bold red",
    "refused": "bold red",
    "skipped": "yellow",
    "planned": "cyan",
}


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return format(value, spec)


def _verdict_lines(document: dict[str, Any], *, reasons: bool = True) -> list[Text]:
    """`STATUS label: reasons` per draft; without `reasons`, a reason is only announced, so that
    an error (a long engine message) is printed once, in the verdicts at the end."""
    lines = []
    missing = document.get("engine_missing")
    for draft in document["drafts"]:
        verdict = draft["verdict"]
        status = verdict["status"]
        style = STATUS_STYLE.get(status, "bold")
        if missing and status == "planned":
            status, style = "planned (engine missing here)", "bold yellow"
        line = Text.assemble((status.upper(), style), " ", printable(draft["label"]))
        if verdict["reasons"] and reasons:
            line.append(": " + "; ".join(printable(r) for r in verdict["reasons"]))
        elif verdict["reasons"]:
            line.append(" (why: at the end)")
        lines.append(line)
    return lines


def render(document: dict[str, Any], *, no_color: bool = False, quiet: bool = False) -> None:
    """Verdicts first and last; plan and results as tables when they fit, else one block per run.
    `quiet`: the verdicts, a missing engine and the preflight findings only."""
    console = stdout_console(no_color)
    width = console.width
    target = document.get("target") or {}
    vllm = document.get("vllm") or {}
    prompts = document["prompts"]
    engine = document["engine"]
    if engine == Runtime.VLLM and vllm:
        # The JSON keeps the bare word; a reader needs to know it is about anchor-first serving.
        support = {
            "native": "anchor-first served natively",
            "patched": "anchor-first served through the dflash-tools plugin",
            "refused": "anchor-first refused",
            "misaligned": "anchor-first drafted in the wrong layout by V1",
        }.get(str(vllm.get("anchor_first")), str(vllm.get("support")))
        if vllm.get("installed") and vllm.get("support") == "unsupported":
            supported = ", ".join(vllm.get("supported_versions") or [])
            support += f" (the plugin supports {supported})"
        engine = f"{vllm.get('engine') or 'vllm (not installed)'} · {support}"
    verdicts = _verdict_lines(document)
    for verdict_line in verdicts if quiet else _verdict_lines(document, reasons=False):
        _print_wrapped(console, verdict_line, width)
    for line in (
        []
        if quiet
        else pack(
            [
                f"smoke-test ({document['mode']})",
                f"target {printable(target.get('source') or '-')}",
                f"engine {printable(engine)}",
                f"prompts {prompts['count']} × {prompts['max_tokens']} tokens ({printable(prompts['source'])})",
            ],
            width,
            indent="  ",
        )
    ):
        print_line(console, line)
    missing = document.get("engine_missing")
    if missing:
        for missing_line in wrap_words(f"engine missing: {missing['message']}; {missing['hint']}", width, "  "):
            print_line(console, missing_line, style="bold red")
    fixes: list[Fix] = []
    for draft in document["drafts"]:
        findings = draft["preflight"]["findings"]
        if findings:
            print_line(console, f"preflight: {printable(draft['label'])}", style="bold")
            print_findings(console, findings, fixes)
    print_fixes(console, fixes)
    if quiet:
        return
    _plan_table(console, document)
    if document["mode"] != "dry-run":
        _results_table(console, document)
        _render_chart(console, document)
        _render_prefix_caching(console, document)
        _render_k_sweep(console, document)
    for draft, verdict_line in zip(document["drafts"], verdicts, strict=True):
        _print_wrapped(console, verdict_line, width)
        verdict = draft["verdict"]
        for warning in verdict["warnings"]:
            for text in wrap_words(f"note: {printable(warning)}", width, "    ", first_indent="  "):
                print_line(console, text)
        if draft.get("layout_comparison") and draft["layout_comparison"]["outcome"] == "declared":
            for text in wrap_words(
                f"layouts: {printable(draft['layout_comparison']['message'])}", width, "    ", first_indent="  "
            ):
                print_line(console, text)
    if document.get("work_dir"):
        print_line(console, f"logs and results: {printable(document['work_dir'])}", style="dim")


def _print_wrapped(console: Any, line: Text, width: int) -> None:
    """A styled verdict line, wrapped at words only (the status word keeps its style)."""
    plain = line.plain
    wrapped = wrap_words(plain, width, "  ", first_indent="")
    if len(wrapped) == 1:
        print_line(console, line)
        return
    first = line[: len(wrapped[0])]
    print_line(console, first)
    for rest in wrapped[1:]:
        print_line(console, rest)


def _plan_table(console: Any, document: dict[str, Any]) -> None:
    rows: list[list[str | Text]] = []
    for draft in document["drafts"]:
        if not draft["runs"]:
            refusal = printable((draft.get("refusal") or {}).get("message", ""))
            rows.append(
                [printable(draft["label"]), printable(draft.get("dialect") or "?"), "", "", "", "", "refused", refusal]
            )
        for run in draft["runs"]:
            env = " ".join(f"{k}={v}" for k, v in sorted(run["env"].items()))
            rows.append(
                [
                    printable(run["label"]),
                    printable(draft.get("dialect") or "?"),
                    printable(run["layout"] or "?"),
                    str(run["num_speculative_tokens"]),
                    _fmt(run["num_query_tokens"]),
                    run["runner"],
                    run["serving"] + (f" (skipped: {printable(run['skip_reason'])})" if run["skip_reason"] else ""),
                    printable(env) or "-",
                ]
            )
    columns = ("draft", "dialect", "layout", "K", "Q", "runner", "serving", "environment")
    table_or_blocks(console, columns, rows, title="launch plan")


def _results_table(console: Any, document: dict[str, Any]) -> None:
    """One row per run (a block per run when narrow): the measured figures and the log path."""
    baseline = document.get("baseline") or {}
    cross_checked = any(run.get("cross_check") for draft in document["drafts"] for run in draft["runs"])
    rows: list[list[str | Text]] = []
    for draft in document["drafts"]:
        for run in draft["runs"]:
            result = run.get("result") or {}
            ok = bool(result.get("ok"))

            def value(key: str, spec: str = "", result: dict[str, Any] = result, ok: bool = ok) -> str:
                return _fmt(result.get(key), spec) if ok else "-"

            identity = run.get("token_identity")
            rows.append(
                [
                    printable(run["label"]),
                    Text(run["verdict"]["status"], style=STATUS_STYLE.get(run["verdict"]["status"], "bold")),
                    value("mean_acceptance_length", ".2f"),
                    _fmt(draft["floor"]["mean_acceptance_length"], ".2f"),
                    _fmt((result.get("acceptance_rate_per_position") or [None])[0], ".2f"),
                    value("num_drafts", ","),
                    f"{value('num_draft_tokens', ',')}/{value('num_accepted_tokens', ',')}",
                    value("tokens_per_second", ".1f"),
                    _fmt(baseline.get("tokens_per_second"), ".1f"),
                    _fmt(run.get("speedup"), ".2f") + ("×" if run.get("speedup") else ""),
                    f"{identity['identical_prompts']}/{identity['prompts']}" if identity else "-",
                    *([_reference_value(run)] if cross_checked else []),
                ]
            )
    columns = (
        "run",
        "verdict",
        "mean acceptance length",
        "floor",
        "position-0 acceptance",
        "draft steps",
        "draft/accepted tokens",
        "tokens/s (speculation)",
        "tokens/s (target alone)",
        "speedup",
        "token-identical",
        *(("torch reference",) if cross_checked else ()),
    )
    table_or_blocks(console, columns, rows, title="results")
    for draft in document["drafts"]:
        for run in draft["runs"]:
            log = (run.get("result") or {}).get("log_path")
            if log:
                print_line(console, f"log {printable(run['label'])}:", style="dim")
                print_line(console, printable(log))


def _reference_value(run: dict[str, Any]) -> str:
    """The cross-check cell: the reference's mean acceptance length and whether the engines agree."""
    check = run.get("cross_check") or {}
    if not check:
        return "-"
    if not check.get("ok"):
        return f"error: {check.get('error') or ''}"
    mean = (check.get("mean_acceptance_length") or {}).get(Runtime.TORCH)
    return f"{_fmt(mean, '.2f')} ({'agrees' if check.get('agrees') else 'differs'})"


BAR_WIDTH = 30


def _bar(rate: float) -> str:
    eighths = round(max(0.0, min(1.0, rate)) * BAR_WIDTH * 8)
    full, rest = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[rest] if rest else ""
    return ("█" * full + partial).ljust(BAR_WIDTH)


def _render_chart(console: Any, document: dict[str, Any]) -> None:
    for draft in document["drafts"]:
        for run in draft["runs"]:
            result = run.get("result") or {}
            rates = result.get("acceptance_rate_per_position") or []
            if not result.get("ok") or not rates:
                continue
            print_line(console, f"acceptance per draft position: {printable(run['label'])}", style="bold")
            for position, rate in enumerate(rates):
                console.print(f"  {position:>2} [green]{_bar(rate)}[/green] {rate:.2f}")


def _times(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}×"


def _render_k_sweep(console: Any, document: dict[str, Any]) -> None:
    """Per draft: measured and predicted speed-up per K (a table for a sweep, a line for one run)."""
    width = console_width(console)
    for draft in document["drafts"]:
        section = draft.get("k_sweep")
        if not section:
            continue
        prediction = section["prediction"]
        model = prediction.get("model") or {}
        label = printable(draft["label"])
        if len(section["k_values"]) > 1:
            rows: list[list[str | Text]] = []
            for row in section["rows"]:
                status = row["status"]
                rows.append(
                    [
                        str(row["num_speculative_tokens"]),
                        _fmt(row["num_query_tokens"]),
                        Text(status, style=STATUS_STYLE.get(status, "")) if status != "predicted" else Text("-"),
                        _fmt(row["mean_acceptance_length"], ".2f"),
                        _fmt(row["tokens_per_second"], ".1f"),
                        _times(row["speedup"]),
                        _times(row["predicted_speedup"]),
                    ]
                )
            columns = ("K", "Q", "verdict", "acceptance length", "tokens/s", "speed-up", "predicted")
            table_or_blocks(console, columns, rows, title=f"K sweep: {label}")
            best = section.get("best_measured")
            if best:
                speedup = f" ({_times(best['speedup'])} the target alone)" if best.get("speedup") else ""
                print_line(console, f"  best measured K: {best['num_speculative_tokens']}{speedup}", style="bold")
        else:
            predicted = [row for row in section["rows"] if row["predicted_speedup"] is not None]
            if not predicted:
                if not prediction["available"]:
                    text = f"speed-up by K: {label}: no prediction ({printable(prediction['reason'])})"
                    for line in wrap_words(text, width, "    "):
                        print_line(console, line, style="dim")
                continue
            print_line(console, f"predicted speed-up by K: {label}", style="bold")
            segments = [f"K={row['num_speculative_tokens']} {_times(row['predicted_speedup'])}" for row in predicted]
            for line in pack(segments, width, first="  ", indent="  "):
                print_line(console, line)
        best_predicted = section.get("best_predicted")
        if best_predicted:
            print_line(
                console,
                f"  best predicted K: {best_predicted['num_speculative_tokens']} "
                f"({_times(best_predicted['predicted_speedup'])})",
                style="bold",
            )
        if prediction["available"]:
            explain = (
                f"predicted from the K = {model['reference_k']} run: its acceptance per position, "
                f"{model['draft_step_s'] * 1000:.2f} ms drafting and {model['verify_step_s'] * 1000:.2f} ms "
                f"verifying per step, the target alone {model['target_token_s'] * 1000:.2f} ms per token "
                "(docs/smoke-test.md)"
            )
            for line in wrap_words(explain, width, "    ", first_indent="  "):
                print_line(console, line, style="dim")
        elif len(section["k_values"]) > 1:
            for line in wrap_words(f"no prediction: {printable(prediction['reason'])}", width, "    ", "  "):
                print_line(console, line, style="dim")
        for note in section["notes"]:
            for line in wrap_words(f"note: {printable(note)}", width, "    ", first_indent="  "):
                print_line(console, line)


def _render_prefix_caching(console: Any, document: dict[str, Any]) -> None:
    """One line per run whose greedy output was compared with prefix caching on and off."""
    width = console_width(console)
    for draft in document["drafts"]:
        for run in draft["runs"]:
            check = run.get("prefix_caching")
            if not check:
                continue
            label = printable(run["label"])
            if not check["ok"]:
                text = f"prefix caching: {label}: not checked ({printable(check['error'])})"
            elif check["identical"]:
                hits, queries = check.get("prefix_cache_hits"), check.get("prefix_cache_queries")
                reuse = f"; {hits:,} of {queries:,} continuation tokens from the cache" if queries else ""
                text = f"prefix caching: {label}: greedy output identical on and off ({len(check['checks'])} checks{reuse})"
            else:
                failed = [item["name"] for item in check["checks"] if not item["identical"]]
                text = f"prefix caching: {label}: greedy output differs ({'; '.join(failed)})"
            for line in wrap_words(text, width, "    "):
                print_line(console, line, style=None if check.get("identical") else "bold red")
