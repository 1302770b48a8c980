"""Options the commands share, declared once so that a name has one type and one help text
everywhere (as huggingface_hub's `RepoIdArg` / `RevisionOpt` / `TokenOpt`), and `command_for`,
which turns a command's `Args` dataclass into the function typer registers.

This module is on the `--help` path: it imports typer and nothing else of weight (no rich, no
core module). An option's `rich_help_panel` names the group it is listed under in `--help`
(`_help.py` lays the page out); use the panel names below so the same option sits in the same
group in every command. A help text may name engine releases through the markers of
`_help.RELEASE_MARKERS` (`{releases}`, ...): they are filled from the engine tables
(`dflash_tools.engine_rules`) only when a page that shows them is printed.
"""

import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Annotated, Any, TypeVar, dataclass_transform, get_args, get_origin

import typer


class OutputFormat(StrEnum):
    HUMAN = "human"
    JSON = "json"


class Panel:
    """Option groups shared by several commands (a command may add its own)."""

    WHAT = "What to check"
    HUB = "Hugging Face Hub"
    OUTPUT = "Output"


# --- shell completion (`dflash-tools --install-completion`; docs/inspect.md, "Shell completion") ---
# Called only by the shell's completion request: the imports stay inside, off the `--help` path.


def complete_source(incomplete: str) -> list[str]:
    """A SOURCE: the bundled `example:NAME`s, and local files and folders. bash splits a word at
    `:` (its COMP_WORDBREAKS), so `example:eng` arrives as `example`, `:`, `eng` (typer passes no
    earlier words: they are read from bash's COMP_WORDS); then only the word after the colon is
    completed, which bash puts back in place."""
    import os
    from pathlib import Path

    from dflash_tools.reading.local import examples_dir

    def examples() -> list[str]:
        root = examples_dir()
        return sorted(
            "example:" + config.parent.relative_to(root).as_posix()
            for config in root.rglob("config.json")
            if config.parent != root and not any(part.startswith((".", "_")) for part in config.relative_to(root).parts)
        )

    words = os.environ.get("COMP_WORDS", "").split()
    args = words[: int(os.environ.get("COMP_CWORD", len(words)))]
    if args[-2:] == ["example", ":"]:  # bash: the word after the colon
        return [name.removeprefix("example:") for name in examples() if name.startswith("example:" + incomplete)]
    if incomplete == ":" and args[-1:] == ["example"]:  # bash: the colon itself
        return [name.removeprefix("example") for name in examples()]
    if incomplete.startswith("example:") or (incomplete and "example:".startswith(incomplete)):
        return [name for name in examples() if name.startswith(incomplete)]
    folder, _, stem = incomplete.rpartition("/")
    base = Path(folder or ".").expanduser()
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    prefix = f"{folder}/" if folder else ""
    return [
        prefix + entry.name + ("/" if entry.is_dir() else "")
        for entry in entries
        if entry.name.startswith(stem) and (stem.startswith(".") or not entry.name.startswith("."))
    ]


def complete_engine(incomplete: str) -> list[str]:
    """--engine: the release names the tables hold, `sglang`, `vllm` and `all`; after a comma, the next one."""
    from dflash_tools.engine_rules import ENGINE_RULES

    head, _, last = incomplete.rpartition(",")
    names = [*ENGINE_RULES, *sorted({rules.engine for rules in ENGINE_RULES.values()}), "all"]
    return [f"{head}," * bool(head) + name for name in dict.fromkeys(names) if name.startswith(last)]


def complete_finding_code(incomplete: str) -> list[tuple[str, str]]:
    """A finding code, with its title as the shell's description."""
    from dflash_tools.findings import CATALOGUE

    wanted = incomplete.upper()
    return [(code, info.title) for code, info in CATALOGUE.items() if code.startswith(wanted)]


# --- what to check: the target, the drafts, K, the engine releases ------------------------------

