"""`dflash-tools inspect`, run: call the core (`serving.inspect_sources`) and render (options: `inspect_cmd`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.text import Text

from dflash_tools.cli._errors import handle_errors
from dflash_tools.cli._layout import (
    Fix,
    console_width,
    fits,
    key_values,
    pack,
    plain_table,
    print_command,
    print_comment,
    print_findings,
    print_fixes,
    print_line,
    print_unpadded,
    table_or_blocks,
    wrap_words,
)
from dflash_tools.cli._output import (
    OutputFormat,
    human_bytes,
    printable,
    stderr_console,
    stdout_console,
    write_json,
)
from dflash_tools.draft.target import TargetDescription
from dflash_tools.engine_rules import Outcome
from dflash_tools.errors import EXIT_OK, DflashToolsError
from dflash_tools.findings import Severity, brief_list
from dflash_tools.inspect import InspectReport
from dflash_tools.serving.engine_model import AS_TRAINED
from dflash_tools.serving.engine_verdicts import outcome_meaning
from dflash_tools.serving.inspect_sources import inspect_request, inspect_sources
from dflash_tools.serving.verdict import engine_verdict

if TYPE_CHECKING:
    from dflash_tools.cli.inspect_cmd import InspectArgs


def run(args: InspectArgs) -> None:
    """Run `dflash-tools inspect`: build the request, call the core (`inspect_sources`), render."""
    fmt = OutputFormat.JSON if args.json_flag else args.output_format
    given = list(args.sources or [])
    with handle_errors("inspect", json_output=fmt is OutputFormat.JSON, source=given[0] if len(given) == 1 else given):
        request = inspect_request(args)
        if args.token and "HF_TOKEN" not in os.environ:
            stderr_console(args.no_color).print(
                "[yellow]warning:[/yellow] --token on the command line is visible to other users; prefer HF_TOKEN"
            )
        result = inspect_sources(request)
        if fmt is OutputFormat.JSON:
            write_json(result.to_dict(include_tensors=args.tensors))
        elif len(result.reports) == 1:
            report = result.reports[0]
            assert isinstance(report, InspectReport)  # one source: its error was raised
            render_report(
                report,
                show_tensors=args.tensors,
                quiet=args.quiet,
                no_color=args.no_color,
                target_spec=result.target,
                ok=result.exit_code == EXIT_OK,
            )
        else:
            render_summary(result.sources, result.reports, no_color=args.no_color)
        raise typer.Exit(result.exit_code)


def _geometry_segments(report: InspectReport) -> list[str]:
    g = report.geometry
    if g is None:
        return ["unknown (no valid block_size)"]
    k_note = "requested" if g.speculative_tokens_requested else "= K_max"
    if not g.layout_known:
        # Both readings, never one passed off as the layout (docs/inspect.md, "Geometry").
        readings = [g.reading(False), g.reading(True)]
        return [
            f"block_size {g.block_size}",
            "layout unknown (the evidence disagrees: DFT010 / DFT018)",
            *(
                f"if {r['layout']}: K_max {r['max_speculative_tokens']}, K {r['num_speculative_tokens']} "
                f"→ {r['num_query_tokens']} query positions"
                for r in readings
            ),
        ]
    decided = g.sample_from_anchor_source.value
    if g.layout_decided_by is not None and g.sample_from_anchor_source.value == "inferred":
        decided += f" from the {g.layout_decided_by.value.replace('-', ' ')}"
    return [
        f"block_size {g.block_size}",
        f"{g.layout} (sample_from_anchor={str(g.sample_from_anchor).lower()}, {decided})",
        f"K_max {g.max_speculative_tokens}",
        f"K {g.num_speculative_tokens} ({k_note}) → {g.num_query_tokens} query positions",
    ]


def _verdict(report: InspectReport, ok: bool | None = None) -> Text:
    """`OK` or `FAIL` (as the exit code says, `--fail-on` included; else the errors) and the counts."""
    counts = report.severity_counts()
    summary = (
        f": {counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} note(s)"
    )
    if report.ok if ok is None else ok:
        return Text.assemble(("OK", "bold green"), summary)
    return Text.assemble(("FAIL", "bold red"), summary)


def _spec(entry: dict[str, Any]) -> str:
    return f"{entry['engine']}=={entry['version']}"


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def engines_verdict(entries: dict[str, dict[str, Any]], *, judged: bool = False) -> str:
    """Which engine releases serve the draft as trained: of the --engine columns (`judged`: they
    set the exit code, and are said as `plan` says them, `serving.verdict.engine_verdict`), else
    of every release's table (`engine_verdicts`, information only); empty when there are none."""
    if not entries:
        return ""
    if judged:
        _, words = engine_verdict([(_spec(e), Outcome(e["outcome"]) in AS_TRAINED) for e in entries.values()])
        return f"engines: {words}"
    served = [_spec(e) for e in entries.values() if Outcome(e["outcome"]) in AS_TRAINED]
    others = [_spec(e) for e in entries.values() if Outcome(e["outcome"]) not in AS_TRAINED]
    if not served:
        return f"engines: served as trained by none of {_listed(others)}"
    return f"engines: served as trained by {_listed(served)}" + (f", not by {_listed(others)}" if others else "")


