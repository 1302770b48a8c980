"""What `dflash-tools smoke-test` is given, declared once: `SmokeArguments`, one field per option
the core reads (its name, type and default). The CLI's `SmokeTestArgs` (`cli/smoke_test_cmd.py`)
is this class plus the output options and two deprecated spellings, with a flag and a help text
per field; `options.resolve_options(args)` takes either.

    SmokeArguments(target=..., drafts=[...], preset=..., ...)  ->  options.resolve_options  ->  SmokeOptions

A value that is None (or an empty list) was not given: the protocol's, the preset's, else the
default applies (`SmokeOptions.sources` records which). The values are as typed (`-k` a text,
`--engine-arg`/`--env` KEY=VALUE items, `--protocol` a name or a file): `resolve_options` parses
and checks them.

This module is on every `--help` path (the CLI reads the fields to declare its options): it
imports nothing but the standard library and `plan.options` (the same lazy frozen dataclass), and
no annotation here is a string (typer reads them as they are, so no `from __future__ import
annotations`).
"""

from pathlib import Path
from typing import Literal

from dflash_tools.plan.options import options_dataclass

RuntimeName = Literal["auto", "vllm", "torch"]  # `--runtime`: `smoke.options.Runtime`'s offline ones, or auto
ServerEngineName = Literal["auto", "vllm", "sglang"]  # `--server-engine`: `smoke.options.SERVER_ENGINES`


@options_dataclass
class SmokeArguments:
    """The options of `smoke-test` the core reads, as given (None or an empty list: not given)."""

    target: str | None = None
    drafts: list[str] | None = None
    preset: str | None = None
    num_speculative_tokens: str | None = None  # `-k` as typed: one K, a list or a range
    runtime: RuntimeName = "auto"
    device: str | None = None
    dtype: str | None = None
    tensor_parallel_size: int | None = None
    max_model_len: int | None = None
    engine_arg: list[str] | None = None  # KEY=VALUE, the value JSON where it parses
    env: list[str] | None = None  # KEY=VALUE
    seed: int = 0
    run_timeout: float = 3600.0  # wall-clock seconds of each engine run
    prefix_caching_check: bool | None = None
    cross_check: bool | None = None
    prompts_file: str | None = None  # `--prompts`
    dataset: str | None = None
    dataset_file: str | None = None
    protocol: str | None = None  # a name in configs/protocols or a .json file
    num_prompts: int | None = None
    max_tokens: int | None = None
    chat: bool | None = None
    dry_run: bool = False
    no_baseline: bool = False
    compare_layouts: bool = False
    floor: float | None = None
    reference_al: float | None = None
    repeat: int | None = None
    min_time: float | None = None
    require_identical: bool = False
    force: bool = False
    server: str | None = None  # a URL
    server_engine: ServerEngineName = "auto"
    server_model: str | None = None
    api_key: str | None = None
    concurrency: int = 1
    revision: str | None = None  # each draft's Hub revision
    target_revision: str | None = None
    token: str | None = None
    timeout: float = 10.0  # each Hub request
    output_dir: Path | None = None
