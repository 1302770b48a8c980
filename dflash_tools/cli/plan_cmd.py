"""`dflash-tools plan`: the options and help; the work is in `plan_run` (see `app.py`)."""

from typing import Annotated

import typer

from dflash_tools.cli._help import Command
from dflash_tools.cli._options import (
    FormatOption,
    HubTimeoutOption,
    JsonOption,
    NoColorOption,
    OutputFormat,
    Panel,
    TargetRevisionOption,
    TokenOption,
)

HELP = """Plan a launch: the vLLM and SGLang command lines, and the checks that they fit.

From a target, a draft and a few serving facts, prints each engine release's launch line whole
(flags and environment included) and checks it: max_num_batched_tokens against max_num_seqs x
the draft's query positions, the weights and KV cache against the GPU memory, and the tensor
and decode context parallelism against the heads. Reads config.json and safetensors headers
only (docs/plan.md).

Examples:

  dflash-tools plan -t Qwen/Qwen3.8-27B -d z-lab/Qwen3.8-27B-DFlash2 \\
      --gpu-memory 80
  dflash-tools plan --preset qwen3.8-27b-dflash2 --gpu-memory 24 \\
      --tensor-parallel-size 4
  dflash-tools plan -t example:vllm-cpu-demo/target \\
      -d example:vllm-cpu-demo/zlab-dflash --gpu-memory 16 \\
      --engine vllm==0.34.0
"""

EPILOG = (
    "Exit codes: 0 the plan holds; 1 a check fails (a token budget, the memory, the parallelism, "
    "an error in the draft, or no engine serves the draft as trained); 2 usage error or a source "
    "that cannot be found or read."
)

WHAT = "Target and draft"
SERVING = "Serving facts"


def register(app: typer.Typer) -> None:
    app.command(
        "plan",
        cls=Command,
        help=HELP,
        short_help="Plan a vLLM / SGLang launch: command lines, budget and memory checks.",
        epilog=EPILOG,
        no_args_is_help=True,
    )(plan_command)


def plan_command(
    target: Annotated[
        str | None,
        typer.Option(
            "--target", "-t", help="Target model (Hub repo id, folder or example:NAME).", rich_help_panel=WHAT
        ),
    ] = None,
    drafts: Annotated[
        list[str] | None,
        typer.Option("--draft", "-d", help="Draft checkpoint (repeatable).", show_default=False, rich_help_panel=WHAT),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset",
            help="Target, drafts, K and engine settings from a preset (configs/presets); options override it.",
            rich_help_panel=WHAT,
        ),
    ] = None,
    num_speculative_tokens: Annotated[
        int | None,
        typer.Option(
            "-k",
            "--num-speculative-tokens",
            min=1,
            help="K (default: the draft's trained K).",
            show_default=False,
            rich_help_panel=WHAT,
        ),
    ] = None,
    engine: Annotated[
        list[str] | None,
        typer.Option(
            "--engine",
            # The names are the core's (`serving.engine_view.engine_choices()`, checked when the
            # command runs); tests/cli/test_help.py compares them.
            metavar="ENGINE",
            help="Engine releases to plan for: sglang (the newest table, sglang==0.5.23), vllm==0.33.0, "
            "vllm==0.34.0, all (every one; the default), or vllm (the release of the vLLM installed here). Repeat "
            "it or separate names with commas.",
            show_default=False,
            rich_help_panel=WHAT,
        ),
    ] = None,
    gpu_memory: Annotated[
        float | None,
        typer.Option(
            "--gpu-memory",
            min=0.1,
            metavar="GIB",
            help="Memory of each GPU in GiB (80 for an H100): checks the fit and picks vLLM's defaults for it.",
            show_default=False,
            rich_help_panel=SERVING,
        ),
    ] = None,
    tensor_parallel_size: Annotated[
        int,
        typer.Option("--tensor-parallel-size", min=1, help="GPUs the target is split across.", rich_help_panel=SERVING),
    ] = 1,
    decode_context_parallel_size: Annotated[
        int,
        typer.Option(
            "--decode-context-parallel-size",
            min=1,
            help="vLLM decode context parallelism of the target (within the tensor-parallel GPUs).",
            rich_help_panel=SERVING,
        ),
    ] = 1,
    max_num_seqs: Annotated[
        int | None,
        typer.Option(
            "--max-num-seqs",
            min=1,
            help="Most requests at once (default: vLLM's for the GPU; SGLang's 48).",
            show_default=False,
            rich_help_panel=SERVING,
        ),
    ] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(
            "--max-model-len",
            min=1,
            help="Longest request in tokens (default: the target's max_position_embeddings).",
            show_default=False,
            rich_help_panel=SERVING,
        ),
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-num-batched-tokens",
            min=1,
            help="vLLM tokens per scheduler step (default: vLLM's for the GPU, raised to what the draft needs).",
            show_default=False,
            rich_help_panel=SERVING,
        ),
    ] = None,
    gpu_memory_utilization: Annotated[
        float | None,
        typer.Option(
            "--gpu-memory-utilization",
            min=0.01,
            max=1.0,
            help="Fraction of each GPU vLLM may use (default: vLLM's, 0.92).",
            show_default=False,
            rich_help_panel=SERVING,
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="Model dtype (default: the target config's; float32 is served as bfloat16).",
            rich_help_panel=SERVING,
        ),
    ] = None,
    kv_cache_dtype: Annotated[
        str | None,
        typer.Option("--kv-cache-dtype", help="KV cache dtype (auto: the model dtype; fp8).", rich_help_panel=SERVING),
    ] = None,
    revision: Annotated[
        str | None, typer.Option("--revision", help="Hub revision of the drafts.", rich_help_panel=Panel.HUB)
    ] = None,
    target_revision: TargetRevisionOption = None,
    token: TokenOption = None,
    timeout: HubTimeoutOption = 10.0,
    output_format: FormatOption = OutputFormat.HUMAN,
    json_flag: JsonOption = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Human output: only the verdict, the findings and the launch lines.",
            rich_help_panel=Panel.OUTPUT,
        ),
    ] = False,
    no_color: NoColorOption = False,
) -> None:
    options = dict(locals())  # exactly the parameters above
    from dflash_tools.cli import plan_run  # the work, imported only when the command runs

    plan_run.run(**options)
