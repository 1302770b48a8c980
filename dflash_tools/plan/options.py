"""What `dflash-tools plan` is given, declared once: `PlanOptions`, one field per option the core
reads (its name, type and default). The CLI's `PlanArgs` (`cli/plan_cmd.py`) is this class plus the
output options, with a flag and a help text per field; `request.plan_request(options)` takes either.

    PlanOptions(target=..., drafts=[...], preset=..., ...)  ->  request.plan_request  ->  PlanRequest

A value that is None (or an empty list) was not given: the preset's, else the release's default,
applies (`PlanRequest.sources` records which). The values are as typed (`-k` a text, `--engine`
names): `plan_request` parses and checks them.

This module is on every `--help` path (the CLI reads the fields to declare its options): it
imports nothing but the standard library, and no annotation here is a string (typer reads them as
they are, so no `from __future__ import annotations`). The class becomes a dataclass when it is
first built or when the command runs (`materialize`), not when it is imported: generating a
dataclass's methods costs milliseconds on each `--help` (the CLI's `args_dataclass` does the same).
"""

import dataclasses
from typing import Any, TypeVar, dataclass_transform

OptionsClass = TypeVar("OptionsClass", bound=type)


def materialize(cls: type) -> None:
    """Make `cls` and each class it derives from a frozen dataclass, base first (once each)."""
    for klass in reversed(cls.__mro__[:-1]):
        if "__dataclass_fields__" not in vars(klass):
            dataclasses.dataclass(frozen=True)(klass)


@dataclass_transform(frozen_default=True)
def options_dataclass(cls: OptionsClass) -> OptionsClass:
    """Declare a frozen dataclass that is generated on first use (see the module's docstring)."""

    def build(klass: type, *args: Any, **kwargs: Any) -> Any:
        materialize(klass)
        return object.__new__(klass)

    cls.__new__ = staticmethod(build)  # type: ignore[assignment]
    return cls


@options_dataclass
class PlanOptions:
    """The options of `plan` the core reads, as given (None or an empty list: not given)."""

    target: str | None = None
    drafts: list[str] | None = None
    preset: str | None = None
    num_speculative_tokens: str | None = None  # `-k` as typed: one K here
    engines: list[str] | None = None  # `--engine` names: `all`, `sglang`, `vllm`, `vllm==X.Y.Z`
    gpu_memory: float | None = None  # GiB per GPU
    tensor_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    revision: str | None = None  # each draft's Hub revision
    target_revision: str | None = None
