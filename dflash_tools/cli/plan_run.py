"""`dflash-tools plan`, run: resolve the options, call the core and render (options: `plan_cmd`)."""

from __future__ import annotations

from typing import Any

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
    print_findings,
    print_fixes,
    print_line,
    print_unpadded,
    wrap_words,
)
from dflash_tools.cli._output import OutputFormat, printable, stdout_console, write_json
from dflash_tools.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from dflash_tools.findings import Severity

SCHEMA_VERSION = 1


def run(
    *,
    target: str | None,
    drafts: list[str] | None,
    preset: str | None,
    num_speculative_tokens: int | None,
    engine: list[str] | None,
    gpu_memory: float | None,
    tensor_parallel_size: int,
    decode_context_parallel_size: int,
    max_num_seqs: int | None,
    max_model_len: int | None,
    max_num_batched_tokens: int | None,
    gpu_memory_utilization: float | None,
    dtype: str | None,
    kv_cache_dtype: str | None,
    revision: str | None,
    target_revision: str | None,
    token: str | None,
    timeout: float,
    output_format: OutputFormat,
    json_flag: bool,
    quiet: bool,
    no_color: bool,
) -> None:
    """Run `dflash-tools plan` with the options `plan_cmd` parsed."""
    fmt = OutputFormat.JSON if json_flag else output_format
    with handle_errors("plan", json_output=fmt is OutputFormat.JSON, source=drafts or preset):
        from dflash_tools.reading.source import load_checkpoint
        from dflash_tools.serving.plan import PlanRequest, build_plan

        specs = _engines(engine)
        settings: dict[str, Any] = {}
        entries: list[tuple[str, str | None]] = [(name, revision) for name in drafts or []]
        if preset is not None:
            from dflash_tools.serving.presets import load_preset

            loaded_preset = load_preset(preset)
            target = target or loaded_preset.target
            if not entries:
                entries = [(entry.draft, entry.revision or revision) for entry in loaded_preset.drafts]
            num_speculative_tokens = num_speculative_tokens or loaded_preset.num_speculative_tokens
            settings = {key: loaded_preset.engine_args.get(key) for key in _PRESET_SETTINGS}
        if not target:
            raise UsageError("no target given", "pass --target (a Hub repo id, folder or example:NAME) or --preset")
        if not entries:
            raise UsageError("no draft given", "pass --draft (repeatable) or --preset")

        given = {
            "max_num_seqs": max_num_seqs,
            "max_model_len": max_model_len,
            "max_num_batched_tokens": max_num_batched_tokens,
            "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": dtype,
            "kv_cache_dtype": kv_cache_dtype,
        }
        from_preset = tuple(key for key in _PRESET_SETTINGS if given[key] is None and settings.get(key) is not None)

        def pick(key: str) -> Any:
            return given[key] if given[key] is not None else settings.get(key)

        target_checkpoint = load_checkpoint(target, revision=target_revision, token=token, timeout=timeout)
        plans = []
        for draft_name, draft_revision in entries:
            request = PlanRequest(
                target=target,
                draft=draft_name,
                engines=tuple(specs),
                num_speculative_tokens=num_speculative_tokens,
                gpu_memory_gib=gpu_memory,
                tensor_parallel_size=tensor_parallel_size,
                decode_context_parallel_size=decode_context_parallel_size,
                max_num_seqs=pick("max_num_seqs"),
                max_model_len=pick("max_model_len"),
                max_num_batched_tokens=pick("max_num_batched_tokens"),
                gpu_memory_utilization=pick("gpu_memory_utilization"),
                dtype=pick("dtype"),
                kv_cache_dtype=pick("kv_cache_dtype"),
                revision=draft_revision,
                target_revision=target_revision,
                from_preset=from_preset,
            )
            draft = load_checkpoint(draft_name, revision=draft_revision, token=token, timeout=timeout)
            plans.append(build_plan(request, target_checkpoint, draft))

        ok = all(plan.ok for plan in plans)
        code = EXIT_OK if ok else EXIT_FINDINGS
        if fmt is OutputFormat.JSON:
            write_json(
                {
                    "schema_version": SCHEMA_VERSION,
                    "command": "plan",
                    "ok": ok,
                    "exit_code": code,
                    "preset": preset,
                    "plans": [plan.to_dict() for plan in plans],
                }
            )
        else:
            render([plan.to_dict() for plan in plans], quiet=quiet, no_color=no_color)
        raise typer.Exit(code)


