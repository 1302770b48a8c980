"""`dflash-tools convert`, run: call the core (`dflash_tools.convert`) and render (the options are in `convert_cmd`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import typer
from rich.text import Text

from dflash_tools.cli._errors import handle_errors, refuse_empty_names
from dflash_tools.cli._layout import console_width, print_line, table_or_blocks, unbroken, wrap_words
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

        refuse_empty_names("--for", args.for_engines, engine_choices())
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
            push_with_errors=args.allow_errors,
        )
        code = EXIT_FINDINGS if args.check and result.plan.changed else EXIT_OK
        # A written checkpoint that still has errors convert cannot fix is not a success to a
        # script (`convert ... && vllm serve ...`) unless it says so with --allow-errors.
        if result.remaining_errors and not args.allow_errors:
            code = EXIT_FINDINGS
        if fmt is OutputFormat.JSON:
            document = result.to_dict()
            # `ok` is what the exit says, in every mode: a --check that finds changes is not ok
            # to a script, whatever the conversion itself (`result.ok`, `verification.ok`) says.
            document["ok"] = code == EXIT_OK
            document["exit_code"] = code
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
                link_mode=LinkMode(args.link_mode),
                allow_errors=args.allow_errors,
            )
        raise typer.Exit(code)


def _legend(console: Any, words: list[str | None]) -> None:
    """What the outcome and layout words above mean (`serving.verdict.legend`, as plan shows them)."""
    from dflash_tools.serving.verdict import legend

    for definition in legend(words):
        for line in wrap_words(definition, console_width(console), "      ", first_indent="    "):
            print_line(console, line, style="dim")


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
            return "unknown"
        return value + (f" ({source})" if source else "")

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


def render(
    result: Any,
    *,
    check: bool,
    quiet: bool,
    no_color: bool,
    would_push: str | None,
    link_mode: LinkMode = LinkMode.AUTO,
    allow_errors: bool = False,
) -> None:
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
        _wrapped(console, f"dialect: {plan.description.dialect.value} → {plan.output_dialect.value} ({kind})")
        after_geometry = result.after.geometry if result.after is not None else (plan.output_geometry or plan.geometry)
        # Our table: one row per line when it fits, else one block per row (never a cut cell).
        table_or_blocks(
            console,
            ("geometry", "before", "after"),
            [list(row) for row in _geometry_rows(plan.before.geometry, after_geometry)],
        )
        if plan.decisions:
            print_line(console, "decisions", style="bold")
            for decision in plan.decisions:
                _bullet(console, printable(decision.message))
        if plan.engines:
            print_line(console, "engines", style="bold")
            for spec, verdict in plan.engines.items():  # keyed as in JSON: `engine_rules.json_key`
                plugin = " (with the dflash-tools plugin)" if verdict["plugin"] == "needed" else ""
                _bullet(
                    console,
                    f"{spec}: {verdict['outcome']}{plugin}, {verdict['layout']} layout, K = {verdict['draft_tokens']}",
                )
            _legend(console, [word for v in plan.engines.values() for word in (v["outcome"], v["layout"])])
        if plan.tensor_changes:
            print_line(console, "tensors", style="bold")
            _tensor_changes(console, plan.tensor_changes)
        if result.files:
            planned_as = _planned_placement(result, link_mode) if result.mode == "dry-run" else "link"
            rows = [
                [printable(record.path), _action(record, plan.tensor_changes, planned_as), human_bytes(record.bytes)]
                for record in result.files
            ]
            table_or_blocks(console, ("file", "action", "bytes"), rows)
        if result.mode == "dry-run" and not check and plan.config_changed:
            print_line(console, "config.json diff", style="bold")
            for line in plan.diff().splitlines():
                style = "green" if line.startswith("+") else "red" if line.startswith("-") else None
                text = safe_text(line)
                console.print(f"[{style}]{text}[/{style}]" if style else text, soft_wrap=True)
        if result.after is not None:
            _render_verification(console, result)
    _render_last_line(console, result, check=check, would_push=would_push, allow_errors=allow_errors)


def _bullet(console: Any, text: str) -> None:
    for line in wrap_words(text, console_width(console), "    ", first_indent="  • "):
        print_line(console, line)


def _wrapped(console: Any, text: str, style: str | None = None, indent: str = "  ") -> None:
    for line in wrap_words(text, console_width(console), indent, first_indent=""):
        print_line(console, line, style=style)


def _tensor_changes(console: Any, changes: list[Any]) -> None:
    """One bullet per change; renames that strip the same prefix for the same reason are one bullet
    (a checkpoint saved with `model.` names renames every tensor: 25 bullets said the same)."""
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for change in changes:
        prefix = ""
        if change.action == "rename" and change.new_name and change.name.endswith(change.new_name):
            prefix = change.name[: -len(change.new_name)]
        groups.setdefault((change.action, prefix, change.reason), []).append(change)
    for (action, prefix, reason), members in groups.items():
        if action == "rename" and prefix and len(members) > 2:
            files = sorted({printable(m.file) for m in members})
            _bullet(
                console,
                f"{len(members)} tensors: rename {printable(prefix)}NAME → NAME ({', '.join(files)}): "
                f"{printable(reason)}; e.g. {printable(members[0].name)} → {printable(members[0].new_name)}",
            )
            continue
        for change in members:
            what = f"rename → {printable(change.new_name)}" if change.action == "rename" else "drop"
            _bullet(console, f"{printable(change.name)} ({printable(change.file)}): {what}: {printable(change.reason)}")


def _action(record: Any, changes: list[Any], planned_as: str) -> str:
    """A file's action as the run says it (a dry run's "link" as the placement it will be), a
    repack's as counts: the renames and drops themselves are listed once, under "tensors"."""
    action = planned_as if record.action == "link" else record.action
    if record.action != "repack":
        return action + (f" ({printable(record.detail)})" if record.detail else "")
    mine = [c for c in changes if c.file == record.path]
    renamed = sum(1 for c in mine if c.action == "rename")
    dropped = sum(1 for c in mine if c.action == "drop")
    counts = [f"{renamed} renamed"] if renamed else []
    return f"{action} ({', '.join([*counts, f'{dropped} dropped'])})"


