"""`dflash-tools plan`: the options (`PlanArgs`: the core's `PlanOptions` with a flag each) and help;
the work is in `plan_run` (see `app.py`)."""

import typer

from dflash_tools.cli._help import Command
from dflash_tools.cli._options import (
    DraftsOption,
    EngineReleasesOption,
    FormatOption,
    GpuMemoryOption,
    HubTimeoutOption,
    JsonOption,
    KOption,
    NoColorOption,
    OutputFormat,
    PresetOption,
    QuietOption,
    RevisionOption,
    TargetOption,
    TargetRevisionOption,
    TokenOption,
    args_dataclass,
    command_for,
)
from dflash_tools.plan.options import PlanOptions

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
      --engine {newest_vllm}
"""

EPILOG = (
    "Exit codes: 0 the plan holds; 1 a check fails (a token budget, the memory, the parallelism, "
    "an error in the draft, or an engine asked for does not serve the draft as trained: ask only for "
    "the releases you serve with, --engine); 2 usage error or a source that cannot be found or read."
)

SERVING = "Serving facts"


@args_dataclass
class PlanArgs(PlanOptions):
    """The options of `plan`, as parsed: the core's `PlanOptions` (each option's name, type and
    default, declared there once; its flag and help in `FLAGS`), and the Hub and output options."""

    token: TokenOption = None
    timeout: HubTimeoutOption = 10.0
    output_format: FormatOption = OutputFormat.HUMAN
    json_flag: JsonOption = False
    quiet: QuietOption = False
    no_color: NoColorOption = False


# The flag and help of each `PlanOptions` field (a shared option: its one declaration in `_options`).
FLAGS = {
    "target": TargetOption,
    "drafts": DraftsOption,
    "preset": PresetOption,
    "num_speculative_tokens": KOption,
    "engines": EngineReleasesOption,
    "gpu_memory": GpuMemoryOption,
    "tensor_parallel_size": typer.Option(
        "--tensor-parallel-size", min=1, help="GPUs the target is split across.", rich_help_panel=SERVING
    ),
    "decode_context_parallel_size": typer.Option(
        "--decode-context-parallel-size",
        min=1,
        help="vLLM decode context parallelism of the target (within the tensor-parallel GPUs).",
        rich_help_panel=SERVING,
    ),
    "max_num_seqs": typer.Option(
        "--max-num-seqs",
        min=1,
        help="Most requests at once (default: vLLM's for the GPU; SGLang's 48).",
        show_default=False,
        rich_help_panel=SERVING,
    ),
    "max_model_len": typer.Option(
        "--max-model-len",
        min=1,
        help="Longest request in tokens (default: the target's max_position_embeddings).",
        show_default=False,
        rich_help_panel=SERVING,
    ),
    "max_num_batched_tokens": typer.Option(
        "--max-num-batched-tokens",
        min=1,
        help="vLLM tokens per scheduler step (default: vLLM's for the GPU, raised to what the draft needs).",
        show_default=False,
        rich_help_panel=SERVING,
    ),
    "gpu_memory_utilization": typer.Option(
        "--gpu-memory-utilization",
        min=0.01,
        max=1.0,
        help="Fraction of each GPU vLLM may use (default: vLLM's, 0.92).",
        show_default=False,
        rich_help_panel=SERVING,
    ),
    "dtype": typer.Option(
        "--dtype",
        help="Model dtype (default: the target config's; float32 is served as bfloat16).",
        rich_help_panel=SERVING,
    ),
    "kv_cache_dtype": typer.Option(
        "--kv-cache-dtype", help="KV cache dtype (auto: the model dtype; fp8).", rich_help_panel=SERVING
    ),
    "revision": RevisionOption,
    "target_revision": TargetRevisionOption,
}


def register(app: typer.Typer) -> None:
    app.command(
        "plan",
        cls=Command,
        help=HELP,
        short_help="Plan a vLLM / SGLang launch: command lines, budget and memory checks.",
        epilog=EPILOG,
        no_args_is_help=True,
    )(command_for(PlanArgs, "plan_run", FLAGS))
