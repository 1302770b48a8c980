"""`dflash-tools inspect`: parse options, call the core, render."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import typer
from rich.text import Text

from dflash_tools.cli._errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, handle_errors
from dflash_tools.cli._layout import (
    Fix,
    key_values,
    print_findings,
    print_fixes,
    print_line,
    table_or_blocks,
    wrap_words,
)
from dflash_tools.cli._options import FormatOption, JsonOption, NoColorOption, TargetRevisionOption, TokenOption
from dflash_tools.cli._output import (
    OutputFormat,
    human_bytes,
    printable,
    stderr_console,
    stdout_console,
    write_json,
)
from dflash_tools.draft.findings import Severity, brief_list
from dflash_tools.draft.target import TargetSpec, load_target
from dflash_tools.errors import DflashToolsError, UsageError
from dflash_tools.inspect import SCHEMA_VERSION, InspectReport, inspect_loaded
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.smoke.capability import detect_vllm
from dflash_tools.smoke.serving import ENGINES, inspect_for_vllm

HELP = """Check a draft checkpoint's config and tensor headers, without downloading weights.

SOURCE is a local folder, a .safetensors or config.json file, a Hugging Face repo id
(owner/name), or a bundled example:NAME. Several sources are inspected concurrently and
summarized together. To list the bundled examples:

  dflash-tools examples

Examples:

  dflash-tools inspect example:zlab-dflash2

  dflash-tools inspect z-lab/Qwen3.8-27B-DFlash2 --target Qwen/Qwen3.8-27B -k 7

  dflash-tools inspect ./my-draft --format json | jq .geometry

  dflash-tools inspect ./anchor-first-draft --engine vllm

  dflash-tools inspect --author z-lab --search DFlash
