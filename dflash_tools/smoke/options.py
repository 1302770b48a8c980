"""What one smoke test is asked to do, resolved once: the runtime it runs on and every option, each
with where its value comes from (uv's settings style: arguments, else the preset, else a default).

    resolve_options(args, preset)  ->  SmokeOptions      then  smoke.run.smoke_test(options)

`Runtime` names where the generation runs (the choice that travels through smoke-test, never a
bare string); `SmokeOptions` is everything the command line or a preset says about one smoke test;
`SmokeArguments` (`smoke.arguments`: each option declared once, the CLI's options derive from it)
is what `resolve_options` reads.

Every number is checked for type, finiteness and range here, before any arithmetic
(`check_numbers`): a NaN timeout or a K of a billion is a one-line usage error naming the option.

Imports: `serving` (the presets, the K parser and whether an engine is installed), `reading`
(the bounded JSON reader), `smoke.workloads.protocols` and `smoke.workloads.datasets` (what `--protocol` and
`--dataset` name).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from dflash_tools.errors import UsageError
from dflash_tools.plan.presets import DraftEntry, Floor, Preset
from dflash_tools.smoke.arguments import SmokeArguments as SmokeArguments
from dflash_tools.smoke.workloads.protocols import MeasurementProtocol, greedy

DEFAULT_MAX_TOKENS = 128
# A floor given with --floor sets the mean acceptance length; position 0 keeps the sanity floor's.
FIRST_POSITION_FLOOR = 0.3
# --dataset without --num-prompts or a protocol that says how many: as many as the bundled prompts file.
DEFAULT_DATASET_PROMPTS = 16
SERVER_ENGINES = ("auto", "vllm", "sglang")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Timed repetitions (docs/smoke-test.md, "How sure a measurement is"): without --repeat, each
# timed run repeats until it has at least MIN_REPEATS windows and MIN_TIMED_S seconds of them
# (a window under a second or two on a shared machine moves by tens of percent), at most
# MAX_REPEATS times.
MIN_REPEATS = 3
MIN_TIMED_S = 5.0
MAX_REPEATS = 50


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
    PROTOCOL = "protocol"  # the sampling protocol (`--protocol`)
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
    # `--reference-al`: a mean acceptance length measured like this run (`smoke.workloads.reference_al`).
    reference_al: float | None = None
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
    # `--server-engine`: auto (told from how the server answers), vllm or sglang.
    server_engine: str = AUTO
    # `--protocol`: how the measurement decodes (smoke.workloads.protocols); None: greedy with `chat`.
    protocol: MeasurementProtocol | None = None
    # `--dataset`: where the prompts came from (smoke.workloads.datasets `DatasetPrompts.to_dict()`), and
    # the prompts of the protocol's warm-up requests (servers only).
    dataset: dict[str, Any] | None = None
    warmup_prompts: list[str] | None = None
    # Timed repetitions: `repeat` exactly (--repeat N), or None: at least MIN_REPEATS and until
    # the timed windows add up to `min_time_s` (at most MAX_REPEATS).
    repeat: int | None = None
    min_time_s: float = MIN_TIMED_S
    # Where each value comes from, by field name (`engine_args.KEY` for an engine argument).
    sources: dict[str, Source] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.engine = Runtime(self.engine)  # a caller's plain "vllm" is the same runtime

    def resolved_protocol(self) -> MeasurementProtocol:
        """The protocol as this test applies it: its sampling and chat, with the test's prompt count
        and tokens per answer."""
        import dataclasses

        protocol = self.protocol or greedy(chat=self.chat, enable_thinking=self.enable_thinking)
        count = len(self.prompt_token_ids) if self.prompt_token_ids else len(self.prompts)
        return dataclasses.replace(protocol, max_tokens=self.max_tokens, num_prompts=count)

    def timing(self) -> dict[str, Any]:
        """The request's `timing` (dflash_tools.smoke_contract): how often each timed run repeats."""
        if self.repeat is not None:
            return {"min_repeats": self.repeat, "max_repeats": self.repeat, "min_timed_s": 0.0}
        return {"min_repeats": MIN_REPEATS, "max_repeats": MAX_REPEATS, "min_timed_s": self.min_time_s}

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


