"""What one smoke test is asked to do, resolved once: the runtime it runs on and every option, each
with where its value comes from (uv's settings style: arguments, else the preset, else a default).

    resolve_options(args, preset)  ->  SmokeOptions      then  smoke.run.smoke_test(options)

`Runtime` names where the generation runs (the choice that travels through smoke-test, never a
bare string); `SmokeOptions` is everything the command line or a preset says about one smoke test;
`SmokeArguments` is what `resolve_options` reads from a command line (the CLI passes its parsed
options).

Imports: `serving` (the presets, the K parser and whether an engine is installed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from dflash_tools.errors import UsageError
from dflash_tools.serving.presets import DraftEntry, Floor, Preset

DEFAULT_MAX_TOKENS = 128
# A floor given with --floor sets the mean acceptance length; position 0 keeps the sanity floor's.
FIRST_POSITION_FLOOR = 0.3


class Runtime(StrEnum):
    """Where a smoke test generates: its value is the contract's `engine` (dflash_tools.smoke_contract)."""

    VLLM = "vllm"  # vLLM's offline LLM API in a child process
    TORCH = "torch"  # the PyTorch reference engine in a child process
    VLLM_SERVER = "vllm-server"  # a running server, measured over HTTP (--server)
    SGLANG_SERVER = "sglang-server"  # a running SGLang server, measured over HTTP (--server)

    @property
    def is_server(self) -> bool:
        """Measured over HTTP on a server someone else runs (`--server`), not in a child process."""
        return self in (Runtime.VLLM_SERVER, Runtime.SGLANG_SERVER)

    @classmethod
    def resolve(cls, requested: str) -> Runtime:
        """`--runtime`: `auto` is vLLM when it is installed here, else the torch reference engine."""
        if requested != AUTO:
            return cls(requested)
        from dflash_tools.serving.vllm_capability import engine_available

        return cls.VLLM if engine_available(cls.VLLM) else cls.TORCH


AUTO = "auto"  # `--runtime auto`


class Source(StrEnum):
    """Where an option's value comes from (JSON `option_sources`)."""

    ARGUMENT = "argument"  # the command line
    PRESET = "preset"  # the preset (`--preset`)
    DEFAULT = "default"  # neither: the tool's default (or, for the runtime, what is installed)


@dataclass(frozen=True)
class ServerTarget:
    """`--server`: a running OpenAI-compatible vLLM server to measure instead of launching one."""

    url: str
    model: str | None = None
    api_key: str | None = None
    concurrency: int = 1


@dataclass
class SmokeOptions:
    """Everything the command line (or a preset) says about one smoke test."""

    target: str | None
    drafts: list[DraftEntry]
    prompts: list[str]
    prompts_source: str = ""
    prompt_token_ids: list[list[int]] | None = None
    num_speculative_tokens: int | None = None
    engine: Runtime = Runtime.VLLM  # the runtime, already resolved from `auto`
    device: str | None = None
    dtype: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    baseline: bool = True
    compare_layouts: bool = False
    force: bool = False
    engine_args: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    revision: str | None = None
    target_revision: str | None = None
    token: str | None = None
    hub_timeout: float | None = 10.0
    chat: bool = False
    enable_thinking: bool = False
    floor: Floor | None = None
    inherited_env: Mapping[str, str] = field(default_factory=dict)
    # `-k 3,5,7` / `-k 3-7`: run each K (two or more values; one value is num_speculative_tokens).
    k_values: list[int] | None = None
    # Greedy identity with vLLM's prefix caching on and off; None: on for the vLLM engine.
    prefix_caching_check: bool | None = None
    # How the test runs (`smoke.run.smoke_test`), beside what it runs.
    runtime_requested: str = AUTO  # `--runtime` as given: auto, vllm or torch
    dry_run: bool = False
    require_identical: bool = False
    cross_check: bool | None = None  # repeat each vLLM run on the torch engine; None: on a CPU
    run_timeout: float = 3600.0  # wall-clock seconds of each engine run
    output_dir: Path | None = None
    server: ServerTarget | None = None
    # Where each value comes from, by field name (`engine_args.KEY` for an engine argument).
    sources: dict[str, Source] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.engine = Runtime(self.engine)  # a caller's plain "vllm" is the same runtime

    @property
    def sweep(self) -> bool:
        return bool(self.k_values) and len(self.k_values or []) > 1

    @property
    def checks_prefix_caching(self) -> bool:
        if self.engine != Runtime.VLLM:
            return False
        return self.prefix_caching_check if self.prefix_caching_check is not None else True

    @property
    def on_cpu(self) -> bool:
        return (self.device or "").startswith("cpu")

    @property
    def cross_checks(self) -> bool:
        """Whether each vLLM run is repeated on the torch reference engine (default: on a CPU)."""
        if self.engine != Runtime.VLLM:
            return False
        return self.cross_check if self.cross_check is not None else self.on_cpu