"""

EPILOG = (
    "Exit codes: 0 no error findings; 1 at least one error finding (or a warning with "
    "--fail-on warning); 2 usage error or a source that cannot be found or reached."
)


def register(app: typer.Typer) -> None:
    app.command(
        "inspect",
        help=HELP,
        short_help="Check a draft's config and tensor headers (no weights read).",
        epilog=EPILOG,
        no_args_is_help=True,
    )(inspect_command)


def inspect_command(
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="SOURCE...", help="Checkpoint folder, file, repo id or example:NAME.", show_default=False
        ),
    ] = None,
    target: Annotated[
        str | None, typer.Option("--target", "-t", help="Target model (folder or repo id): check the pairing.")
    ] = None,
    num_speculative_tokens: Annotated[
        int | None,
        typer.Option("-k", "--num-speculative-tokens", min=1, help="Serving K to check against the trained geometry."),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            metavar="vllm",
            help="Check how the serving engine installed in this Python environment (vllm) will serve the draft.",
        ),
    ] = None,
    revision: Annotated[str | None, typer.Option("--revision", help="Hub branch, tag or commit of the draft.")] = None,
    target_revision: TargetRevisionOption = None,
    token: TokenOption = None,
    author: Annotated[
        str | None, typer.Option("--author", help="Inspect every Hub model of this author (with --search to filter).")
    ] = None,
    search: Annotated[str | None, typer.Option("--search", help="Hub search string, used with --author.")] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="Most Hub models to inspect with --author/--search.")
    ] = 100,
    output_format: FormatOption = OutputFormat.HUMAN,
    json_flag: JsonOption = False,
    tensors: Annotated[
        bool, typer.Option("--tensors", help="Show (or include in JSON) the full tensor table.")
    ] = False,
    fail_on: Annotated[
        Severity, typer.Option("--fail-on", help="Lowest severity that makes the exit code 1.")
    ] = Severity.ERROR,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds for each Hub request.")] = 10.0,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Sources inspected at once.")] = 8,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Human output: only the verdict and the findings.")
    ] = False,
    no_color: NoColorOption = False,
) -> None:
    fmt = OutputFormat.JSON if json_flag else output_format
    given = list(sources or [])
    with handle_errors("inspect", json_output=fmt is OutputFormat.JSON, source=given[0] if len(given) == 1 else given):
        names = list(sources or [])
        if author or search:
            from dflash_tools.reading.hub import list_hub_models

            names += list_hub_models(author, search, token=token, limit=limit, timeout=timeout)
            if not names:
                raise UsageError(
                    f"no Hub models match author={author!r} search={search!r}",
                    "check the spelling, or pass sources directly",
                )
        if not names:
            raise UsageError("no SOURCE given", "pass a folder, a repo id, example:zlab-dflash2, or --author")
        if token and "HF_TOKEN" not in os.environ:
            stderr_console(no_color).print(
                "[yellow]warning:[/yellow] --token on the command line is visible to other users; prefer HF_TOKEN"
            )
        target_spec = load_target(target, revision=target_revision, token=token, timeout=timeout) if target else None
        if engine is not None and engine not in ENGINES:
            raise UsageError(f"--engine {engine}: unknown engine", f"choose one of: {', '.join(ENGINES)}")
        vllm = detect_vllm() if engine == "vllm" else None

        def run(name: str) -> InspectReport | DflashToolsError:
            try:
                loaded = load_checkpoint(name, revision=revision, token=token, timeout=timeout)
                if vllm is not None:
                    return inspect_for_vllm(
                        loaded, vllm, target=target_spec, num_speculative_tokens=num_speculative_tokens
                    )
                return inspect_loaded(loaded, target=target_spec, num_speculative_tokens=num_speculative_tokens)
            except DflashToolsError as exc:
                return exc

        if len(names) == 1:
            results: list[InspectReport | DflashToolsError] = [run(names[0])]
            if isinstance(results[0], DflashToolsError):
                raise results[0]
        else:
            with ThreadPoolExecutor(max_workers=min(jobs, len(names))) as pool:
                results = list(pool.map(run, names))

        code = _exit_code(results, fail_on)
        if fmt is OutputFormat.JSON:
            documents = [_document(name, result, tensors) for name, result in zip(names, results, strict=True)]
            write_json(documents[0] if len(documents) == 1 else documents)
        elif len(results) == 1:
            report = results[0]
            assert isinstance(report, InspectReport)
            render_report(report, show_tensors=tensors, quiet=quiet, no_color=no_color, target_spec=target_spec)
        else:
            render_summary(names, results, no_color=no_color)
        raise typer.Exit(code)


def _exit_code(results: list[InspectReport | DflashToolsError], fail_on: Severity) -> int:
    if any(isinstance(r, DflashToolsError) for r in results):
        return EXIT_USAGE
    failing = {Severity.ERROR} if fail_on is Severity.ERROR else {Severity.ERROR, Severity.WARNING}
    if fail_on is Severity.INFO:
        failing = set(Severity)
    reports = [r for r in results if isinstance(r, InspectReport)]
    return EXIT_FINDINGS if any(f.severity in failing for r in reports for f in r.findings) else EXIT_OK


def _document(name: str, result: InspectReport | DflashToolsError, tensors: bool) -> dict[str, Any]:
    if isinstance(result, InspectReport):
        return result.to_dict(include_tensors=tensors)
    return {
        "schema_version": SCHEMA_VERSION,
        "source": name,
        "error": {"message": result.message, "hint": result.hint},
        "ok": False,
    }


def _geometry_segments(report: InspectReport) -> list[str]:
    g = report.geometry
    if g is None:
        return ["unknown (no valid block_size)"]
    k_note = "requested" if g.speculative_tokens_requested else "= K_max"
    return [
        f"block_size {g.block_size}",
        f"{g.layout} (sample_from_anchor={str(g.sample_from_anchor).lower()}, {g.sample_from_anchor_source.value})",
        f"K_max {g.max_speculative_tokens}",
        f"K {g.num_speculative_tokens} ({k_note}) → {g.num_query_tokens} query positions",
    ]


def _verdict(report: InspectReport) -> Text:
    counts = report.severity_counts()
    summary = (
        f": {counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} note(s)"
    )
    if report.ok:
        return Text.assemble(("OK", "bold green"), summary)
    return Text.assemble(("FAIL", "bold red"), summary)


def render_report(
    report: InspectReport,
    *,
    show_tensors: bool = False,
    quiet: bool = False,
    no_color: bool = False,
    target_spec: TargetSpec | None = None,
) -> None:
    """The verdict first and last, a label/value block, the findings, then each fix command whole."""
    console = stdout_console(no_color)
    doc = report.to_dict()
    print_line(console, _verdict(report))
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
        if report.profile is not None:
            status = "matches" if report.profile.matches else "departs from"
            rows.append(
                (
                    "profile",
                    [
                        f"{status} the published {printable(report.profile.name)} layout (by {report.profile.matched_by})"
                    ],
                )
            )
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
    print_line(console, _verdict(report))


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
            rows.append([printable(name), "", "", "", "", "", verdict, "see below"])
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
            for line in wrap_words(f"{printable(name)}: {printable(result.message)}", width, "  "):
                print_line(console, line, style="red")
    print_line(console, verdict_line)