def print_verdict(console: Console, verdict: Text, engines: str, *, last: bool = False) -> None:
    """The verdict, first and last: the findings' counts on one line, and beside it (below it
    first, above it last) which engine releases serve the draft as trained, wrapped at words."""
    if last:
        for line in wrap_words(engines, console_width(console), "  ", first_indent="") if engines else []:
            print_line(console, line)
    print_line(console, verdict)
    if not last:
        for line in wrap_words(engines, console_width(console), "  ", first_indent="") if engines else []:
            print_line(console, line)


def render_engine_verdicts(console: Console, verdicts: dict[str, dict[str, Any]], defined: set[str]) -> None:
    """One line per engine release (plain inspect): its outcome, K and query positions, read
    from its table; the outcome words defined below them."""
    print_line(console, "engines (each release's rules; --engine all: the columns and launch lines)", style="bold")
    rows = []
    for entry in verdicts.values():
        segments = [entry["outcome"]]
        if entry["num_speculative_tokens"] is not None:
            segments.append(f"K {entry['num_speculative_tokens']}")
        if entry["num_query_tokens"] is not None:
            segments.append(f"{entry['num_query_tokens']} query positions")
        rows.append((_spec(entry), segments))
    key_values(console, rows)
    print_legend(console, [entry["outcome"] for entry in verdicts.values()], defined)


def print_legend(console: Console, words: list[str], defined: set[str]) -> None:
    """`word: what it means` for each outcome word not yet defined on screen (`defined` grows)."""
    for word in dict.fromkeys(words):
        meaning = outcome_meaning(word)
        if word in defined or not meaning:
            continue
        defined.add(word)
        for line in wrap_words(f"{word}: {meaning}", console_width(console), "    ", first_indent="  "):
            print_line(console, line, style="dim")