class SmokeArguments(Protocol):
    """What `resolve_options` reads from a command line: None (or an empty list) is not given."""

    @property
    def target(self) -> str | None: ...
    @property
    def drafts(self) -> Sequence[str] | None: ...
    @property
    def preset(self) -> str | None: ...
    @property
    def num_speculative_tokens(self) -> str | None: ...  # `-k` as typed: one K, a list or a range
    @property
    def runtime(self) -> str: ...  # auto, vllm or torch
    @property
    def device(self) -> str | None: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def tensor_parallel_size(self) -> int | None: ...
    @property
    def max_model_len(self) -> int | None: ...
    @property
    def engine_arg(self) -> Sequence[str] | None: ...  # KEY=VALUE, the value JSON where it parses
    @property
    def env(self) -> Sequence[str] | None: ...  # KEY=VALUE
    @property
    def seed(self) -> int: ...
    @property
    def run_timeout(self) -> float: ...
    @property
    def prefix_caching_check(self) -> bool | None: ...
    @property
    def cross_check(self) -> bool | None: ...
    @property
    def prompts_file(self) -> str | None: ...
    @property
    def num_prompts(self) -> int | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def chat(self) -> bool | None: ...
    @property
    def dry_run(self) -> bool: ...
    @property
    def no_baseline(self) -> bool: ...
    @property
    def compare_layouts(self) -> bool: ...
    @property
    def floor(self) -> float | None: ...
    @property
    def require_identical(self) -> bool: ...
    @property
    def force(self) -> bool: ...
    @property
    def server(self) -> str | None: ...
    @property
    def server_model(self) -> str | None: ...
    @property
    def api_key(self) -> str | None: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def revision(self) -> str | None: ...
    @property
    def target_revision(self) -> str | None: ...
    @property
    def token(self) -> str | None: ...
    @property
    def timeout(self) -> float: ...  # each Hub request
    @property
    def output_dir(self) -> Path | None: ...


