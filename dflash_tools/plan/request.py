"""Building `dflash-tools plan`'s request once: the command line's values, else the preset's, each
with where it comes from (uv's settings style: resolved in one place, the command receives them).

    plan_request(args)  ->  PlanRequest      then  run.plan_launch(request)

`args` is a `PlanOptions` (`options.py`, where each option is declared once; the CLI passes its
`PlanArgs`, which is one). Rules: a value on the command line wins; a preset (`--preset`) gives the target, the drafts (each
with its own revision), K and the serving settings among its engine arguments
(`REQUEST_SETTINGS`); `--engine` names are resolved to tables here (`vllm`: the release of the
vLLM installed here).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dflash_tools.engine_rules import ENGINE_RULES, get_rules, latest
from dflash_tools.errors import UsageError
from dflash_tools.plan.checks import FRACTION_SETTINGS, INTEGER_SETTINGS, TEXT_SETTINGS, check_settings
from dflash_tools.plan.memory import dtype_bytes
from dflash_tools.plan.model import GIVEN, PRESET, REQUEST_SETTINGS, PlanDraft, PlanRequest
from dflash_tools.plan.options import PlanOptions
from dflash_tools.serving.k_values import single_k


def plan_request(args: PlanOptions) -> PlanRequest:
    """The request, every value resolved once and its source recorded (`PlanRequest.sources`).
    Raises UsageError for an unknown engine name, a K list, or no target or draft at all."""
    engines = plan_engines(args.engines)
    sources: dict[str, str] = {}
    target = args.target
    drafts = [PlanDraft(source, args.revision) for source in args.drafts or []]
    k = single_k(args.num_speculative_tokens, "plan")
    settings: dict[str, Any] = {name: getattr(args, name) for name in REQUEST_SETTINGS}
    # Every number checked before any arithmetic (`checks.setting_problem`), named as typed.
    check_settings(
        {
            "gpu_memory_gib": args.gpu_memory,
            "tensor_parallel_size": args.tensor_parallel_size,
            "decode_context_parallel_size": args.decode_context_parallel_size,
            **settings,
        },
        option_name,
    )
    check_dtypes(settings, option_name)
    given = {"target": target, "drafts": drafts, "num_speculative_tokens": k, **settings}
    sources.update({name: GIVEN for name, value in given.items() if value not in (None, [])})
    if args.preset is not None:
        from dflash_tools.plan.presets import load_preset

        preset = load_preset(args.preset)
        if not target and preset.target:
            target, sources["target"] = preset.target, PRESET
        if not drafts:
            drafts = [PlanDraft(entry.draft, entry.revision or args.revision) for entry in preset.drafts]
            sources["drafts"] = PRESET
        if k is None and preset.num_speculative_tokens is not None:
            k, sources["num_speculative_tokens"] = preset.num_speculative_tokens, PRESET
        for name in REQUEST_SETTINGS:
            if settings[name] is None and preset.engine_args.get(name) is not None:
                settings[name], sources[name] = preset.engine_args[name], PRESET
    if not target:
        raise UsageError("no target given", "pass --target (a Hub repo id, folder or example:NAME) or --preset")
    if not drafts:
        raise UsageError("no draft given", "pass --draft (repeatable) or --preset")
    return PlanRequest(
        target=target,
        drafts=tuple(drafts),
        engines=engines,
        num_speculative_tokens=k,
        gpu_memory_gib=args.gpu_memory,
        tensor_parallel_size=args.tensor_parallel_size,
        decode_context_parallel_size=args.decode_context_parallel_size,
        target_revision=args.target_revision,
        preset=args.preset,
        sources=sources,
        **settings,
    )


def option_name(setting: str) -> str:
    """The command-line option of a request setting (`--max-num-seqs`, `--gpu-memory`, `-k`)."""
    return OPTION_NAMES.get(setting, "--" + setting.replace("_", "-"))


OPTION_NAMES = {"gpu_memory_gib": "--gpu-memory", "num_speculative_tokens": "-k"}


def check_dtypes(settings: Mapping[str, Any], where: Callable[[str], str]) -> None:
    """`dtype` and `kv_cache_dtype` are names the memory check knows (`auto`: the model's)."""
    for name in ("dtype", "kv_cache_dtype"):
        value = settings.get(name)
        if value is None or value == "auto":
            continue
        try:
            dtype_bytes(value)
        except ValueError as exc:
            raise UsageError(f"{where(name)} {value!r}: {exc}", "pass one of those names, or auto") from None


def check_request(request: PlanRequest) -> PlanRequest:
    """A request built in Python (`PlanRequest(...)`) checked as the command line's is: the
    target and drafts are paths or names (a `pathlib.Path` becomes its text), every number in
    range, the engines the names `--engine` takes (`sglang`, `all`, `vllm==0.34.0`), each
    raising UsageError naming the field. Returns the request with those values normalized."""
    from dataclasses import replace

    from dflash_tools.reading.checkpoint import source_text

    target = source_text(request.target, "PlanRequest.target")
    if not isinstance(request.drafts, tuple | list) or not all(isinstance(d, PlanDraft) for d in request.drafts):
        raise UsageError(
            f"PlanRequest.drafts is {type(request.drafts).__name__}, not a tuple of PlanDraft",
            "pass drafts=(PlanDraft('org/draft'),)",
        )
    drafts = tuple(
        PlanDraft(source_text(d.source, f"PlanRequest.drafts[{i}].source"), d.revision)
        for i, d in enumerate(request.drafts)
    )
    numbers = {name: getattr(request, name) for name in (*INTEGER_SETTINGS, *FRACTION_SETTINGS, *TEXT_SETTINGS)}
    check_settings(numbers, lambda name: f"PlanRequest.{name}")
    check_dtypes(numbers, lambda name: f"PlanRequest.{name}")
    engines = request.engines
    if isinstance(engines, str) or not all(isinstance(name, str) for name in engines):
        raise UsageError(f"PlanRequest.engines is {engines!r}, not a tuple of engine names", "pass engines=('all',)")
    if any(name not in ENGINE_RULES for name in engines):
        engines = plan_engines(engines)
    return replace(request, target=target, drafts=drafts, engines=tuple(engines))


def plan_engines(values: Sequence[str] | None) -> tuple[str, ...]:
    """`engine==version` tables for the --engine values (default: all), in the tables' order;
    `vllm` is the release of the vLLM installed here."""
    from dflash_tools.serving.engine_view import ALL, engine_choices, resolve_engine_specs

    try:
        specs, installed = resolve_engine_specs(list(values or [ALL]))
    except ValueError as exc:
        raise UsageError(f"--engine {exc}", f"choose from: {', '.join(engine_choices())}") from None
    if installed:
        from dflash_tools.serving.vllm_capability import detect_vllm

        capability = detect_vllm()
        rules = get_rules(f"vllm=={capability.version}") if capability.installed and capability.version else None
        if rules is None:
            found = f"vLLM {capability.version}" if capability.installed else "no vLLM"
            newest = latest("vllm")
            raise UsageError(
                f"--engine vllm: {found} installed here, and the tool has no table for it",
                f"name a release: --engine {newest.spec}" if newest is not None else "name a release",
            )
        specs = [spec for spec in ENGINE_RULES if spec in {*specs, rules.spec}]
    return tuple(specs)