def render_report(
    report: InspectReport,
    *,
    show_tensors: bool = False,
    quiet: bool = False,
    no_color: bool = False,
    target_spec: TargetDescription | None = None,
    ok: bool | None = None,
) -> None:
    """The verdict first and last, a label/value block, the findings, then each fix command whole.
    `ok`: the verdict as the exit code says it (None: no error finding)."""
    console = stdout_console(no_color)
    doc = report.to_dict()
    verdict, engines_line = (
        _verdict(report, ok),
        engines_verdict(doc["engines"], judged=True)
        if doc.get("engines")
        else engines_verdict(doc.get("engine_verdicts") or {}),
    )
    defined: set[str] = set()  # the outcome words defined on screen so far
    print_verdict(console, verdict, engines_line)
    if not quiet:
        where = printable(report.loaded.location)
        if report.loaded.commit:
            where += f" @ {printable(report.loaded.commit[:12])}"
        print_line(console, Text(printable(report.loaded.source), style="bold"))
        rows: list[tuple[str, list[str]]] = [("location", [where])]
        desc = report.description
        if desc is not None:
            rows.append(("dialect", [f"{desc.dialect.value} (algorithm {desc.algorithm.value})"]))
            rows.append(("geometry", _geometry_segments(report)))
            d = desc.decoder
            rows.append(
                (
                    "model",
                    [
                        f"hidden {d.hidden_size}",
                        f"{d.num_hidden_layers} layers",
                        f"heads {d.num_attention_heads}/{d.num_key_value_heads}×{d.head_dim}",
                        f"intermediate {d.intermediate_size}",
                        f"vocab {d.vocab_size}"
                        + (f" (draft {desc.draft_vocab_size})" if desc.reduced_vocabulary else ""),
                    ],
                )
            )
            layers = [
                f"{brief_list(desc.target_layer_ids)} (z-lab convention, from {printable(desc.target_layer_ids_key)})",
                f"num_target_layers {desc.num_target_layers}" if desc.num_target_layers else "",
                f"mask_token_id {desc.mask_token_id}" if desc.mask_token_id is not None else "",
            ]
            rows.append(("target layers", layers))
            if desc.dflash2 is not None:
                s = desc.dflash2
                rows.append(
                    (
                        "dflash2",
                        [
                            f"conv taps {s.conv_kernel_size}",
                            f"group {s.conv_group_size}",
                            f"selector rank {s.selector_rank} top-{s.selector_top_k}",
                        ],
                    )
                )
        else:
            rows.append(("dialect", ["not recognized"]))
        tensor_doc = doc.get("tensors")
        if tensor_doc:
            expected = doc.get("expected_tensors")
            rows.append(
                (
                    "tensors",
                    [
                        f"{tensor_doc['count']} tensors",
                        f"{tensor_doc['parameters']:,} params",
                        human_bytes(tensor_doc["bytes"]),
                        ", ".join(f"{printable(k)}×{v}" for k, v in tensor_doc["dtypes"].items()),
                        f"{tensor_doc['files']} file(s)",
                        f"{human_bytes(tensor_doc['header_bytes_read'])} of headers read",
                        f"config implies {expected['count']} required, {expected['parameters']:,} params"
                        if expected
                        else "",
                    ],
                )
            )
        else:
            rows.append(("tensors", ["not inspected"]))
        if target_spec is not None:
            rows.append(
                (
                    "target",
                    [
                        printable(target_spec.source),
                        f"{target_spec.num_hidden_layers} layers",
                        f"hidden {target_spec.hidden_size}",
                        f"vocab {target_spec.vocab_size}",
                        "text_config of a multimodal model" if target_spec.multimodal else "",
                    ],
                )
            )
        sha = doc.get("config_sha256")
        if sha:
            rows.append(("config", [f"sha256 {sha[:16]}…"]))
        if report.profile is not None:
            profile = report.profile
            status = "matches" if profile.matches else "departs from"
            segments = [f"{status} the published {printable(profile.name)} layout (by {profile.matched_by})"]
            if profile.release is not None:
                segments = [f"the published config of {printable(profile.release.label)} (by {profile.matched_by})"]
                if not profile.matches:
                    segments.append(f"departs from its {printable(profile.name)} layout")
            elif profile.nearest_release is not None and profile.config_differences:
                segments.append(
                    f"{len(profile.config_differences)} key(s) differ from {printable(profile.nearest_release.label)}"
                )
            rows.append(("profile", segments))
        key_values(console, rows)
    if show_tensors:
        table_rows = [
            [
                printable(row["name"]),
                printable(row["dtype"]),
                str(row["shape"]),
                f"{row['bytes']:,}",
                printable(row["file"]),
            ]
            for row in report.to_dict(include_tensors=True)["tensor_table"]
        ]
        table_or_blocks(console, ("name", "dtype", "shape", "bytes", "file"), table_rows, title="tensors")
    engines = doc.get("engines") or {}
    if engines and not quiet:
        render_engines(console, engines, defined)
    elif doc.get("engine_verdicts") and not quiet:
        render_engine_verdicts(console, doc["engine_verdicts"], defined)
    fixes: list[Fix] = []
    if report.findings:
        print_line(console, "findings", style="bold")
        print_findings(console, [f.to_dict() for f in report.findings], fixes)
    if report.omitted:
        names = {"error": "errors", "warning": "warnings", "info": "notes"}
        shown = ", ".join(f"{count:,} {names.get(severity, severity)}" for severity, count in report.omitted.items())
        print_line(
            console,
            f"... and {sum(report.omitted.values()):,} more findings not shown ({shown}); "
            "--format json counts them in findings_omitted",
            style="dim",
        )
    print_fixes(console, fixes)
    if engines:  # -q keeps them: what needs attention includes what to run
        print_launches(console, engines, launch_blockers(report.findings), defined)
    if not quiet:
        print_normalization(console, report)
    print_verdict(console, verdict, engines_line, last=True)


