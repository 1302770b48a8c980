"""`dflash-tools smoke-test`, rendered for a reader: verdicts, plan, results, the K sweep, a server's
facts and the distance from published numbers (the JSON is the document itself, `smoke_test_run`).

Every line is laid out by `cli._layout` (broken at spaces only; a path, number or command never
split); tables only where every cell fits, else one block per row.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

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
from dflash_tools.cli._output import printable, stdout_console
from dflash_tools.smoke.options import Runtime

STATUS_STYLE = {
    "pass": "bold green",
    "fail": "bold red",
    "error": "bold red",
    "refused": "bold red",
    "skipped": "yellow",
    "planned": "cyan",
}


def labelled(head: str, item: str, width: int) -> list[str]:
    """`head item` on one line when it fits in `width`, else `head` and then `item` indented on a
    line of its own: a label or a path is never split (a terminal would cut it mid-path)."""
    if len(head) + 1 + len(item) <= width:
        return [f"{head} {item}"]
    return [head, f"  {item}"]


def _print_labelled(console: Any, head: str, item: str, style: str | None = None) -> None:
    for index, line in enumerate(labelled(head, item, console_width(console))):
        print_line(console, line, style=style if index == 0 or style != "bold" else None)


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return format(value, spec)


# Reasons up to this long are given with the verdict at the top as well as at the end.
_SHORT_REASONS = 160


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
        why = "; ".join(printable(r) for r in verdict["reasons"])
        # At the top an engine's error (often long) is only announced, and printed once, at the end;
        # a failed floor's short reasons are given at once.
        if verdict["reasons"] and (reasons or (status == "fail" and len(why) <= _SHORT_REASONS)):
            line.append(": " + why)
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
    not_read = target.get("not_read")
    if not_read and not quiet:  # a dry run's target not read offline (DFT090)
        text = f"target not read: {not_read['reason']}; the draft/target pairing is not checked (DFT090)"
        for not_read_line in wrap_words(text, width, "  "):
            print_line(console, not_read_line, style="yellow")
    missing = document.get("engine_missing")
    if missing:
        for missing_line in wrap_words(f"engine missing: {missing['message']}; {missing['hint']}", width, "  "):
            print_line(console, missing_line, style="bold red")
    fixes: list[Fix] = []
    for draft in document["drafts"]:
        findings = draft["preflight"]["findings"]
        unread = draft["preflight"].get("error")
        if findings or unread:
            _print_labelled(console, "preflight:", printable(draft["label"]), style="bold")
        if unread and not draft.get("not_read"):  # not read offline: DFT091 among the findings says it
            text = f"cannot read the draft: {printable(unread['message'])}" + (
                f"; {printable(unread['hint'])}" if unread.get("hint") else ""
            )
            for line in wrap_words(text, width, "    ", first_indent="  "):
                print_line(console, line, style="bold red")
        if findings:
            print_findings(console, findings, fixes)
    print_fixes(console, fixes)
    if quiet:
        return
    _plan_table(console, document)
    if document["mode"] != "dry-run":
        _results_table(console, document)
        _render_timing(console, document)
        _render_server(console, document)
        _render_references(console, document)
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
        _render_diagnosis(console, verdict.get("diagnosis"), width)
    if document.get("work_dir"):
        _print_labelled(console, "logs and results:", printable(document["work_dir"]), style="dim")


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
            # Why it was refused is in the verdict (and an unreadable draft under preflight), not
            # in the environment column.
            serving = "not read" if draft.get("not_read") else "refused"
            rows.append(
                [printable(draft["label"]), printable(draft.get("dialect") or "?"), "", "", "", "", serving, "-"]
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
    with_reference = any(draft.get("reference") for draft in document["drafts"])
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
                    _floors(draft["floor"]),
                    *([_reference_cell(draft, run)] if with_reference else []),
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
        "floor (mean / position 0)",
        *(("reference",) if with_reference else ()),
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
    width = console_width(console)
    for draft in document["drafts"]:
        for run in draft["runs"]:
            verdict = run["verdict"]
            if verdict["status"] == "fail" and verdict["reasons"]:
                # Why it failed, under its figures: a mean above the floor can fail on position 0.
                text = f"fails {printable(run['label'])}: " + "; ".join(printable(r) for r in verdict["reasons"])
                for line in wrap_words(text, width, "    ", first_indent="  "):
                    print_line(console, line, style="red")
    for draft in document["drafts"]:
        for run in draft["runs"]:
            log = (run.get("result") or {}).get("log_path")
            if log:
                print_line(console, f"log {printable(run['label'])}:", style="dim")
                print_line(console, printable(log))


def _floors(floor: dict[str, Any]) -> str:
    """The floors a run is judged against: mean acceptance length / position-0 acceptance."""
    return f"{_fmt(floor['mean_acceptance_length'], '.2f')} / {_fmt(floor['first_position_rate'], '.2f')}"


def _reference_cell(draft: dict[str, Any], run: dict[str, Any]) -> str:
    """The draft's reference acceptance length (`smoke.workloads.reference_al`) and the floor it sets, on the
    run it judges (the declared layout at its K)."""
    reference = draft.get("reference")
    if not reference or run.get("layout_role") == "flipped":
        return "-"
    if reference["num_speculative_tokens"] not in (None, run["num_speculative_tokens"]):
        return "-"
    judged = "fails" if reference["comparable"] else "a note"
    return f"{reference['mean_acceptance_length']:.2f} ({judged} below {reference['floor']:.2f})"


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
            _print_labelled(console, "acceptance per draft position:", printable(run["label"]), style="bold")
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
                        _spread_cell(row),
                        _times(row["speedup"]),
                        _times(row["predicted_speedup"]),
                    ]
                )
            columns = ("K", "Q", "verdict", "acceptance length", "tokens/s", "spread", "speed-up", "predicted")
            table_or_blocks(console, columns, rows, title=f"K sweep: {label}")
            if any(row.get("too_wide_to_rank") for row in section["rows"]):
                print_line(console, "  * its spread overlaps another K's: too wide to rank K by", style="dim")
            best = section.get("best_measured")
            if best:
                speedup = f" ({_times(best['speedup'])} the target alone)" if best.get("speedup") else ""
                print_line(console, f"  best measured K: {best['num_speculative_tokens']}{speedup}", style="bold")
            elif section.get("no_best_measured"):
                text = f"no best measured K: {printable(section['no_best_measured'])}"
                for line in wrap_words(text, width, "    ", first_indent="  "):
                    print_line(console, line, style="bold")
        else:
            predicted = [row for row in section["rows"] if row["predicted_speedup"] is not None]
            if not predicted:
                if not prediction["available"]:
                    text = f"speed-up by K: {label}: no prediction ({printable(prediction['reason'])})"
                    for line in wrap_words(text, width, "    "):
                        print_line(console, line, style="dim")
                continue
            _print_labelled(console, "predicted speed-up by K:", label, style="bold")
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


def _spread_cell(row: dict[str, Any]) -> str:
    """A K's tokens-per-second spread as a share of its median (`*`: too wide to rank K by)."""
    spread = row.get("tokens_per_second_spread") or {}
    if not spread:
        return "-"
    if spread.get("samples", 1) < 2:
        return "1 run"
    mark = "*" if row.get("too_wide_to_rank") else ""
    return f"{spread['relative_spread']:.0%}{mark}"


