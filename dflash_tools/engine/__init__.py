"""The reference engine: DFlash / DFlash2 speculative decoding in plain PyTorch, CPU or GPU.

`run_request` implements the engine side of the smoke-test contract
(`dflash_tools.smoke.contract`). Importing this package does not import torch; the modules that
need it (`ops`, `draft`, `target`, `loop`, `runner`, `weights`) are loaded on first use.
`demo` (numpy only) writes the tiny target + draft checkpoints of the no-network demo.

Imports: `inspect`, `draft`, `reading`, `testing` (the demo) and `smoke.contract` (the request and
result documents it shares with the vLLM engine); never the rest of `smoke`, nor `cli`.
"""

from __future__ import annotations

from typing import Any


def run_request(request: dict[str, Any]) -> dict[str, Any]:
    """Run one smoke-test request; always returns a result document (ok false on failure)."""
    try:
        from dflash_tools.engine.runner import run_request as run
    except ImportError as exc:
        from dflash_tools.smoke.contract import failed_result

        missing = getattr(exc, "name", None) or str(exc)
        return dict(
            failed_result(
                "torch", f"the torch engine needs {missing}, which is not installed: pip install 'dflash-tools[torch]'"
            )
        )
    return run(request)
