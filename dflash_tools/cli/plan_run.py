"""`dflash-tools plan`, run: call the core (`plan.request`, `plan.run`) and render (options: `plan_cmd`)."""

from __future__ import annotations

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
    unbroken,
    wrap_words,
)
from dflash_tools.cli._output import OutputFormat, printable, stdout_console, write_json
from dflash_tools.findings import Severity

if TYPE_CHECKING:
    from dflash_tools.cli.plan_cmd import PlanArgs


def run(args: PlanArgs) -> None:
    """Run `dflash-tools plan`: build the request (`plan_request`), plan (`plan_launch`), render."""
    fmt = OutputFormat.JSON if args.json_flag else args.output_format
    with handle_errors("plan", json_output=fmt is OutputFormat.JSON, source=args.drafts or args.preset):
        from dflash_tools.plan.request import plan_request
        from dflash_tools.plan.run import plan_launch

        launch = plan_launch(plan_request(args), token=args.token, timeout=args.timeout)
        document = launch.to_dict()
        if fmt is OutputFormat.JSON:
            write_json(document)
        else:
            render(document["plans"], quiet=args.quiet, no_color=args.no_color)
        raise typer.Exit(launch.exit_code)


# --------------------------------------------------------------------------------------------
# Human output
# --------------------------------------------------------------------------------------------


