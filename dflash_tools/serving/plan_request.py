"""Building `dflash-tools plan`'s request once: the command line's values, else the preset's, each
with where it comes from (uv's settings style: resolved in one place, the command receives them).

    plan_request(args)  ->  PlanRequest      then  plan.plan_launch(request)

`args` is anything with the attributes of `PlanArguments` (the CLI passes its parsed options).
Rules: a value on the command line wins; a preset (`--preset`) gives the target, the drafts (each
with its own revision), K and the serving settings among its engine arguments
(`REQUEST_SETTINGS`); `--engine` names are resolved to tables here (`vllm`: the release of the
vLLM installed here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from dflash_tools.engine_rules import get_rules, latest
from dflash_tools.errors import UsageError
from dflash_tools.serving.k_values import single_k
from dflash_tools.serving.plan_model import GIVEN, PRESET, REQUEST_SETTINGS, PlanDraft, PlanRequest


class PlanArguments(Protocol):
    """What `plan_request` reads from the command line: None (or an empty list) is not given."""

    @property
    def target(self) -> str | None: ...
    @property
    def drafts(self) -> Sequence[str] | None: ...
    @property
    def preset(self) -> str | None: ...
    @property
    def num_speculative_tokens(self) -> str | None: ...  # `-k` as typed: one K here
    @property
    def engines(self) -> Sequence[str] | None: ...
    @property
    def gpu_memory(self) -> float | None: ...
    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def decode_context_parallel_size(self) -> int: ...
    @property
    def max_num_seqs(self) -> int | None: ...
    @property
    def max_model_len(self) -> int | None: ...
    @property
    def max_num_batched_tokens(self) -> int | None: ...
    @property
    def gpu_memory_utilization(self) -> float | None: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def kv_cache_dtype(self) -> str | None: ...
    @property
    def revision(self) -> str | None: ...
    @property
    def target_revision(self) -> str | None: ...


def plan_request(args: PlanArguments) -> PlanRequest:
    """The request, every value resolved once and its source recorded (`PlanRequest.sources`).
    Raises UsageError for an unknown engine name, a K list, or no target or draft at all."""
    engines = plan_engines(args.engines)
    sources: dict[str, str] = {}
    target = args.target
    drafts = [PlanDraft(source, args.revision) for source in args.drafts or []]
    k = single_k(args.num_speculative_tokens, "plan")
    settings: dict[str, Any] = {name: getattr(args, name) for name in REQUEST_SETTINGS}
    given = {"target": target, "drafts": drafts, "num_speculative_tokens": k, **settings}
    sources.update({name: GIVEN for name, value in given.items() if value not in (None, [])})
    if args.preset is not None:
        from dflash_tools.serving.presets import load_preset

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


def plan_engines(values: Sequence[str] | None) -> tuple[str, ...]:
    """`engine==version` tables for the --engine values (default: all), in the tables' order;
    `vllm` is the release of the vLLM installed here."""
    from dflash_tools.engine_rules import ENGINE_RULES
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