def print_normalization(console: Console, report: InspectReport) -> None:
    """Say what `convert --check` would change, so that an OK here and its exit 1 do not disagree
    without a word: convert writes block_size and sample_from_anchor into every place an engine
    reads them (docs/convert.md), which a checkpoint may lack with nothing wrong in it."""
    if report.loaded.config is None or report.description is None:
        return
    from dflash_tools.convert import plan_conversion

    try:
        plan = plan_conversion(report.loaded)
    except DflashToolsError:
        return  # convert would refuse: the findings above say why
    if not plan.changed:
        return
    parts = []
    if plan.config_changed:
        keys = plan.changed_keys()
        parts.append(f"config.json key(s) {', '.join(keys[:6])}{', ...' if len(keys) > 6 else ''}")
    if plan.tensor_changes:
        parts.append(f"{len(plan.tensor_changes)} tensor name(s)")
    fixed_above = any("dflash-tools convert" in f.hint for f in report.findings)
    status = "not normalized" if fixed_above or not report.ok else "not normalized (optional, nothing above needs it)"
    text = f"{status}: `dflash-tools convert --check` exits 1 here, as convert would write {' and '.join(parts)} " + (
        "(the fix above does)" if fixed_above else "where every engine reads them (docs/convert.md)"
    )
    for line in wrap_words(printable(text), console_width(console)):
        print_line(console, line, style="dim")


_OUTCOME_STYLE = {
    "served": "green",
    "served-with-plugin": "green",
    "served-wrong": "bold red",
    "misaligned": "bold red",
    "refused": "bold red",
    "unsupported": "bold red",
    "wont-load": "bold red",
}


def _engine_cells(view: dict[str, Any]) -> list[tuple[str, str]]:
    """(row label, value) for one engine, each value short enough for a table cell."""

    def with_source(value: Any, source: Any) -> str:
        if value is None:
            return "-" if source is None else f"? ({source})"
        return f"{value} ({source})" if source else str(value)

    ids = view["target_layer_ids"]
    return [
        ("outcome", view["outcome"]),
        ("stops at", view.get("stopped_at") or "-"),
        ("defaults", _defaults_cell(view.get("filled_defaults"))),
        ("layout", view["layout"] or "-"),
        ("block", with_source(view["block_size"], view["block_size_source"])),
        ("K / queries", _k_and_queries(view)),
        ("layers", with_source(" ".join(str(i) for i in ids) if ids else None, view["target_layer_ids_source"])),
        ("mask id", str(view["mask_token_id"]) if view["mask_token_id"] is not None else "-"),
        ("as trained", "yes" if view["matches_training"] else "no"),
    ]


def _defaults_cell(filled: dict[str, Any] | None) -> str:
    """How many keys the config class fills in, and which class: `4 by GptOss` (GptOssConfig);
    `none filled` when the class fills none the draft's computation depends on."""
    if not filled or not filled.get("by"):
        return "-"
    name = str(filled["by"]).split(" ")[-1].removesuffix("Config")
    count = "?" if "*" in filled.get("not_tabulated", []) else str(len(filled.get("values") or {}))
    return "none filled" if count == "0" else f"{count} by {name}"  # `0 by Speculators` read as a count of 0