# The preset's engine arguments the plan reads (others, such as enforce_eager, are not serving facts).
_PRESET_SETTINGS = (
    "max_num_seqs",
    "max_model_len",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "dtype",
    "kv_cache_dtype",
)


def _engines(values: list[str] | None) -> list[str]:
    """`engine==version` tables for the --engine values (default: all); `vllm` is the release of
    the vLLM installed here."""
    from dflash_tools.engine_rules import get_rules
    from dflash_tools.serving.engine_view import ALL, engine_choices, resolve_engine_specs

    try:
        specs, installed = resolve_engine_specs(values or [ALL])
    except ValueError as exc:
        raise UsageError(f"--engine {exc}", f"choose from: {', '.join(engine_choices())}") from None
    if installed:
        from dflash_tools.serving.vllm_capability import detect_vllm

        capability = detect_vllm()
        rules = get_rules(f"vllm=={capability.version}") if capability.installed and capability.version else None
        if rules is None:
            found = f"vLLM {capability.version}" if capability.installed else "no vLLM"
            raise UsageError(
                f"--engine vllm: {found} installed here, and the tool has no table for it",
                "name a release: --engine vllm==0.34.0",
            )
        specs = [spec for spec in _all_specs() if spec in {*specs, rules.spec}]
    return specs


def _all_specs() -> list[str]:
    from dflash_tools.engine_rules import ENGINE_RULES

    return list(ENGINE_RULES)


# --------------------------------------------------------------------------------------------
# Human output
# --------------------------------------------------------------------------------------------


def _verdict(plans: list[dict[str, Any]]) -> Text:
    """The counts of what decides the plan: the draft's and the plan's findings and those of the
    engines that print a launch line; an engine that cannot serve the draft is named instead."""
    findings = [f for plan in plans for f in _counted(plan)]
    counts = {s.value: sum(1 for f in findings if f["severity"] == s.value) for s in Severity}
    summary = f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"
    if len(plans) > 1:
        summary = f"{len(plans)} drafts, {summary}"
    without = sorted({_name(e) for plan in plans for e in plan["engines"].values() if not e["serves"]})
    if without:
        summary += f"; no launch line for {', '.join(without)}"
    if all(plan["ok"] for plan in plans):
        return Text.assemble(("OK", "bold green"), ": ", summary)
    return Text.assemble(("FAIL", "bold red"), ": ", summary)


def _print_verdict(console: Console, verdict: Text) -> None:
    """The verdict wrapped at words (engine names are long), its status word styled."""
    status = verdict.plain.split(":", 1)[0]
    for index, line in enumerate(wrap_words(verdict.plain, console_width(console), "  ", first_indent="")):
        text = Text(line)
        if index == 0:
            text.stylize("bold green" if status == "OK" else "bold red", 0, len(status))
        print_line(console, text)


def _name(engine: dict[str, Any]) -> str:
    return f"{engine['engine']}=={engine['version']}"