def resolve_options(args: SmokeArguments, preset: Preset | None = None) -> SmokeOptions:
    """Every option resolved once: the command line's value, else the protocol's (`--protocol`:
    prompts, tokens, chat), else the preset's (`preset`, or the one `args.preset` names), else the
    default; `SmokeOptions.sources` says which. Raises UsageError for values or combinations that
    cannot work, and for any number out of its range (`smoke.limits`) before it is used."""
    from dflash_tools.plan import presets
    from dflash_tools.serving.k_values import parse_k_values
    from dflash_tools.smoke import limits
    from dflash_tools.smoke.workloads.protocols import load_protocol

    limits.check_arguments(args)
    if preset is None and args.preset:
        preset = presets.load_preset(args.preset)
    sources: dict[str, Source] = {}

    def pick(name: str, given: Any, from_preset: Any, default: Any, from_protocol: Any = None) -> Any:
        for value, source in (
            (given, Source.ARGUMENT),
            (from_protocol, Source.PROTOCOL),
            (from_preset, Source.PRESET),
        ):
            if value is not None:
                sources[name] = source
                return value
        sources[name] = Source.DEFAULT
        return default

    protocol_name = args.protocol
    protocol = load_protocol(protocol_name) if protocol_name else None
    if protocol is not None:
        sources["protocol"] = Source.ARGUMENT
    k_values = parse_k_values(args.num_speculative_tokens) if args.num_speculative_tokens else None
    limits.check_k_values(k_values)
    drafts = _draft_entries(args.drafts, preset, args.revision, sources)
    server_engine = args.server_engine
    runtime = _server_runtime(server_engine) if args.server else Runtime.resolve(args.runtime)
    sources["engine"] = Source.ARGUMENT if args.server or args.runtime != AUTO else Source.DEFAULT
    num_prompts = pick(
        "num_prompts",
        args.num_prompts,
        preset.num_prompts if preset else None,
        None,
        protocol.num_prompts if protocol else None,
    )
    prompts = _prompts(args, preset, protocol, num_prompts, sources)
    engine_args, env = _engine_args(args, preset, sources)
    chat = _chat(args, preset, protocol, sources)
    options = SmokeOptions(
        target=pick("target", args.target, preset.target if preset else None, None),
        drafts=drafts,
        prompts=prompts.texts,
        prompt_token_ids=prompts.token_ids,
        prompts_source=prompts.source,
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
        max_tokens=pick(
            "max_tokens",
            args.max_tokens,
            preset.max_tokens if preset else None,
            DEFAULT_MAX_TOKENS,
            protocol.max_tokens if protocol else None,
        ),
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
        chat=chat[0],
        enable_thinking=chat[1],
        floor=Floor(args.floor, FIRST_POSITION_FLOOR, "--floor on the command line")
        if args.floor is not None
        else None,
        reference_al=_reference_al(args),
        inherited_env=dict(os.environ),
        runtime_requested=args.runtime,
        dry_run=args.dry_run,
        require_identical=args.require_identical,
        cross_check=args.cross_check,
        run_timeout=args.run_timeout,
        output_dir=args.output_dir,
        server=ServerTarget(args.server, args.server_model, args.api_key, args.concurrency) if args.server else None,
        server_engine=server_engine,
        protocol=protocol,
        dataset=prompts.dataset,
        warmup_prompts=prompts.warmup,
        repeat=args.repeat,
        min_time_s=_min_time(args),
        sources=sources,
    )
    if options.sweep:
        sources["k_values"] = Source.ARGUMENT
    if options.floor is not None:
        sources["floor"] = Source.ARGUMENT
    if options.reference_al is not None:
        sources["reference_al"] = Source.ARGUMENT
    limits.check_options(options, preset)
    _check_server(options)
    _check_protocol(options)
    return options


def _reference_al(args: SmokeArguments) -> float | None:
    """`--reference-al`: a mean acceptance length, at least 1 (one token per step is the least)."""
    value = args.reference_al
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 1:
        raise UsageError(
            f"--reference-al {value!r}: not a mean acceptance length",
            "pass the mean acceptance length measured for this draft, 1 or more (e.g. 5.34)",
        )
    return float(value)


def _min_time(args: SmokeArguments) -> float:
    """`--min-time` (0 is a value: the minimum repetitions alone), else MIN_TIMED_S."""
    given = args.min_time
    return MIN_TIMED_S if given is None else float(given)


def _server_runtime(server_engine: str) -> Runtime:
    """The runtime of `--server`: SGLang when named, else vLLM until the server says otherwise
    (`smoke.run` plans with the engine detected)."""
    if server_engine not in SERVER_ENGINES:
        raise UsageError(f"--server-engine {server_engine!r}: not one of {', '.join(SERVER_ENGINES)}", "")
    return Runtime.SGLANG_SERVER if server_engine == "sglang" else Runtime.VLLM_SERVER


@dataclass
class _Prompts:
    texts: list[str]
    token_ids: list[list[int]] | None
    source: str
    dataset: dict[str, Any] | None = None
    warmup: list[str] | None = None


