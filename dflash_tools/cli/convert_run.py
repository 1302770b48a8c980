"""`dflash-tools convert`, run: call the core (`dflash_tools.convert`) and render (the options are in `convert_cmd`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from dflash_tools.cli._errors import handle_errors
from dflash_tools.cli._layout import console_width, print_line, print_unpadded, table_or_blocks, unbroken, wrap_words
from dflash_tools.cli._output import (
    SEVERITY_STYLE,
    OutputFormat,
    human_bytes,
    printable,
    safe_text,
    stderr_console,
    stdout_console,
    write_json,
)
from dflash_tools.draft.geometry import Geometry
from dflash_tools.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from dflash_tools.files.atomic import LinkMode
from dflash_tools.findings import Severity

if TYPE_CHECKING:
    from dflash_tools.cli.convert_cmd import ConvertArgs


def run(args: ConvertArgs) -> None:
    """Run `dflash-tools convert` with the options `convert_cmd` parsed."""
    fmt = OutputFormat.JSON if args.json_flag else args.output_format
    with handle_errors("convert", json_output=fmt is OutputFormat.JSON, source=args.source):
        if not args.source:
            raise UsageError("no SOURCE given", "pass a checkpoint folder, a Hub repo id or example:NAME")
        _check_usage(args.output, args.in_place, args.to, args.backup, args.check, args.dry_run)
        if args.token and "HF_TOKEN" not in os.environ:
            stderr_console(args.no_color).print(
                "[yellow]warning:[/yellow] --token on the command line is visible to other users; prefer HF_TOKEN"
            )
        from dflash_tools.convert import convert_checkpoint
        from dflash_tools.serving.engine_view import engine_choices, resolve_engine_specs

        try:
            engines, installed = resolve_engine_specs(args.for_engines or [])
        except ValueError as exc:
            raise UsageError(f"--for {exc}", f"choose from: {', '.join(engine_choices())}") from None
        if installed:
            from dflash_tools.engine_rules import ENGINE_RULES

            vllm = [spec for spec, rules in ENGINE_RULES.items() if rules.engine == "vllm"]
            raise UsageError(
                "--for vllm: name the release the draft will be served with",
                "pass " + " or ".join(f"--for {spec}" for spec in vllm),
            )
        writes = not (args.check or args.dry_run)
        result = convert_checkpoint(
            args.source,
            args.output,
            in_place=args.in_place,
            to=args.to,
            block_size=args.block_size,
            sample_from_anchor=args.sample_from_anchor,
            target=args.target,
            force=args.force,
            backup=args.backup,
            link_mode=LinkMode(args.link_mode),
            dry_run=not writes,
            revision=args.revision,
            token=args.token,
            timeout=args.timeout,
            push_to_hub=args.push_to_hub if writes else None,
            create_pr=args.pr,
            commit_message=args.commit_message,
            for_engines=engines,
        )
        code = EXIT_FINDINGS if args.check and result.plan.changed else EXIT_OK
        if fmt is OutputFormat.JSON:
            document = result.to_dict()
            if args.check:
                document["mode"] = "check"
            if args.push_to_hub and not writes:
                document["push"] = {"repo_id": args.push_to_hub, "pr_url": None, "commit_url": None, "would_push": True}
            write_json(document)
        else:
            render(
                result,
                check=args.check,
                quiet=args.quiet,
                no_color=args.no_color,
                would_push=args.push_to_hub if not writes else None,
            )
        raise typer.Exit(code)


def _check_usage(
    output: str | None,
    in_place: bool,
    to: str | None,
    backup: bool,
    check: bool,
    dry_run: bool,
) -> None:
    if in_place and output is not None:
        raise UsageError(
            "--in-place and -o/--output exclude each other",
            "pass -o OUT for a new folder, or --in-place to rewrite SOURCE",
        )
    if not backup and not in_place:
        raise UsageError("--no-backup only applies to --in-place", "drop --no-backup")
    if not (in_place or output or check or dry_run):
        raise UsageError("no output given", "pass -o OUT (a new folder), --in-place, --dry-run or --check")


# --------------------------------------------------------------------------------------------
# Human output
# --------------------------------------------------------------------------------------------


def _geometry_rows(before: Geometry | None, after: Geometry | None) -> list[tuple[str, str, str]]:
    def cell(g: Geometry | None, value: str, source: str | None = None) -> str:
        if g is None:
            return "[red]unknown[/red]"
        return value + (f" [dim]({source})[/dim]" if source else "")

    rows = []
    for label, get, source in (
        ("block_size", lambda g: str(g.block_size), lambda g: g.block_size_source.value),
        (
            "sample_from_anchor",
            lambda g: str(g.sample_from_anchor).lower(),
            lambda g: g.sample_from_anchor_source.value,
        ),
        ("layout", lambda g: g.layout, None),
        ("K_max", lambda g: str(g.max_speculative_tokens), None),
        ("query positions at K_max", lambda g: str(g.num_query_tokens), None),
    ):
        rows.append(
            (
                label,
                cell(before, get(before) if before else "", source(before) if (before and source) else None),
                cell(after, get(after) if after else "", source(after) if (after and source) else None),
            )
        )
    return rows


def render(result: Any, *, check: bool, quiet: bool, no_color: bool, would_push: str | None) -> None:
    from dflash_tools.convert import ConvertResult

    assert isinstance(result, ConvertResult)
    plan = result.plan
    console = stdout_console(no_color)
    err = stderr_console(no_color)
    for warning in plan.warnings:
        err.print(f"[yellow]warning:[/yellow] {safe_text(warning)}", soft_wrap=True)
    for note in result.notes:
        err.print(f"[dim]note:[/dim] {safe_text(note)}", soft_wrap=True)
    if not quiet:
        where = safe_text(plan.loaded.source)
        arrow = f" → {safe_text(result.output)}" if result.output is not None else ""
        mode = {"dry-run": "(dry run: nothing written)", "in-place": "(in place)"}.get(result.mode, "")
        if check:
            mode = "(check: nothing written)"
        # Laid out by words (never splitting the source or output path, no trailing spaces).
        header_text = f"convert {where}{arrow} {unbroken(mode)}"
        for number, line in enumerate(wrap_words(header_text, console_width(console), "  ", first_indent="")):
            header = Text(line)
            if number == 0:
                header.stylize("bold", 0, len("convert"))
            print_line(console, header)
        kind = "cross-dialect" if plan.cross_dialect else "normalize"
        console.print(f"dialect: {plan.description.dialect.value} → {plan.output_dialect.value} ({kind})")
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
        table.add_column("geometry")
        table.add_column("before")
        table.add_column("after")
        after_geometry = result.after.geometry if result.after is not None else (plan.output_geometry or plan.geometry)
        for row in _geometry_rows(plan.before.geometry, after_geometry):
            table.add_row(*row)
        print_unpadded(console, table)
        if plan.decisions:
            console.print("[bold]decisions[/bold]")
            for decision in plan.decisions:
                _bullet(console, printable(decision.message))
        if plan.engines:
            console.print("[bold]engines[/bold]")
            for spec, verdict in plan.engines.items():  # keyed as in JSON: `engine_rules.json_key`
                plugin = " (with the dflash-tools plugin)" if verdict["plugin"] == "needed" else ""
                _bullet(
                    console,
                    f"{spec}: {verdict['outcome']}{plugin}, {verdict['layout']} layout, K = {verdict['draft_tokens']}",
                )
        if plan.tensor_changes:
            console.print("[bold]tensors[/bold]")
            for change in plan.tensor_changes:
                what = f"rename → {printable(change.new_name)}" if change.action == "rename" else "drop"
                _bullet(
                    console, f"{printable(change.name)} ({printable(change.file)}): {what}: {printable(change.reason)}"
                )
        if result.files:
            rows = [
                [
                    printable(record.path),
                    record.action + (f" ({printable(record.detail)})" if record.detail else ""),
                    human_bytes(record.bytes),
                ]
                for record in result.files
            ]
            table_or_blocks(console, ("file", "action", "bytes"), rows)
        if result.mode == "dry-run" and not check and plan.config_changed:
            console.print("[bold]config.json diff[/bold]")
            for line in plan.diff().splitlines():
                style = "green" if line.startswith("+") else "red" if line.startswith("-") else None
                text = safe_text(line)
                console.print(f"[{style}]{text}[/{style}]" if style else text, soft_wrap=True)
        if result.after is not None:
            _render_verification(console, result)
    _render_last_line(console, result, check=check, would_push=would_push)


def _bullet(console: Any, text: str) -> None:
    for line in wrap_words(text, console.width, "    ", first_indent="  • "):
        print_line(console, line)


def _render_verification(console: Any, result: Any) -> None:
    after = result.after
    counts = {s: sum(1 for f in after.findings if f.severity is s) for s in Severity}
    text = (
        f"verification: output inspected: {counts[Severity.ERROR]} error(s), "
        f"{counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} note(s); no new errors"
    )
    for line in wrap_words(text, console.width, "  "):
        print_line(console, line)
    for finding in after.findings:
        if finding.severity is Severity.INFO:
            continue
        style = SEVERITY_STYLE[finding.severity.value]
        lines = wrap_words(printable(finding.message), console.width, " " * 9, first_indent=f"  {finding.code} ")
        styled = Text("\n".join(lines))
        styled.stylize(style, 2, 2 + len(finding.code))
        console.print(styled, soft_wrap=True)


def _render_last_line(console: Any, result: Any, *, check: bool, would_push: str | None) -> None:
    plan = result.plan
    if check or result.mode == "dry-run":
        if plan.changed:
            parts = []
            if plan.config_changed:
                keys = plan.changed_keys()
                parts.append(
                    f"config.json ({len(keys)} key(s): {', '.join(keys[:6])}{', ...' if len(keys) > 6 else ''})"
                )
            if plan.tensor_changes:
                parts.append(f"{len(plan.tensor_changes)} tensor(s)")
            verb = "[bold yellow]would change[/bold yellow]" if check else "[bold]would write[/bold]"
            console.print(f"{verb}: {safe_text('; '.join(parts))}")
        else:
            console.print("[bold green]already normalized[/bold green]: nothing would change")
        if would_push:
            console.print(f"would open a pull request on {safe_text(would_push)}")
        return
    if not result.written:
        console.print("[bold green]already normalized[/bold green]: nothing written")
    else:
        linked = sum(1 for f in result.files if f.action in ("hardlink", "symlink"))
        text = (
            f"wrote {printable(result.output)}: {len(result.files)} file(s), "
            f"{linked} linked, {human_bytes(result.weight_bytes_copied)} of weights copied"
            + (f"; backups: {', '.join(printable(p.name) for p in result.backups)}" if result.backups else "")
        )
        for index, line in enumerate(wrap_words(text, console.width, "  ")):
            styled = Text(line)
            if index == 0:
                styled.stylize("bold green", 0, len("wrote"))
            print_line(console, styled)
    if result.push is not None:
        if result.push.pr_url:
            console.print(f"pull request: {safe_text(result.push.pr_url)}")
        elif result.push.commit_url:
            console.print(f"commit: {safe_text(result.push.commit_url)}")