TargetOption = Annotated[
    str | None,
    typer.Option(
        "--target",
        "-t",
        help="Target model: a Hub repo id, a folder or example:NAME.",
        rich_help_panel=Panel.WHAT,
        autocompletion=complete_source,
    ),
]
DraftsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--draft",
        "-d",
        help="Draft checkpoint: a Hub repo id, a folder or example:NAME (repeatable).",
        show_default=False,
        rich_help_panel=Panel.WHAT,
        autocompletion=complete_source,
    ),
]
PresetOption = Annotated[
    str | None,
    typer.Option(
        "--preset",
        help="A preset, by name (configs/presets) or a .json file: the target, drafts, K and engine settings; "
        "options given here win.",
        rich_help_panel=Panel.WHAT,
    ),
]
# One type for every command: K as typed, parsed by `serving.k_values` (smoke-test runs a list or
# a range as a K sweep; inspect and plan take one K and refuse a list with a usage error).
KOption = Annotated[
    str | None,
    typer.Option(
        "-k",
        "--num-speculative-tokens",
        metavar="K",
        help="K, the tokens drafted per step (default: the draft's trained K); smoke-test also runs a list "
        "3,5,7 or a range 3-7 (a K sweep).",
        show_default=False,
        rich_help_panel=Panel.WHAT,
    ),
]
# The names are the core's (`serving.engine_view.engine_choices()`, checked when the command
# runs), filled from the tables when the page is shown; tests/cli/test_help.py compares them.
EngineReleasesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--engine",
        metavar="ENGINE",
        help="Engine releases, whose rules apply whether or not they are installed here: {releases}; "
        "{newest}; all (every one); or vllm (the vLLM installed in this Python environment). Repeat it or "
        "separate names with commas (plan's default: all).",
        show_default=False,
        rich_help_panel=Panel.WHAT,
        autocompletion=complete_engine,
    ),
]

# --- serving facts: sizes as people write them ---------------------------------------------------

# GiB per unit of a GPU's memory. A GPU's "80GB" is what its maker prints on it, and means GiB: an
# "80GB" H100 holds 80 GiB (nvidia-smi: 81,559 MiB), not 74.5; so GB and GiB are read alike (and
# MB, TB as MiB, TiB).
_MEMORY_UNITS = {"": 1.0, "g": 1.0, "gb": 1.0, "gib": 1.0, "t": 1024.0, "tb": 1024.0, "tib": 1024.0}
_MEMORY_UNITS.update({"m": 1 / 1024, "mb": 1 / 1024, "mib": 1 / 1024})
_MEMORY = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")
MEMORY_HINT = "80 (GiB), 80GB, 80GiB, 81920MiB or 0.5TiB"


def parse_gpu_memory(text: str) -> float:
    """`--gpu-memory` as people write it: `80`, `80GB`, `80GiB`, `80 G`, `81920MiB`, `0.5TiB` -> GiB.

    Decimal digits only (no `inf`, `nan` or `1e308`): the core checks the range
    (`plan.checks.setting_problem`) before any arithmetic."""
    match = _MEMORY.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _MEMORY_UNITS or len(match.group(1)) > 20:
        raise typer.BadParameter(f"{text!r} is not a memory size: pass {MEMORY_HINT}")
    return float(match.group(1)) * _MEMORY_UNITS[unit]


GpuMemoryOption = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory",
        parser=parse_gpu_memory,
        metavar="GIB",
        help="Memory of each GPU, in GiB (80 for an H100; 80GB, 80GiB and 81920MiB work too): checks the fit and "
        "picks vLLM's defaults for it.",
        show_default=False,
        rich_help_panel="Serving facts",
    ),
]

# --- the Hugging Face Hub -----------------------------------------------------------------------

TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="HF_TOKEN",
        help="Hugging Face token (default: $HF_TOKEN or the saved login).",
        show_default=False,
        rich_help_panel=Panel.HUB,
    ),
]
RevisionOption = Annotated[
    str | None,
    typer.Option("--revision", help="Hub branch, tag or commit of each draft (SOURCE).", rich_help_panel=Panel.HUB),
]
TargetRevisionOption = Annotated[
    str | None, typer.Option("--target-revision", help="Hub revision of the target.", rich_help_panel=Panel.HUB)
]
# The same name means the same thing in every command: `--timeout` bounds each Hub request.
HubTimeoutOption = Annotated[
    float,
    typer.Option("--timeout", min=0.1, help="Seconds for each Hub request.", rich_help_panel=Panel.HUB),
]