def _planned_placement(result: Any, link_mode: LinkMode) -> str:
    """How a dry run's unchanged files will reach OUT, said as the run will say it: `hardlink`
    where OUT's file system is the source's, else `copy` (`--link-mode auto`); an example is
    always copied, never tied to the installed package (convert/run.py)."""
    if link_mode in (LinkMode.COPY, LinkMode.SYMLINK):
        return link_mode.value
    loaded = result.plan.loaded
    if link_mode is LinkMode.AUTO and loaded.kind == "example":
        return "copy"
    if link_mode is LinkMode.HARDLINK or result.output is None or loaded.local_dir is None:
        return "hardlink" if link_mode is LinkMode.HARDLINK else "hardlink or copy"
    try:
        parent = next(p for p in (result.output, *result.output.parents) if p.exists())
        same = parent.stat().st_dev == loaded.local_dir.stat().st_dev
    except (OSError, StopIteration):
        return "hardlink or copy"
    return "hardlink" if same else "copy"


def _render_verification(console: Any, result: Any) -> None:
    after = result.after
    counts = {s: sum(1 for f in after.findings if f.severity is s) for s in Severity}
    text = (
        f"verification: output inspected: {counts[Severity.ERROR]} error(s), "
        f"{counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} note(s); no new errors"
    )
    for line in wrap_words(text, console_width(console), "  "):
        print_line(console, line)
    for finding in after.findings:
        if finding.severity is Severity.INFO:
            continue
        style = SEVERITY_STYLE[finding.severity.value]
        lines = wrap_words(
            printable(finding.message), console_width(console), " " * 9, first_indent=f"  {finding.code} "
        )
        styled = Text("\n".join(lines))
        styled.stylize(style, 2, 2 + len(finding.code))
        console.print(styled, soft_wrap=True)


def _styled(console: Any, text: str, head: str, style: str) -> None:
    """`text` wrapped at words, its first `head` characters styled."""
    for index, line in enumerate(wrap_words(text, console_width(console), "  ")):
        styled = Text(line)
        if index == 0:
            styled.stylize(style, 0, len(head))
        print_line(console, styled)


def _render_last_line(
    console: Any, result: Any, *, check: bool, would_push: str | None, allow_errors: bool = False
) -> None:
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
            verb = "would change" if check else "would write"
            _styled(console, f"{verb}: {printable('; '.join(parts))}", verb, "bold yellow" if check else "bold")
        else:
            _styled(console, "already normalized: nothing would change", "already normalized", "bold green")
        if would_push:
            _wrapped(console, f"would open a pull request on {printable(would_push)}")
        return
    if not result.written:
        _styled(console, "already normalized: nothing written", "already normalized", "bold green")
    else:
        linked = sum(1 for f in result.files if f.action in ("hardlink", "symlink"))
        text = (
            f"wrote {printable(result.output)}: {len(result.files)} file(s), "
            f"{linked} linked, {human_bytes(result.weight_bytes_copied)} of weights copied"
            + (f"; backups: {', '.join(printable(p.name) for p in result.backups)}" if result.backups else "")
        )
        for index, line in enumerate(wrap_words(text, console_width(console), "  ")):
            styled = Text(line)
            if index == 0:
                styled.stylize("bold green", 0, len("wrote"))
            print_line(console, styled)
    remaining = sorted({f.code for f in result.remaining_errors})
    if remaining:
        verdict = "still has errors" if not allow_errors else "still has errors (accepted: --allow-errors)"
        _styled(
            console,
            f"{verdict}: {', '.join(remaining)} in the written checkpoint, which convert cannot fix"
            + ("" if allow_errors else "; exit 1 (--allow-errors accepts them)"),
            verdict,
            "bold red" if not allow_errors else "bold yellow",
        )
    if result.push is not None:
        if result.push.pr_url:
            print_line(console, f"pull request: {printable(result.push.pr_url)}")
        elif result.push.commit_url:
            print_line(console, f"commit: {printable(result.push.commit_url)}")
