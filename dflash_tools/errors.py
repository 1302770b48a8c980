"""Exceptions that end a command with a one-line message and a next step, and the exit codes.

Broken checkpoints are findings, not exceptions: these are for sources that cannot be reached at
all and for refused operations. Each class carries its exit code and the `error.kind` of the JSON
error document (docs/json.md) as class attributes, so a subclass (a Hub source error, a busy lock)
reports what its base says without a table of class names.
"""

from __future__ import annotations

from typing import Any, ClassVar

# The documented exit codes (docs/json.md): the one home for them.
EXIT_OK = 0
EXIT_FINDINGS = 1  # error findings, a failed verdict, or a runtime failure
EXIT_USAGE = 2  # a usage error, or a source that cannot be found or read

ERROR_SCHEMA_VERSION = 1


def error_document(
    command: str, message: str, hint: str, exit_code: int, kind: str, source: Any = None, **extra: Any
) -> dict[str, Any]:
    """The one JSON document a failed command prints on stdout (docs/json.md); also each
    unreadable source's place in `inspect`'s array of several."""
    document: dict[str, Any] = {"schema_version": ERROR_SCHEMA_VERSION, "command": command}
    if source is not None:
        document["source"] = source
    document["ok"] = False
    document["exit_code"] = exit_code
    document["error"] = {"kind": kind, "message": message, "hint": hint, "exit_code": exit_code, **extra}
    return document


class DflashToolsError(Exception):
    """Base class: `message` is one line naming the file or key, `hint` says what to do next."""

    exit_code: ClassVar[int] = EXIT_FINDINGS
    kind: ClassVar[str] = "operation"

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class SourceError(DflashToolsError):
    """The source cannot be found or reached (no such path, no such repo, offline and not cached)."""

    exit_code = EXIT_USAGE
    kind = "source"


class UsageError(DflashToolsError):
    """A combination of options that cannot work."""

    exit_code = EXIT_USAGE
    kind = "usage"


class OperationError(DflashToolsError):
    """A requested operation was refused or failed part way (nothing was left half-written)."""

    exit_code = EXIT_FINDINGS
    kind = "operation"


# dflash-tools is not on PyPI: install hints name the extra and point at README's install lines
# (a checkout, a git URL, a wheel). Where a hint suggests the torch extra: resolving torch from PyPI
# pulls about 20 nvidia-* CUDA wheels even on a CPU-only machine, so the CPU index comes first.
TORCH_INSTALL_HINT = (
    "install dflash-tools with its torch extra (in a checkout: pip install '.[torch]'; README, "
    '"Install"); on a machine without a GPU, first '
    "`pip install torch --index-url https://download.pytorch.org/whl/cpu`, which avoids the CUDA wheels"
)
VLLM_INSTALL_HINT = (
    "install dflash-tools with its vllm extra in the environment that runs vLLM (in a checkout: "
    "pip install '.[vllm]'; README, \"Install\")"
)
