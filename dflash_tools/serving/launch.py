"""Whole launch lines: the command (and environment) that serves a target with a draft.

The flag names come from the engine tables (`EngineRules.launch`, by role), so a release that
renames a flag changes one table. These are plain functions of what to serve; deciding what to
serve (K, the layout, whether an engine can serve the draft at all) is `engine_view`'s job, and
the serving settings (`LaunchSettings`: batch sizes, lengths, parallelism) the serving plan's.

    vLLM:   vllm serve TARGET --speculative-config '{"method": ..., "model": ..., ...}'
    SGLang: python -m sglang.launch_server --model-path TARGET --speculative-algorithm DFLASH
            --speculative-draft-model-path DRAFT --speculative-num-draft-tokens B
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflash_tools.documents import JsonDocument
from dflash_tools.engine_rules import EngineRules
from dflash_tools.vllm_plugin.markers import REQUIRE_ENV

# Written where the target is not known; the human output says to replace it.
TARGET_PLACEHOLDER = "TARGET"


@dataclass(frozen=True)
class Launch(JsonDocument):
    """One launch: `argv` to run with `environment` added to the caller's environment."""

    argv: tuple[str, ...]
    environment: dict[str, str] = field(default_factory=dict)
    # argv words the user must replace before running it (the target when it was not given).
    placeholders: tuple[str, ...] = ()

    def shell(self) -> str:
        """The line to paste into a POSIX shell: `NAME=value ... argv`, quoted where needed."""
        assignments = [f"{name}={shlex.quote(value)}" for name, value in sorted(self.environment.items())]
        return " ".join([*assignments, shlex.join(self.argv)])


@dataclass(frozen=True)
class ServingSetting:
    """One serving setting a launch line may carry: its name in the plan (a `LaunchSettings`
    field, a `PlanRequest` field, a preset's engine argument), the role of its flag in the engine
    tables (`EngineRules.flag(role)`), and the type its value is written as."""

    name: str
    role: str
    kind: type[int] | type[float] | type[str]
    from_preset: bool = True  # a preset's `engine_args` may give it (else only the command line)


# Every serving setting, in the order a launch line lists them: a new one is a row here, a field of
# `LaunchSettings` and `PlanRequest`, its option in `cli/plan_cmd.py`, and its flag in the tables.
SERVING_SETTINGS: tuple[ServingSetting, ...] = (
    ServingSetting("target_revision", "target-revision", str, from_preset=False),
    ServingSetting("max_model_len", "max-model-len", int),
    ServingSetting("max_num_seqs", "max-num-seqs", int),
    ServingSetting("max_num_batched_tokens", "max-num-batched-tokens", int),
    ServingSetting("tensor_parallel_size", "tensor-parallel-size", int, from_preset=False),
    ServingSetting("decode_context_parallel_size", "decode-context-parallel-size", int, from_preset=False),
    ServingSetting("dtype", "dtype", str),
    ServingSetting("kv_cache_dtype", "kv-cache-dtype", str),
    ServingSetting("gpu_memory_utilization", "gpu-memory-utilization", float),
)


@dataclass(frozen=True)
class LaunchSettings:
    """Serving settings a plan puts on the launch line; None leaves the engine's default.

    Each is written with the flag of its role in the engine's table (`SERVING_SETTINGS`); a
    setting whose role the table lacks (SGLang has no `max_num_batched_tokens`) is not written for
    that engine.
    """

    target_revision: str | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int | None = None
    decode_context_parallel_size: int | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    gpu_memory_utilization: float | None = None
    # vLLM: a key of the speculative-config JSON (role "draft-dcp"), not a flag.
    draft_decode_context_parallel_size: int | None = None

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> LaunchSettings:
        """The settings among `values` (by name), each as its type; None and other names left out."""
        typed: dict[str, Any] = {
            s.name: s.kind(values[s.name]) for s in SERVING_SETTINGS if values.get(s.name) is not None
        }
        return cls(**typed)

    def roles(self) -> list[tuple[str, str]]:
        """(role, value) of every setting that is set, in the order the launch line lists them."""
        values = [(s.role, getattr(self, s.name)) for s in SERVING_SETTINGS]
        return [
            (role, f"{value:g}" if isinstance(value, float) else str(value))
            for role, value in values
            if value is not None
        ]