def _counted(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [*plan["findings"], *(f for e in plan["engines"].values() if e["serves"] for f in e["findings"])]


def _findings(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [*plan["findings"], *(f for engine in plan["engines"].values() for f in engine["findings"])]


def render(plans: list[dict[str, Any]], *, quiet: bool = False, no_color: bool = False) -> None:
    console = stdout_console(no_color)
    verdict = _verdict(plans)
    _print_verdict(console, verdict)
    for index, plan in enumerate(plans):
        if len(plans) > 1:
            status = ("ok", "green") if plan["ok"] else ("fails", "bold red")
            head = Text.assemble((f"draft {index + 1} of {len(plans)}: ", "bold"), status)
            print_line(console, head)
        render_plan(console, plan, quiet=quiet)
    _print_verdict(console, verdict)


def render_plan(console: Console, plan: dict[str, Any], *, quiet: bool = False) -> None:
    if not quiet:
        key_values(console, _rows(plan))
        if plan["engines"]:
            _engines_table(console, plan["engines"])
    fixes: list[Fix] = []
    findings = _findings(plan)
    if findings:
        print_line(console, "findings", style="bold")
        print_findings(console, findings, fixes)
    print_fixes(console, fixes)
    _launches(console, plan)


def _gib(value: int | float) -> str:
    """GiB with two decimals as vLLM prints memory; MiB below one GiB (the bundled demos)."""
    if abs(value) < 1024**3:
        return f"{value / 1024**2:.2f} MiB"
    return f"{value / 1024**3:.2f} GiB"


def _kib(value: int) -> str:
    return f"{value / 1024:.2f} KiB"


def _dims(model: dict[str, Any] | None) -> list[str]:
    if not model:
        return []
    kinds: dict[str, int] = {}
    for kind in model["layer_types"]:
        kinds[kind] = kinds.get(kind, 0) + 1
    layers = " + ".join(f"{count} {kind.replace('_attention', '')}" for kind, count in kinds.items())
    return [
        f"{model['num_hidden_layers']} layers ({layers})",
        f"heads {model['num_attention_heads']}/{model['num_key_value_heads']}×{model['head_dim']}",
        f"vocab {model['vocab_size']}",
    ]


def _rows(plan: dict[str, Any]) -> list[tuple[str, list[str]]]:
    rows: list[tuple[str, list[str]]] = []
    target, draft, geometry = plan["target"], plan["draft"], plan["geometry"]
    rows.append(("target", [printable(target["source"]), *_dims(target["model"])]))
    draft_row = [printable(draft["source"])]
    if draft["dialect"]:
        draft_row.append(f"{draft['dialect']}")
    if geometry:
        draft_row += [
            f"K {geometry['num_speculative_tokens']} (K_max {geometry['max_speculative_tokens']})",
            f"{geometry['layout']}, {geometry['num_query_tokens']} query positions",
        ]
    rows.append(("draft", draft_row + _dims(draft["model"])))
    if plan["max_model_len"]:
        length = plan["max_model_len"]
        rows.append(
            (
                "serving",
                [
                    f"max_model_len {length['value']} ({length['source']})",
                    f"dtype {plan['serving_dtype']}",
                    f"KV cache {plan['kv_cache_dtype']}",
                ],
            )
        )
    weights = plan["weights"]
    if weights:
        tp = weights["target"]["tensor_parallel_size"]
        rows.append(
            (
                "weights",
                [
                    f"target {_gib(weights['target']['per_rank'])} per rank (TP {tp})",
                    f"draft {_gib(weights['draft']['per_rank'])} per rank",
                ],
            )
        )
    kv_segments = []
    for layout in plan["kv"]:
        text = f"{layout['name']} {_kib(layout['full_bytes_per_token'] + layout['sliding_bytes_per_token'])}/token"
        if layout["sliding_layers"]:
            text += f" ({layout['sliding_layers']} sliding layers, window {layout['sliding_window']})"
        kv_segments.append(text)
    if kv_segments:
        rows.append(("KV per rank", kv_segments))
    memory = plan["memory"]
    if memory:
        usable = f"{_gib(memory['gpu_memory_bytes'])} × {memory['gpu_memory_utilization']:g} = {_gib(memory['usable_bytes'])}"
        if memory["fits"]:
            rows.append(
                (
                    "memory",
                    [
                        usable,
                        f"KV {_gib(memory['kv_budget_bytes'])} after {_gib(memory['weights_bytes'])} of weights",
                        f"{memory['kv_tokens']:,} tokens",
                        f"{memory['max_sequences']:,} requests of {memory['max_model_len']}",
                    ],
                )
            )
        else:
            rows.append(("memory", [usable, "does not fit (DFT082 below)"]))
    elif plan["request"]["gpu_memory_gib"] is None and weights:
        rows.append(("memory", ["not checked: pass --gpu-memory GIB"]))
    parallel = plan["tensor_parallel"]
    if parallel:
        vocab = [f"{v['model']} vocab {v['vocab_size']} → {v['padded_vocab_size']} rows" for v in parallel["vocab"]]
        rows.append(
            (
                "parallel",
                [f"TP {parallel['tensor_parallel_size']} (draft {parallel['draft_tensor_parallel_size']})", *vocab],
            )
        )
    return rows


_SERVES_STYLE = {"served": "green", "served-with-plugin": "green"}


def _setting(engine: dict[str, Any], name: str) -> str:
    setting = engine["settings"].get(name)
    if setting is None:
        return "-"
    return f"{setting['value']} ({setting['source']})"


def _engine_cells(engine: dict[str, Any]) -> list[tuple[str, str]]:
    budget = engine["token_budget"]
    budget_text = "-"
    if budget:
        sign = "≥" if budget["ok"] else "<"
        budget_text = f"{budget['max_num_batched_tokens']} {sign} {budget['max_num_seqs']}×{budget['num_query_tokens']}"
    k = engine["num_speculative_tokens"]
    queries = engine["num_query_tokens"]
    return [
        ("serves", engine["outcome"]),
        ("layout", engine["layout"] or "-"),
        ("K / queries", f"{k} / {queries}" if k is not None else "-"),
        ("max_num_seqs", _setting(engine, "max_num_seqs")),
        ("batched tokens", _setting(engine, "max_num_batched_tokens")),
        ("budget", budget_text),
        ("plugin", engine["plugin"] or "-"),
        ("runner", engine["runner"] or "-"),
    ]


def _engines_table(console: Console, engines: dict[str, dict[str, Any]]) -> None:
    names = [_name(e) for e in engines.values()]
    cells = [_engine_cells(e) for e in engines.values()]
    labels = [label for label, _ in cells[0]]
    rows: list[list[str | Text]] = []
    for index, label in enumerate(labels):
        row: list[str | Text] = [label]
        for engine_cells in cells:
            value = engine_cells[index][1]
            row.append(Text(value, style=_SERVES_STYLE.get(value, "bold red")) if label == "serves" else value)
        rows.append(row)
    print_line(console, "engines", style="bold")
    table = plain_table(["", *names], rows)
    if fits(console, table):
        print_unpadded(console, table)
    else:
        for name, engine_cells in zip(names, cells, strict=True):
            outcome = engine_cells[0][1]
            print_line(console, Text.assemble((name, "bold"), "  ", (outcome, _SERVES_STYLE.get(outcome, "bold red"))))
            segments = [f"{label} {value}" for label, value in engine_cells[1:] if value != "-"]
            for line in pack(segments, console_width(console), first="  ", indent="  "):
                print_line(console, line)


def _launches(console: Console, plan: dict[str, Any]) -> None:
    """Each engine's launch line whole on a line of its own, after a `#` comment naming it."""
    if not plan["engines"]:
        return
    print_line(console, "launch (copy a command line and run it):", style="bold")
    for engine in plan["engines"].values():
        spec = f"{engine['engine']}=={engine['version']}"
        command = engine["launch_command"]
        if not command:
            print_line(console, f"# {spec}: no launch line: {engine['outcome']} (see the findings above)", style="dim")
            continue
        failing = [f["code"] for f in engine["findings"] if f["severity"] == "error"]
        note = f" (fails: {', '.join(failing)} above)" if failing else ""
        print_line(console, f"# {spec}{note}", style="dim")
        print_line(console, printable(command))