def _engine_results(plans: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """(release, ok) for every engine of every draft; a draft error fails every release."""
    return [
        (_name(engine), engine["ok"] and not _plan_errors(plan))
        for plan in plans
        for engine in plan["engines"].values()
    ]


def _verdict(plans: list[dict[str, Any]]) -> Text:
    """The verdict policy every command shares (`serving.verdict`): per engine release, `FAIL for
    ...; OK for ...`, then the counts of the findings printed below (the draft's, the plan's and
    every engine's); a memory check asked for but not made is named."""
    from dflash_tools.serving.verdict import engine_verdict

    findings = [f for plan in plans for f in _findings(plan)]
    counts = {s.value: sum(1 for f in findings if f["severity"] == s.value) for s in Severity}
    summary = f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"
    if len(plans) > 1:
        summary = f"{len(plans)} drafts, {summary}"
    if any(_memory_unchecked(plan) for plan in plans):
        summary += "; memory not checked (DFT087)"
    # DFT090 goes with a draft that was read (one not read was checked against nothing: DFT091).
    if any("not_read" in plan["target"] and "not_read" not in plan["draft"] for plan in plans):
        summary += "; target not read (DFT090)"
    unread = [plan for plan in plans if "not_read" in plan["draft"]]
    if unread:
        # A draft not read offline (DFT091): FAIL whatever the others say; theirs follows.
        read = [plan for plan in plans if "not_read" not in plan["draft"]]
        head = f"{len(unread)} of {len(plans)} drafts not read" if len(plans) > 1 else "draft not read"
        others = _verdict(read).plain.split(": ", 1)[0] if read else ""
        rest = f"; {'the other' if len(read) == 1 else 'the others'}: {others}; in all" if others else ""
        return Text.assemble(("FAIL", "bold red"), f": {head} (DFT091){rest}: ", summary)
    ok = all(plan["ok"] for plan in plans)
    results = _engine_results(plans)
    _, per_engine = engine_verdict(results)
    if any(_plan_errors(plan) for plan in plans) or not results:
        return Text.assemble(("FAIL", "bold red"), ": ", summary)
    status = ("OK", "bold green") if ok else ("FAIL", "bold red")
    if ok:
        return Text.assemble(status, f" for {per_engine.removeprefix('OK for ')}: ", summary)
    return Text.assemble(status, per_engine.removeprefix("FAIL"), ": ", summary)


def _memory_unchecked(plan: dict[str, Any]) -> bool:
    """--gpu-memory was given and the check could not be made (no safetensors headers)."""
    return plan["request"]["gpu_memory_gib"] is not None and plan["memory"] is None and plan["weights"] is not None


def _plan_errors(plan: dict[str, Any]) -> list[str]:
    """The codes of the draft's and the plan's own errors: with any, no launch line is to be run."""
    return list(dict.fromkeys(f["code"] for f in plan["findings"] if f["severity"] == "error"))


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


def _findings(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [*plan["findings"], *(f for engine in plan["engines"].values() for f in engine["findings"])]


def render(plans: list[dict[str, Any]], *, quiet: bool = False, no_color: bool = False) -> None:
    from dflash_tools.serving.verdict import narrowing_hint

    console = stdout_console(no_color)
    verdict = _verdict(plans)
    _print_verdict(console, verdict)
    hint = narrowing_hint(_engine_results(plans))
    if hint and not any(_plan_errors(plan) for plan in plans):
        lead, _, option = hint.rpartition(": ")  # the option and its value stay on one line
        for line in wrap_words(f"{lead}: {unbroken(option)}", console_width(console), "  ", first_indent="  "):
            print_line(console, line)
    for index, plan in enumerate(plans):
        if len(plans) > 1:
            status = ("ok", "green") if plan["ok"] else ("fails", "bold red")
            if "not_read" in plan["draft"]:
                status = ("not read", "bold red")
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


# JSON `not_checked` as the rows say it (the finding says each in full).
UNCHECKED_WORDS = {"memory": "memory fit", "tensor_parallel": "TP/DCP", "pairing": "draft/target pairing"}
SERVING_DTYPES = (("dtype", "serving_dtype"), ("KV cache", "kv_cache_dtype"))


def _rows(plan: dict[str, Any]) -> list[tuple[str, list[str]]]:
    rows: list[tuple[str, list[str]]] = []
    target, draft, geometry = plan["target"], plan["draft"], plan["geometry"]
    rows.append(("target", [printable(target["source"]), *_dims(target["model"])]))
    if "not_read" in target:  # offline, not cached (DFT090): what is left unchecked
        rows.append(("", [f"not read: {target['not_read']['reason']}"]))
        if "not_read" not in draft:  # a draft not read was checked against nothing (DFT091 says so)
            unchecked = [UNCHECKED_WORDS.get(check, check) for check in plan["not_checked"]]
            rows.append(("not checked", [*unchecked[:-1], f"{unchecked[-1]} (DFT090 below)"]))
    if "not_read" in draft:  # offline, not cached, no bundled config (DFT091): nothing else is known
        rows.append(("draft", [printable(draft["source"]), "not read (DFT091 below)"]))
        rows.append(("", [draft["not_read"]["reason"]]))
        return rows
    draft_row = [printable(draft["source"])]
    if draft["dialect"]:
        draft_row.append(f"{draft['dialect']}")
    if geometry and geometry["readings"]:
        # The trained layout is unknown: both readings, neither passed off as the layout (DFT018).
        draft_row += [
            f"layout unknown: if {r['layout']}, K {r['num_speculative_tokens']} (K_max {r['max_speculative_tokens']}), "
            f"{r['num_query_tokens']} query positions"
            for r in geometry["readings"]
        ]
    elif geometry:
        draft_row += [
            f"K {geometry['num_speculative_tokens']} (K_max {geometry['max_speculative_tokens']})",
            f"{geometry['layout']}, {geometry['num_query_tokens']} query positions",
        ]
    rows.append(("draft", draft_row + _dims(draft["model"])))
    if plan["max_model_len"]:
        length = plan["max_model_len"]
        serving = [f"max_model_len {length['value']} ({length['source']})"]
        # Without the target (DFT090) a dtype not given is unknown: not shown.
        serving += [f"{label} {plan[key]}" for label, key in SERVING_DTYPES if plan[key] is not None]
        rows.append(("serving", serving))
    weights = plan["weights"]
    if weights:
        tp = weights["target"]["tensor_parallel_size"]

        def per_rank(side: str) -> str:
            if not weights[side]["stored_by_dtype"]:
                return "unknown (no safetensors headers read)"
            return f"{_gib(weights[side]['per_rank'])} per rank"

        rows.append(("weights", [f"target {per_rank('target')} (TP {tp})", f"draft {per_rank('draft')}"]))
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
    elif _memory_unchecked(plan):
        rows.append(("memory", ["not checked: the weights are unknown (DFT087 below)"]))
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
        ("outcome", engine["outcome"]),
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
            row.append(Text(value, style=_SERVES_STYLE.get(value, "bold red")) if label == "outcome" else value)
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
    _legend(console, [word for engine in engines.values() for word in (engine["outcome"], engine["layout"])])


def _legend(console: Console, words: list[str | None]) -> None:
    """What the outcome and layout words above mean, each the first time a plan shows it."""
    from dflash_tools.serving.verdict import legend

    shown: set[str] = getattr(console, "_dflash_tools_defined", set())
    for definition in legend(word for word in words if word not in shown):
        for line in wrap_words(definition, console_width(console), "    ", first_indent="  "):
            print_line(console, line, style="dim")
    console._dflash_tools_defined = shown | {word for word in words if word}  # type: ignore[attr-defined]


def _launches(console: Console, plan: dict[str, Any]) -> None:
    """Each engine's launch line, whole and pasteable (`print_command`), after a `#` comment naming
    it. While the draft or the plan has an error (a vocabulary that does not match the target,
    weights that do not fit), every line is printed commented out: shown, never run by a paste."""
    if not plan["engines"]:
        return
    blocked = _plan_errors(plan)
    runnable = not blocked and any(e["launch_command"] and e["ok"] for e in plan["engines"].values())
    heading = "launch (copy a command line and run it):"
    if blocked:
        heading = f"launch (not to run until {', '.join(blocked)} above is fixed; lines kept as comments):"
    elif not runnable:
        heading = "launch (no line to run as it is; see the findings above):"
    print_line(console, heading, style="bold")
    for engine in plan["engines"].values():
        spec = f"{engine['engine']}=={engine['version']}"
        command = engine["launch_command"]
        if not command:
            print_comment(console, f"{spec}: no launch line: {engine['outcome']} (see the findings above)")
            continue
        failing = [f["code"] for f in engine["findings"] if f["severity"] == "error"]
        codes = list(dict.fromkeys([*blocked, *failing]))
        note = f" (fails: {', '.join(codes)} above)" if codes else ""
        print_comment(console, f"{spec}{note}")
        print_command(console, command, commented=bool(codes))