def _read_from_note(view: dict[str, Any]) -> str:
    """Where a column read from the installed engine comes from (docs/inspect.md, "The installed
    engine has the last word"); empty for a column of a table."""
    read_from = view.get("read_from")
    if not read_from:
        return ""
    spec = f"{view['engine']}=={view['version']}"
    steps = (view.get("installed_reading") or {}).get("steps") or []
    ran = [step["step"] for step in steps if step.get("status") == "ok"]
    text = f"{spec}: read from {read_from} ({', '.join(ran) or 'no step ran'})"
    if not view.get("has_table", True):
        return text + f"; no table for this release: {view.get('table')}'s fills in what its code does not show"
    disagreements = view.get("disagreements") or []
    if disagreements:
        fields = ", ".join(dict.fromkeys(d["field"] for d in disagreements))
        return text + f"; it disagrees with the table on {fields} (DFT089), and its reading is shown"
    return text + "; it agrees with the table"


def _k_and_queries(view: dict[str, Any]) -> str:
    """`K / query positions`, as plan's table shows them."""
    k, queries = view["num_speculative_tokens"], view["num_query_tokens"]
    return "-" if k is None else f"{k} / {queries if queries is not None else '-'}"


def render_engines(console: Console, engines: dict[str, dict[str, Any]], defined: set[str] | None = None) -> None:
    """One column per engine release when it fits the width; else one block per release; then
    the outcome words not yet `defined` on screen."""
    specs = list(engines)
    cells = {spec: _engine_cells(view) for spec, view in engines.items()}
    notes = [note for note in (_read_from_note(view) for view in engines.values()) if note]
    if notes:
        for spec, view in engines.items():
            cells[spec].append(("read from", "installed" if view.get("read_from") else "table"))
    labels = [label for label, _ in cells[specs[0]]]
    rows: list[list[str | Text]] = []
    for index, label in enumerate(labels):
        row: list[str | Text] = [label]
        for spec in specs:
            value = cells[spec][index][1]
            row.append(Text(value, style=_OUTCOME_STYLE.get(value, "")) if label == "outcome" else value)
        rows.append(row)
    print_line(console, "engines", style="bold")
    names = [f"{engines[key]['engine']}=={engines[key]['version']}" for key in specs]
    table = plain_table(["", *names], rows)
    if fits(console, table):
        print_unpadded(console, table)
    else:
        for spec, name in zip(specs, names, strict=True):
            outcome = engines[spec]["outcome"]
            print_line(console, Text.assemble((name, "bold"), "  ", (outcome, _OUTCOME_STYLE.get(outcome, ""))))
            segments = [f"{label} {value}" for label, value in cells[spec][1:]]
            for line in pack(segments, console_width(console), first="  ", indent="  "):
                print_line(console, line)
    for note in notes:
        for line in wrap_words(printable(note), console_width(console)):
            print_line(console, line, style="dim")
    print_legend(console, [view["outcome"] for view in engines.values()], set() if defined is None else defined)