# --- output -------------------------------------------------------------------------------------

FormatOption = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        "-f",
        envvar="DFLASH_TOOLS_FORMAT",
        help="human, or json (one document on stdout).",
        rich_help_panel=Panel.OUTPUT,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Shorthand for --format json.", rich_help_panel=Panel.OUTPUT)]
QuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Human output: only the verdict and what needs attention (findings, warnings, launch lines).",
        rich_help_panel=Panel.OUTPUT,
    ),
]
NoColorOption = Annotated[
    bool, typer.Option("--no-color", help="No colour (also: NO_COLOR).", rich_help_panel=Panel.OUTPUT)
]


# --- the command function -----------------------------------------------------------------------

ArgsClass = TypeVar("ArgsClass", bound=type)


@dataclass_transform(frozen_default=True)
def args_dataclass(cls: ArgsClass) -> ArgsClass:
    """Declare a command's options: a frozen dataclass whose fields are `Annotated` typer options
    with their defaults. It is made a dataclass when the command runs (`command_for`), not when
    the module is imported: generating a dataclass's methods costs a few milliseconds per
    command on every `--help`, and typer needs only the annotations and defaults."""
    return cls


def command_for(args_class: type, run_module: str, flags: Mapping[str, Any] | None = None) -> Callable[..., None]:
    """The function typer registers for a command whose options are the fields of `args_class`
    (declared with `args_dataclass`): typer reads its signature, and calling it packs the parsed
    values into one frozen `args_class` for `dflash_tools.cli.<run_module>.run(args)`, which is
    imported only when the command runs.

    A class may derive from the core's declaration of the command's options (`plan.options.
    PlanOptions`: each field's name, type and default, declared once there); `flags` then gives
    each inherited field its `typer.Option` (or a shared `Annotated` option here, whose type must
    be the core's), and the class's own fields are the CLI's alone (output, Hub)."""
    annotations = command_annotations(args_class, flags or {})

    def command(**values: Any) -> None:
        if "__dataclass_fields__" not in vars(args_class):
            for klass in reversed(args_class.__mro__[:-1]):
                if "__dataclass_fields__" not in vars(klass):
                    dataclasses.dataclass(frozen=True)(klass)
        run = importlib.import_module(f"dflash_tools.cli.{run_module}").run
        run(args_class(**values))

    parameters = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=getattr(args_class, name), annotation=kind)
        for name, kind in annotations.items()
    ]
    command.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
    command.__annotations__ = {**annotations, "return": None}
    command.__name__ = command.__qualname__ = f"{run_module.removesuffix('_run')}_command"
    return command


def command_annotations(args_class: type, flags: Mapping[str, Any]) -> dict[str, Any]:
    """Each option's `Annotated[type, typer.Option]`: the inherited fields (the core's) first, with
    the type declared there and the option from `flags`, then the class's own. A field without a
    flag, a flag without a field, or a shared option of another type than the core's is a
    TypeError when the command is registered (on every `--help`, so a test run sees it)."""
    inherited: dict[str, Any] = {}
    for klass in reversed(args_class.__mro__[1:-1]):
        inherited.update(vars(klass).get("__annotations__", {}))
    if set(flags) != set(inherited):
        raise TypeError(
            f"{args_class.__name__}: fields without a flag {sorted(set(inherited) - set(flags))}, "
            f"flags without a field {sorted(set(flags) - set(inherited))}"
        )
    annotations: dict[str, Any] = {}
    for name, kind in inherited.items():
        flag = flags[name]
        if get_origin(flag) is Annotated:
            declared, *metadata = get_args(flag)
            if declared != kind:
                raise TypeError(f"{args_class.__name__}.{name}: the option is {declared}, the field {kind}")
            flag = metadata[0]
        annotations[name] = Annotated[kind, flag]
    annotations.update(vars(args_class).get("__annotations__", {}))
    return annotations
