"""Exceptions that end a command with a one-line message and a next step.

Broken checkpoints are findings, not exceptions: these are for sources that cannot be reached at
all and for refused operations. The CLI maps them to exit code 2 (`SourceError`, `UsageError`) or
1 (`OperationError`).
"""

from __future__ import annotations


class DflashToolsError(Exception):
    """Base class: `message` is one line naming the file or key, `hint` says what to do next."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class SourceError(DflashToolsError):
    """The source cannot be found or reached (no such path, no such repo, offline and not cached)."""

    exit_code = 2


class UsageError(DflashToolsError):
    """A combination of options that cannot work."""

    exit_code = 2


class OperationError(DflashToolsError):
    """A requested operation was refused or failed part way (nothing was left half-written)."""

    exit_code = 1


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
