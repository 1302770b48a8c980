"""`dflash-tools smoke-test`: the options (`SmokeTestArgs`: the core's `SmokeArguments` with a flag each) and help; the work is in `smoke_test_run` (see `app.py`)."""

from typing import Annotated

import typer

from dflash_tools.cli._help import Command
from dflash_tools.cli._options import (
    DraftsOption,
    FormatOption,
    HubTimeoutOption,
    JsonOption,
    KOption,
    NoColorOption,
    OutputFormat,
    Panel,
    PresetOption,
    QuietOption,
    RevisionOption,
    TargetOption,
    TargetRevisionOption,
    TokenOption,
    args_dataclass,
    command_for,
)
from dflash_tools.smoke.arguments import RuntimeName, SmokeArguments

HELP = """Run drafts through vLLM or the torch reference engine; measure acceptance.

Runs on a GPU host, or on a CPU (the torch reference engine, or vLLM's CPU build with
--device cpu: docs/cpu-smoke.md). For each draft: the inspect checks with the target and K,
the launch plan, then a greedy run in a child process that measures acceptance per draft
position, tokens per second with and without speculation, and token identity with the target
alone; the verdict compares the mean acceptance length with the draft's floor
(docs/smoke-test.md).

Examples:

  dflash-tools smoke-test --preset qwen3.8-27b-dflash2
  dflash-tools smoke-test --preset qwen3.8-27b-dflash2 --dry-run --json
  dflash-tools smoke-test -t Qwen/Qwen3.8-27B -d z-lab/Qwen3.8-27B-DFlash2 \\
      -d DaoCloud/Qwen3.8-27B-DFlash2-Exp
  dflash-tools smoke-test --server http://127.0.0.1:8000 \\
      -d z-lab/Qwen3.8-27B-DFlash2
  dflash-tools smoke-test --runtime torch --device cpu \\
      -t example:engine-demo/target -d example:engine-demo/zlab-dflash2
  dflash-tools smoke-test --runtime vllm --device cpu \\
      -t example:vllm-cpu-demo/target -d example:vllm-cpu-demo/zlab-dflash
"""

EPILOG = (
    "Exit codes: 0 every draft passed (or, with --dry-run, can be launched); 1 a draft failed, "
    "errored or has preflight errors; 2 usage or setup error (no engine, unreachable source, a "
    "target without weights, a vLLM that cannot serve the draft's layout)."
)

RUNTIME = "Runtime"
PROMPTS = "Prompts"
VERDICT = "Measurement and verdict"
SERVER = "A running server"


@args_dataclass
class SmokeTestArgs(SmokeArguments):
    """The options of `smoke-test`, as parsed: the core's `SmokeArguments` (each option's name, type
    and default, declared there once; its flag and help in `FLAGS`), the deprecated spellings and
    the output options."""

    # The old name of --runtime (deprecated, hidden): --engine names engine releases in inspect
    # and plan, so that here it named a runtime broke "one name, one meaning".
    engine: Annotated[RuntimeName | None, typer.Option("--engine", hidden=True)] = None
    hub_timeout: Annotated[
        float | None,
        # The old name of --timeout here (deprecated, hidden): smoke-test's --timeout used to be the
        # engine's wall clock, now --run-timeout, so that --timeout means the same in every command.
        typer.Option("--hub-timeout", min=0.1, hidden=True),
    ] = None
    output_format: FormatOption = OutputFormat.HUMAN
    json_flag: JsonOption = False
    quiet: QuietOption = False
    no_color: NoColorOption = False