def _range(spread: dict[str, Any] | None, spec: str, unit: str = "") -> str:
    """`192.0 (185.2-201.3)`, or the median alone for one run."""
    if not spread:
        return "-"
    if spread["samples"] < 2:
        return f"{spread['median']:{spec}}{unit}"
    return f"{spread['median']:{spec}}{unit} ({spread['low']:{spec}}-{spread['high']:{spec}}{unit})"


def _render_timing(console: Any, document: dict[str, Any]) -> None:
    """Per run: how many timed repetitions, their medians and ranges (docs/smoke-test.md, "How sure
    a measurement is")."""
    width = console_width(console)
    alone = document.get("baseline_tokens_per_second_spread")
    for draft in document["drafts"]:
        for run in draft["runs"]:
            speed = run.get("tokens_per_second_spread")
            if not speed or (speed["samples"] < 2 and not alone):
                continue  # one window and nothing to compare it with: the results table has it
            parts = [f"tokens/s {_range(speed, '.1f')}"]
            if alone:
                parts.append(f"the target alone {_range(alone, '.1f')}")
            ratio = run.get("speedup_spread")
            if ratio:
                parts.append(f"speed-up {_range(ratio, '.2f', '×')}")
            runs = speed["samples"]
            wide = " (spread wider than 10%)" if (speed.get("relative_spread") or 0) > 0.10 else ""
            # `timing LABEL: N timed runs`, the label alone on its line when that does not fit.
            *label_line, head = labelled(
                f"timing {printable(run['label'])}:", f"{runs} timed run{'s' if runs > 1 else ''}{wide}", width
            )
            first = "  " if label_line else ""
            for line in label_line + pack([head.strip(), *parts], width, first=first, indent="    "):
                print_line(console, line, style="dim" if not wide else None)


