"""Child process of the real-vLLM tier: feed `vllm serve` lines to vLLM's own parser and config builder.

Run as `python launch_parse.py CASES.json`. Each case is one launch line the serving plan printed,
as a shell reads it: its `NAME=value` words are applied to the environment (and the previous
case's removed), its arguments after `vllm serve` are parsed by the parser `vllm serve` builds (`make_arg_parser` on a
`FlexibleArgumentParser`: `EngineArgs.add_cli_args` plus the server's options), and the parsed
namespace becomes a `VllmConfig` through `AsyncEngineArgs.from_cli_args(...).create_engine_config()`
with the OpenAI server's usage context, as `vllm serve` does. Limit: `vllm serve` itself (its
module imports the HTTP server's dependencies, which the CPU tier does not install) is replaced
by those three calls, the part of it that turns the command line into a config.

Also reported, from the same vLLM: the flags its parser knows, `EngineArgs.get_batch_defaults`
for a few GPU sizes (on a stand-in platform object: there is no GPU here, and the function only
asks the platform for the device's memory and name), and the default `gpu_memory_utilization`.
Prints one JSON document.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

GIB = 1 << 30


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


def split_command(command: str) -> tuple[dict[str, str], list[str]]:
    """A shell line `NAME=value ... argv` as a POSIX shell reads it."""
    argv = shlex.split(command)
    environment = {}
    while argv and "=" in argv[0] and not argv[0].startswith("-"):
        name, _, value = argv.pop(0).partition("=")
        environment[name] = value
    return environment, argv


def parse_case(command: str, previous: dict[str, str]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    environment, argv = split_command(command)
    for name in previous:
        os.environ.pop(name, None)
    os.environ.update(environment)
    out: dict[str, Any] = {"environment": environment}
    if argv[:2] != ["vllm", "serve"]:
        out["error"] = f"not a `vllm serve` line: {argv[:2]}"
        return out
    try:
        parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                args = parser.parse_args(argv[2:])
        except SystemExit:  # argparse's usage error: keep what it said
            out["error"] = f"vllm serve refused the line: {said.getvalue().strip().splitlines()[-1:]}"
            return out
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag  # what `vllm serve`'s cmd() does with the positional model
        config = AsyncEngineArgs.from_cli_args(args).create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    except BaseException as exc:  # a refusal is a result
        out["error"] = _error(exc)
        return out
    speculative = config.speculative_config
    scheduler = config.scheduler_config
    out.update(
        model=config.model_config.model,
        max_model_len=config.model_config.max_model_len,
        dtype=str(config.model_config.dtype).removeprefix("torch."),
        tensor_parallel_size=config.parallel_config.tensor_parallel_size,
        decode_context_parallel_size=config.parallel_config.decode_context_parallel_size,
        gpu_memory_utilization=config.cache_config.gpu_memory_utilization,
        max_num_seqs=scheduler.max_num_seqs,
        max_num_batched_tokens=scheduler.max_num_batched_tokens,
        max_num_active_seqs=getattr(scheduler, "max_num_active_seqs", None),
        num_lookahead_tokens=config.num_lookahead_tokens,
    )
    if speculative is not None:
        out["speculative"] = {
            "method": speculative.method,
            "model": speculative.model,
            "num_speculative_tokens": speculative.num_speculative_tokens,
            "draft_tensor_parallel_size": speculative.draft_tensor_parallel_size,
            "draft_decode_context_parallel_size": getattr(speculative, "draft_decode_context_parallel_size", None),
            "architectures": list(speculative.draft_model_config.architectures),
        }
    return out


def parser_flags() -> list[str]:
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    return sorted(name for name in parser._option_string_actions if name.startswith("--"))


class _StandInPlatform:
    """A GPU of `memory_gib` for `EngineArgs.get_batch_defaults`, which asks the platform for the
    device's memory and name only (the CPU build here has no GPU to ask)."""

    def __init__(self, memory_gib: float, name: str) -> None:
        self.memory, self.name = int(memory_gib * GIB), name

    def get_device_total_memory(self) -> int:
        return self.memory

    def get_device_name(self) -> str:
        return self.name

    def is_device_capability(self, capability: Any) -> bool:
        return False

    def is_tpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return False


def batch_defaults(sizes: list[tuple[float, str]]) -> list[dict[str, Any]]:
    import vllm.engine.arg_utils as arg_utils
    from vllm.usage.usage_lib import UsageContext

    found = []
    real = arg_utils.current_platform
    try:
        for memory, name in sizes:
            arg_utils.current_platform = _StandInPlatform(memory, name)  # type: ignore[assignment]
            tokens, seqs = arg_utils.EngineArgs.get_batch_defaults(world_size=1)
            found.append(
                {
                    "gpu_memory_gib": memory,
                    "device": name,
                    "max_num_batched_tokens": tokens[UsageContext.OPENAI_API_SERVER],
                    "max_num_seqs": seqs[UsageContext.OPENAI_API_SERVER],
                }
            )
    finally:
        arg_utils.current_platform = real
    return found


def default_utilization() -> float:
    """What vLLM sizes the KV cache with when the launch line gives no utilization: the field's
    default (0.33.0), or, where the field defaults to None, the class constant (0.34.0)."""
    from vllm.config import CacheConfig

    value = CacheConfig().gpu_memory_utilization
    return float(value if value is not None else CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION)


def main() -> None:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    document = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    results: dict[str, Any] = {}
    previous: dict[str, str] = {}
    for name, command in document["cases"].items():
        started = time.monotonic()
        results[name] = parse_case(command, previous)
        results[name]["seconds"] = round(time.monotonic() - started, 3)
        previous = results[name]["environment"]
    import vllm
    from vllm.config.speculative import SpeculativeConfig

    print(
        json.dumps(
            {
                "vllm_version": vllm.__version__,
                "plugin": getattr(SpeculativeConfig, "_dflash_tools_patch", None),
                "cases": results,
                "flags": parser_flags(),
                "batch_defaults": batch_defaults([tuple(size) for size in document["gpu_sizes"]]),
                "gpu_memory_utilization": default_utilization(),
            }
        )
    )


if __name__ == "__main__":
    main()