# The flag and help of each `SmokeArguments` field (a shared option: its one declaration in `_options`).
FLAGS = {
    "target": TargetOption,
    "drafts": DraftsOption,
    "preset": PresetOption,
    "num_speculative_tokens": KOption,
    "runtime": typer.Option(
        "--runtime",
        help="Where the drafts run: vllm (its offline API), torch (the reference engine), or auto: vllm when "
        "installed, else torch.",
        rich_help_panel=RUNTIME,
    ),
    "device": typer.Option(
        "--device",
        help="Device for the engine (cuda, cuda:1, cpu; vLLM on cpu needs its CPU build, vllm-cpu).",
        rich_help_panel=RUNTIME,
    ),
    "dtype": typer.Option("--dtype", help="Model dtype (bfloat16, float16, float32).", rich_help_panel=RUNTIME),
    "tensor_parallel_size": typer.Option(
        "--tensor-parallel-size", min=1, help="vLLM tensor parallelism for the target.", rich_help_panel=RUNTIME
    ),
    "max_model_len": typer.Option("--max-model-len", min=1, help="vLLM max_model_len.", rich_help_panel=RUNTIME),
    "engine_arg": typer.Option(
        "--engine-arg",
        help="Engine keyword KEY=VALUE (JSON values), repeatable.",
        show_default=False,
        rich_help_panel=RUNTIME,
    ),
    "env": typer.Option(
        "--env",
        help="Environment KEY=VALUE for the engine process, repeatable.",
        show_default=False,
        rich_help_panel=RUNTIME,
    ),
    "seed": typer.Option("--seed", help="Seed passed to the engine.", rich_help_panel=RUNTIME),
    "run_timeout": typer.Option(
        "--run-timeout",
        min=1.0,
        help="Wall-clock seconds for each engine run (formerly --timeout).",
        rich_help_panel=RUNTIME,
    ),
    "prefix_caching_check": typer.Option(
        "--prefix-caching-check/--no-prefix-caching-check",
        help="With vLLM: check greedy output with prefix caching on and off (default: on).",
        show_default=False,
        rich_help_panel=VERDICT,
    ),
    "cross_check": typer.Option(
        "--cross-check/--no-cross-check",
        help="Repeat each vLLM run on the torch reference engine and compare tokens and acceptance "
        "(default: on with --device cpu).",
        show_default=False,
        rich_help_panel=RUNTIME,
    ),
    "prompts_file": typer.Option(
        "--prompts",
        help='Prompts JSONL ({"prompt": ...} per line) or a name in configs/prompts.',
        rich_help_panel=PROMPTS,
    ),
    "dataset": typer.Option(
        "--dataset",
        help="Prompts from a dataset the model cards report on: gsm8k, math500, humaneval, mbpp, mt-bench "
        "(the cache, a --dataset-file, or the datasets library).",
        rich_help_panel=PROMPTS,
    ),
    "dataset_file": typer.Option(
        "--dataset-file",
        help="The --dataset's rows from a local JSONL or parquet file instead.",
        rich_help_panel=PROMPTS,
    ),
    "protocol": typer.Option(
        "--protocol",
        help="Sampling protocol: greedy, zlab-card (configs/protocols) or a .json file; sets the prompt "
        "count, tokens and chat unless given. Sampling protocols need --server.",
        rich_help_panel=PROMPTS,
    ),
    "num_prompts": typer.Option("--num-prompts", min=1, help="Use only the first N prompts.", rich_help_panel=PROMPTS),
    "max_tokens": typer.Option(
        "--max-tokens",
        min=1,
        help="New tokens per prompt (default 128, or the preset's).",
        rich_help_panel=PROMPTS,
    ),
    "chat": typer.Option(
        "--chat/--no-chat",
        help="Wrap prompts with the target's chat template (thinking off).",
        show_default=False,
        rich_help_panel=PROMPTS,
    ),
    "dry_run": typer.Option(
        "--dry-run",
        help="Resolve and print the plan; start nothing (no GPU needed; repo ids are still read from the Hub).",
        rich_help_panel=VERDICT,
    ),
    "no_baseline": typer.Option(
        "--no-baseline",
        help="Skip the target-alone run (no token identity, no speed ratio).",
        rich_help_panel=VERDICT,
    ),
    "compare_layouts": typer.Option(
        "--compare-layouts",
        help="Also serve each draft in the flipped layout; the declared one should win.",
        rich_help_panel=VERDICT,
    ),
    "floor": typer.Option(
        "--floor",
        min=0.0,
        help="Mean acceptance length every draft must reach (overrides the preset).",
        rich_help_panel=VERDICT,
    ),
    "reference_al": typer.Option(
        "--reference-al",
        metavar="AL",
        help="The mean acceptance length this draft reaches when measured like this run: a run below 0.75 of it fails.",
        show_default=False,
        rich_help_panel=VERDICT,
    ),
    "repeat": typer.Option(
        "--repeat",
        min=1,
        help="Time each run exactly N times (default: at least 3 times and 5 s of timed windows).",
        rich_help_panel=VERDICT,
    ),
    "min_time": typer.Option(
        "--min-time",
        min=0.0,
        help="Without --repeat: repeat each timed run until its windows add up to this many seconds (default 5).",
        rich_help_panel=VERDICT,
    ),
    "require_identical": typer.Option(
        "--require-identical",
        help="Fail a draft whose greedy output differs from the target alone.",
        rich_help_panel=VERDICT,
    ),
    "force": typer.Option("--force", help="Launch despite preflight error findings.", rich_help_panel=VERDICT),
    "server": typer.Option(
        "--server", help="Measure a running vLLM or SGLang server instead (URL).", rich_help_panel=SERVER
    ),
    "server_engine": typer.Option(
        "--server-engine",
        help="The engine behind --server (default: told from how it answers).",
        rich_help_panel=SERVER,
    ),
    "server_model": typer.Option(
        "--server-model", help="Model name on the server (default: the only one served).", rich_help_panel=SERVER
    ),
    "api_key": typer.Option(
        "--api-key",
        envvar="DFLASH_TOOLS_API_KEY",
        help="Bearer token for --server.",
        show_default=False,
        rich_help_panel=SERVER,
    ),
    "concurrency": typer.Option(
        "--concurrency", min=1, help="Concurrent requests with --server.", rich_help_panel=SERVER
    ),
    "revision": RevisionOption,
    "target_revision": TargetRevisionOption,
    "token": TokenOption,
    "timeout": HubTimeoutOption,
    "output_dir": typer.Option(
        "--output-dir",
        help="Where requests, results and logs go (default: a new temp folder).",
        rich_help_panel=Panel.OUTPUT,
    ),
}


def register(app: typer.Typer) -> None:
    app.command(
        "smoke-test",
        cls=Command,
        help=HELP,
        short_help="Run drafts through vLLM or the torch engine; measure acceptance.",
        epilog=EPILOG,
        no_args_is_help=True,
    )(command_for(SmokeTestArgs, "smoke_test_run", FLAGS))