def _render_server(console: Any, document: dict[str, Any]) -> None:
    """Per server run: which engine, both definitions of the acceptance length, and the
    numbers shown but never judged."""
    from dflash_tools.smoke.acceptance import side_by_side

    if document["mode"] != "server":
        return
    width = console_width(console)
    protocol = document.get("protocol") or {}
    dataset = document.get("dataset")
    for draft in document["drafts"]:
        for run in draft["runs"]:
            result = run.get("result") or {}
            if not result.get("ok"):
                continue
            details = result.get("engine_details") or {}
            lines = [
                f"server: {details.get('server_engine') or '?'} {details.get('server_version') or ''}".rstrip()
                + f" at {details.get('server', document.get('server', ''))} (detected by {details.get('detected_by')})",
                f"acceptance: {side_by_side(result.get('acceptance_lengths') or {})}",
            ]
            position = result.get("per_position") or {}
            if position and not position.get("available", True):
                lines.append(str(position.get("note")))
            if protocol:
                lines.append(f"protocol: {protocol['name']} ({protocol['summary']})")
            if dataset:
                lines.append(f"dataset: {dataset['title']} ({dataset['source']}; order {dataset['order']})")
            for key, label in (("lifetime_avg_spec_accept_length", "lifetime"), ("metrics_cross_check", "/metrics")):
                block = details.get(key)
                if isinstance(block, dict):
                    value = block.get("value", block.get("sglang_accept_length"))
                    shown = "n/a" if value is None else f"{value:.2f}"
                    lines.append(f"{label}: {shown}: {block.get('note', '')}")
            for text in lines:
                for line in wrap_words(printable(text), width, "    ", first_indent="  "):
                    print_line(console, line)


def _render_references(console: Any, document: dict[str, Any]) -> None:
    """Each run's distance from the published numbers for its draft and dataset."""
    width = console_width(console)
    for draft in document["drafts"]:
        for run in draft["runs"]:
            for reference in run.get("references") or []:
                text = f"{printable(run['label'])}: {reference['sentence']}"
                for line in wrap_words(printable(text), width, "    ", first_indent="  "):
                    print_line(console, line, style="bold" if reference.get("same_protocol") else None)


def _render_diagnosis(console: Any, diagnosis: dict[str, Any] | None, width: int) -> None:
    """Under a failed verdict: what likely went wrong, the causes in the order to check them."""
    if not diagnosis:
        return
    for line in wrap_words(f"why: {printable(diagnosis['evidence'])}", width, "    ", first_indent="  "):
        print_line(console, line)
    for number, cause in enumerate(diagnosis["likely"], start=1):
        for line in wrap_words(f"{number}. {printable(cause)}", width, "       ", first_indent="    "):
            print_line(console, line)
