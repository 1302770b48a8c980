"""The reference engine: DFlash / DFlash2 speculative decoding in plain PyTorch, CPU or GPU.

`run_request` implements the engine side of the smoke-test contract
(`dflash_tools.smoke_contract`). Importing this package does not import torch; the modules that
need it (`ops`, `draft`, `target`, `loop`, `runner`, `weights`) are loaded on first use.
The tiny demo target and drafts it runs are written by the fixture factory
(`dflash_tools_testing.demos`).

Imports: `inspect`, `draft`, `reading` and `smoke_contract` (the request and result documents it
shares with the vLLM engine). Never `smoke`, nor `cli`.
"""

from __future__ import annotations

from typing import Any


def run_request(request: dict[str, Any]) -> dict[str, Any]:
    """Run one smoke-test request; always returns a result document (ok false on failure)."""
    try:
        from dflash_tools.reference_engine.runner import run_request as run
    except ImportError as exc:
        from dflash_tools.errors import TORCH_INSTALL_HINT
        from dflash_tools.smoke_contract import failed_result

        missing = getattr(exc, "name", None) or str(exc)
        return dict(
            failed_result("torch", f"the torch engine needs {missing}, which is not installed: {TORCH_INSTALL_HINT}")
        )
    return run(request)