def render_summary(
    names: list[str], results: list[InspectReport | DflashToolsError], *, no_color: bool = False
) -> None:
    """One table when it fits on one line per source; else one block per source (never a split cell)."""
    console = stdout_console(no_color)
    # K_max is not a column: it follows from B and the layout (B - 1 bonus-anchor, B anchor-first).
    columns = ("source", "dialect", "B", "layout", "Q", "params", "verdict", "codes")
    rows: list[list[str | Text]] = []
    statuses: list[Text | None] = []
    for name, result in zip(names, results, strict=True):
        if isinstance(result, DflashToolsError):
            verdict = Text("UNREADABLE", style="bold red")
            # No codes: it was not read, and why is printed under the table (not as codes).
            rows.append([printable(name), "", "", "", "", "", verdict, "-"])
            statuses.append(verdict)
            continue
        g = result.geometry
        doc = result.to_dict()
        tensors = doc.get("tensors") or {}
        counts = result.severity_counts()
        errors, warnings = counts[Severity.ERROR], counts[Severity.WARNING]
        verdict = Text("OK", style="bold green") if result.ok else Text("FAIL", style="bold red")
        if errors or warnings:
            verdict = Text.assemble(verdict, f" {errors}E {warnings}W")
        rows.append(
            [
                printable(name),
                printable(doc.get("dialect") or "?"),
                str(g.block_size) if g else "?",
                f"{g.layout} ({g.sample_from_anchor_source.value})" if g else "?",
                str(g.num_query_tokens) if g else "?",
                f"{tensors['parameters']:,}" if tensors else "-",
                verdict,
                # Info codes stay in the per-source report: the audit table is for what needs action.
                " ".join(sorted({f.code for f in result.findings if f.severity is not Severity.INFO})),
            ]
        )
        statuses.append(verdict)
    bad = sum(1 for r in results if isinstance(r, DflashToolsError) or not r.ok)
    verdict_line = Text.assemble(
        ("FAIL", "bold red") if bad else ("OK", "bold green"),
        f": {len(results)} source(s), {bad} with errors or unreadable",
    )
    print_line(console, verdict_line)
    table_or_blocks(console, columns, rows, heading_status=statuses)
    width = console.width
    for name, result in zip(names, results, strict=True):
        if isinstance(result, DflashToolsError):
            # The message names its source already ("X: no local folder X ..."): not twice.
            message = result.message if result.message.startswith(name) else f"{name}: {result.message}"
            for line in wrap_words(printable(message), width, "  "):
                print_line(console, line, style="red")
    print_line(console, verdict_line)


def launch_blockers(findings: list[Any]) -> dict[str, list[str]]:
    """The error codes that keep each launch line from being pasteable: an error that names an
    engine release (`values["engine"]`) blocks that release's line only; any other error blocks
    every line (key ""). A line that would serve a broken draft is printed commented out."""
    blockers: dict[str, list[str]] = {}
    for finding in findings:
        if finding.severity is Severity.ERROR:
            codes = blockers.setdefault(str(finding.values.get("engine", "")), [])
            if finding.code not in codes:
                codes.append(finding.code)
    return blockers


def print_launches(
    console: Console,
    engines: dict[str, dict[str, Any]],
    blockers: dict[str, list[str]] | None = None,
    defined: set[str] | None = None,
) -> None:
    """Each engine's launch line, whole and pasteable (`print_command`), after a `#` comment naming
    it; a line that an error finding blocks (`launch_blockers`) is printed commented out. The
    outcome words of the releases without a line are defined after them unless `defined` above."""
    blockers = blockers or {}
    everywhere = blockers.get("", [])
    heading = "launch (copy a command line and run it):"
    if everywhere:
        heading = f"launch (not to run until {', '.join(everywhere)} above is fixed; lines kept as comments):"
    print_line(console, heading, style="bold")
    unlaunched: list[str] = []
    for view in engines.values():
        spec = f"{view['engine']}=={view['version']}"
        blocked = [*everywhere, *(c for c in blockers.get(spec, []) if c not in everywhere)]
        command = view.get("launch_command")
        if not command:
            why = f": {view['outcome']}" if Outcome(view["outcome"]) not in AS_TRAINED else ""
            print_comment(console, f"{spec}: no launch line{why} (see the findings above)")
            unlaunched.append(view["outcome"])
            continue
        placeholders = view.get("launch_placeholders") or []
        note = f"; replace {', '.join(placeholders)} with the target model first" if placeholders else ""
        if blocked and not everywhere:
            note += f"; not to run until {', '.join(blocked)} above is fixed"
        print_comment(console, f"{spec}{note}")
        print_command(console, command, commented=bool(blocked))
    print_legend(console, unlaunched, set() if defined is None else defined)