def settings_argv(rules: EngineRules, settings: LaunchSettings | None) -> list[str]:
    """`--flag value` for every setting that is set and has a flag in `rules`."""
    argv: list[str] = []
    for role, value in settings.roles() if settings is not None else []:
        flag = rules.flag(role)
        if flag is not None:
            argv += [flag.name, value]
    return argv


def _flag(rules: EngineRules, role: str) -> str:
    flag = rules.flag(role)
    if flag is None:
        raise ValueError(f"{rules.spec} has no launch flag for {role!r}")
    return flag.name


def _target(target: str | None) -> tuple[str, tuple[str, ...]]:
    return (launch_path(target), ()) if target else (TARGET_PLACEHOLDER, (TARGET_PLACEHOLDER,))


def served_model_name(source: str, folder: Path | None) -> str:
    """What a launch line names for a model read from `source`: the folder it was read from,
    resolved, when it is on this machine (`example:NAME`, a relative path or a config.json file
    do not run as typed), else its Hub repo id. `plan` and `inspect --target` both name the
    target this way."""
    return str(folder.resolve()) if folder is not None else source.removeprefix("hf://")


def launch_path(name: str) -> str:
    """What a launch line names: a local folder or file as an absolute path, anything else (a Hub
    repo id) as given. A relative `./a/b` printed as `a/b`, or a folder `kmis`, reads as a Hub repo
    id once the line is run from another folder or on another machine; and an engine, like
    huggingface_hub, takes an existing local path before a repo id of the same name."""
    path = Path(name)
    if not name or path.is_absolute() or not path.exists():
        return name
    return str(path.resolve())


def sglang_launch(
    rules: EngineRules,
    *,
    draft: str,
    path: str,
    num_draft_tokens: int,
    target: str | None = None,
    draft_revision: str | None = None,
    settings: LaunchSettings | None = None,
) -> Launch:
    """SGLang: `--speculative-algorithm PATH`; DFLASH gets its verify window (the block size,
    drafts + 1), DSPARK its number of drafts, each by the flag the table names."""
    target_name, placeholders = _target(target)
    argv = [*_flag(rules, "program").split(), _flag(rules, "target"), target_name]
    argv += [_flag(rules, "algorithm"), path, _flag(rules, "draft"), launch_path(draft)]
    if draft_revision:
        argv += [_flag(rules, "draft-revision"), draft_revision]
    if path == "DSPARK":
        argv += [_flag(rules, "dspark-block-size"), str(num_draft_tokens)]
    else:
        argv += [_flag(rules, "draft-tokens"), str(num_draft_tokens + 1)]
    argv += settings_argv(rules, settings)
    return Launch(tuple(argv), {}, placeholders)


def vllm_launch(
    rules: EngineRules,
    *,
    draft: str,
    method: str,
    num_speculative_tokens: int,
    target: str | None = None,
    draft_revision: str | None = None,
    needs_plugin: bool = False,
    runner_environment: Mapping[str, str] | None = None,
    settings: LaunchSettings | None = None,
) -> Launch:
    """vLLM: `vllm serve TARGET --speculative-config JSON`, with `method` always given (a draft
    folder without "dflash" in its name is not detected) and K explicit (DFlash requires it).

    `needs_plugin`: the draft is anchor-first and only the dflash-tools plugin serves it; the
    plugin then refuses to let vLLM start without its patch, instead of serving it wrong.
    `runner_environment`: the variables that select the model runner the draft needs
    (`vllm_runtime.VllmRuntime.environment`: on a release that still has V1, the V2 selector).
    """
    target_name, placeholders = _target(target)
    speculative: dict[str, Any] = {
        "method": method,
        "model": launch_path(draft),
        "num_speculative_tokens": num_speculative_tokens,
    }
    if draft_revision:
        speculative["revision"] = draft_revision
    if settings is not None and settings.draft_decode_context_parallel_size is not None:
        speculative[_flag(rules, "draft-dcp")] = settings.draft_decode_context_parallel_size
    program = _flag(rules, "program").split()
    argv = [*program, target_name, _flag(rules, "speculative-config"), json.dumps(speculative)]
    argv += settings_argv(rules, settings)
    environment: dict[str, str] = {}
    if needs_plugin:
        environment[REQUIRE_ENV] = "1"
    environment.update(runner_environment or {})
    return Launch(tuple(argv), environment, placeholders)