def _prompts(
    args: SmokeArguments,
    preset: Preset | None,
    protocol: MeasurementProtocol | None,
    num_prompts: int | None,
    sources: dict[str, Source],
) -> _Prompts:
    """The prompts: a dataset's rows (`--dataset`, in the protocol's order), else a prompts file."""
    from dflash_tools.plan import presets
    from dflash_tools.smoke.workloads.datasets import load_dataset_prompts

    dataset = _optional_text(args.dataset, "dataset")
    dataset_file = _optional_text(args.dataset_file, "dataset_file", path=True)
    if dataset_file is not None and dataset is None:
        raise UsageError("--dataset-file needs --dataset NAME (which dataset the file holds)", "e.g. --dataset gsm8k")
    if dataset is not None:
        if args.prompts_file is not None:
            raise UsageError("--dataset and --prompts both name the prompts", "pass one of them")
        sources["prompts"] = Source.ARGUMENT
        rows = load_dataset_prompts(
            dataset,
            num_prompts or DEFAULT_DATASET_PROMPTS,
            order=protocol.order if protocol else "dataset",
            warmup=protocol.warmup if protocol else 0,
            path=Path(dataset_file).expanduser() if dataset_file is not None else None,
        )
        return _Prompts(
            rows.prompts,
            None,
            f"dataset {rows.spec.title}, {rows.source}",
            rows.to_dict(),
            rows.warmup_prompts,
        )
    given = args.prompts_file
    path = presets.resolve_prompts_path(
        given if given is not None else (preset.prompts if preset else None),
        relative_to=preset.path.parent if preset else None,
    )
    sources["prompts"] = Source.ARGUMENT if given else Source.PRESET if preset and preset.prompts else Source.DEFAULT
    prompt_set = presets.load_prompts(path, num_prompts)
    return _Prompts(prompt_set.texts, prompt_set.token_ids, str(path))


def _optional_text(value: Any, name: str, *, path: bool = False) -> str | None:
    """An argument added for the Python API as the command line has it: text (a `pathlib.Path` too
    for a file) or None; anything else a UsageError naming it, never an AttributeError later."""
    if path and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        kind = "a path (str or pathlib.Path)" if path else "text"
        raise UsageError(f"{name} is {shown} ({type(value).__name__}), not {kind}", f"pass {name} as {kind}, or None")
    return value


def _chat(
    args: SmokeArguments, preset: Preset | None, protocol: MeasurementProtocol | None, sources: dict[str, Source]
) -> tuple[bool, bool]:
    """(chat, enable_thinking): the protocol's when one is named (a --chat/--no-chat that
    disagrees with it is a usage error), else the command line's, the preset's or off."""
    if protocol is not None:
        if args.chat is not None and args.chat != protocol.chat:
            raise UsageError(
                f"--{'' if args.chat else 'no-'}chat disagrees with protocol {protocol.name} "
                f"({'chat prompts' if protocol.chat else 'raw completions'})",
                "drop the option: the protocol says how prompts are sent",
            )
        sources["chat"] = sources["enable_thinking"] = Source.PROTOCOL
        return protocol.chat, protocol.enable_thinking
    chat = args.chat if args.chat is not None else (preset.chat if preset else None)
    thinking = preset.enable_thinking if preset else None
    sources["chat"] = (
        Source.ARGUMENT if args.chat is not None else Source.PRESET if chat is not None else Source.DEFAULT
    )
    sources["enable_thinking"] = Source.PRESET if thinking is not None else Source.DEFAULT
    return bool(chat), bool(thinking)


def _check_protocol(options: SmokeOptions) -> None:
    """Offline runs decode greedily: their verdict compares the output with the target alone and
    with prefix caching on and off, which sampling would break. A sampling protocol is a server's."""
    protocol = options.protocol
    if protocol is None or options.server is not None or protocol.greedy:
        return
    raise UsageError(
        f"protocol {protocol.name} samples ({protocol.summary()}); offline runs decode greedily (the "
        "verdict compares the output with the target alone)",
        "measure it on a running server (--server URL), or pass --protocol greedy",
    )


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
    """`KEY=VALUE` items: engine arguments (the value JSON where it parses, `smoke.limits`) or
    environment variables (a name a process environment can hold)."""
    from dflash_tools.smoke import limits

    values: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{option} {item!r}: expected KEY=VALUE", f"e.g. {option} max_num_seqs=8")
        if "\0" in item or (not parse_json and ("=" in key or not _ENV_NAME.match(key.strip()))):
            raise UsageError(f"{option} {item!r}: not a valid KEY=VALUE", "a KEY of letters, digits and _; no NUL")
        values[key.strip()] = limits.engine_arg_value(key.strip(), raw) if parse_json else raw
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