def resolve_options(args: SmokeArguments, preset: Preset | None = None) -> SmokeOptions:
    """Every option resolved once: the command line's value, else the preset's (`preset`, or the
    one `args.preset` names), else the default; `SmokeOptions.sources` says which. Raises
    UsageError for values or combinations that cannot work."""
    from dflash_tools.serving import presets
    from dflash_tools.serving.k_values import parse_k_values

    if preset is None and args.preset:
        preset = presets.load_preset(args.preset)
    sources: dict[str, Source] = {}

    def pick(name: str, given: Any, from_preset: Any, default: Any) -> Any:
        if given is not None:
            sources[name] = Source.ARGUMENT
            return given
        if from_preset is not None:
            sources[name] = Source.PRESET
            return from_preset
        sources[name] = Source.DEFAULT
        return default

    k_values = parse_k_values(args.num_speculative_tokens) if args.num_speculative_tokens else None
    drafts = _draft_entries(args.drafts, preset, args.revision, sources)
    runtime = Runtime.VLLM_SERVER if args.server else Runtime.resolve(args.runtime)
    sources["engine"] = Source.ARGUMENT if args.server or args.runtime != AUTO else Source.DEFAULT
    prompts_path = presets.resolve_prompts_path(
        pick("prompts", args.prompts_file, preset.prompts if preset else None, None),
        relative_to=preset.path.parent if preset else None,
    )
    prompt_set = presets.load_prompts(
        prompts_path, pick("num_prompts", args.num_prompts, preset.num_prompts if preset else None, None)
    )
    engine_args, env = _engine_args(args, preset, sources)
    options = SmokeOptions(
        target=pick("target", args.target, preset.target if preset else None, None),
        drafts=drafts,
        prompts=prompt_set.texts,
        prompt_token_ids=prompt_set.token_ids,
        prompts_source=str(prompts_path),
        num_speculative_tokens=pick(
            "num_speculative_tokens",
            k_values[0] if k_values and len(k_values) == 1 else None,
            preset.num_speculative_tokens if preset and not k_values else None,
            None,
        ),
        k_values=k_values if k_values and len(k_values) > 1 else None,
        prefix_caching_check=args.prefix_caching_check,
        engine=runtime,
        device=args.device,
        dtype=args.dtype,
        max_tokens=pick("max_tokens", args.max_tokens, preset.max_tokens if preset else None, DEFAULT_MAX_TOKENS),
        baseline=not args.no_baseline,
        compare_layouts=args.compare_layouts,
        force=args.force,
        engine_args=engine_args,
        env=env,
        seed=args.seed,
        revision=args.revision,
        target_revision=args.target_revision,
        token=args.token,
        hub_timeout=args.timeout,
        chat=pick("chat", args.chat, preset.chat if preset else None, False),
        enable_thinking=pick("enable_thinking", None, preset.enable_thinking if preset else None, False),
        floor=Floor(args.floor, FIRST_POSITION_FLOOR, "--floor on the command line")
        if args.floor is not None
        else None,
        inherited_env=dict(os.environ),
        runtime_requested=args.runtime,
        dry_run=args.dry_run,
        require_identical=args.require_identical,
        cross_check=args.cross_check,
        run_timeout=args.run_timeout,
        output_dir=args.output_dir,
        server=ServerTarget(args.server, args.server_model, args.api_key, args.concurrency) if args.server else None,
        sources=sources,
    )
    if options.sweep:
        sources["k_values"] = Source.ARGUMENT
    if options.floor is not None:
        sources["floor"] = Source.ARGUMENT
    _check_server(options)
    return options


def _draft_entries(
    drafts: Sequence[str] | None, preset: Preset | None, revision: str | None, sources: dict[str, Source]
) -> list[DraftEntry]:
    """The drafts given (a preset's entry of the same source keeps its floor and expectations),
    else the preset's."""
    if drafts:
        sources["drafts"] = Source.ARGUMENT
        by_source = {entry.draft: entry for entry in (preset.drafts if preset else [])}
        return [by_source.get(source, DraftEntry(draft=source, revision=revision)) for source in drafts]
    sources["drafts"] = Source.PRESET if preset else Source.DEFAULT
    return list(preset.drafts) if preset else []


def _engine_args(
    args: SmokeArguments, preset: Preset | None, sources: dict[str, Source]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The engine keyword arguments and environment: the preset's, then the options' on top."""
    engine_args = dict(preset.engine_args) if preset else {}
    sources.update({f"engine_args.{key}": Source.PRESET for key in engine_args})
    given: dict[str, Any] = {}
    if args.tensor_parallel_size is not None:
        given["tensor_parallel_size"] = args.tensor_parallel_size
    if args.max_model_len is not None:
        given["max_model_len"] = args.max_model_len
    given.update(_key_values(args.engine_arg, "--engine-arg", parse_json=True))
    engine_args.update(given)
    sources.update({f"engine_args.{key}": Source.ARGUMENT for key in given})
    env = dict(preset.env) if preset else {}
    sources.update({f"env.{key}": Source.PRESET for key in env})
    given_env = {key: str(value) for key, value in _key_values(args.env, "--env", parse_json=False).items()}
    env.update(given_env)
    sources.update({f"env.{key}": Source.ARGUMENT for key in given_env})
    return engine_args, env


def _key_values(items: Sequence[str] | None, option: str, *, parse_json: bool) -> dict[str, Any]:
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


def _check_server(options: SmokeOptions) -> None:
    if options.server is None:
        return
    if options.sweep:
        raise UsageError(
            "--server measures the K the server was started with; a K sweep needs offline runs",
            "drop --server, or pass one K",
        )
    if len(options.drafts) > 1:
        raise UsageError(
            "--server measures one draft (the one the server serves)", "pass at most one --draft with --server"
        )
