"""Child-process entry: `python -m dflash_tools.smoke.child --request REQ --result RES`.

Reads one request (see `contract`), runs it on the engine it names, writes one result. Whatever
happens, a result file is written unless the process itself dies: errors become `ok: false`
results with a one-line message (the traceback goes to the log, which is this process's stderr).
Exit status: 0 when the result is ok, 1 when not, 2 when the request itself is unusable.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any, cast

from dflash_tools import smoke_contract as contract
from dflash_tools.errors import TORCH_INSTALL_HINT
from dflash_tools.smoke_contract import progress


def _write(path: Path, document: Any) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    partial.replace(path)


def run(request: contract.SmokeRequest, work_dir: Path) -> contract.SmokeResult:
    engine = request["engine"]
    if engine == "vllm":
        from dflash_tools.smoke.vllm_engine import run_request as run_vllm

        return run_vllm(request, work_dir=work_dir)
    try:
        from dflash_tools.reference_engine import run_request as run_torch
    except ImportError as exc:
        return contract.failed_result(
            engine,
            f"the torch reference engine is not available ({exc}); {TORCH_INSTALL_HINT}",
        )
    # The reference engine speaks the same contract; validation happens in main().
    return cast(contract.SmokeResult, run_torch(dict(request)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflash_tools.smoke.child", description=__doc__)
    parser.add_argument("--request", required=True, type=Path, help="request JSON file")
    parser.add_argument("--result", required=True, type=Path, help="where to write the result JSON")
    args = parser.parse_args(argv)

    engine = "unknown"
    try:
        document = json.loads(args.request.read_text(encoding="utf-8"))
        if isinstance(document, dict) and isinstance(document.get("engine"), str):
            engine = document["engine"]
        request = contract.validate_request(document)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        message = f"request {args.request}: {exc}"
        print(message, file=sys.stderr)
        _write(args.result, contract.failed_result(engine, message))
        return 2

    progress(f"engine {engine}: {request.get('label', request['draft'])}")
    try:
        result = run(request, args.result.parent)
        result = contract.validate_result(result)
    except contract.ContractError as exc:
        traceback.print_exc()
        result = contract.failed_result(engine, f"the {engine} engine returned an invalid result: {exc}")
    except Exception as exc:
        traceback.print_exc()
        text = str(exc).strip().splitlines()
        result = contract.failed_result(engine, f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": "))
    except KeyboardInterrupt:
        result = contract.failed_result(engine, "interrupted")
    _write(args.result, result)
    progress("done" if result["ok"] else f"failed: {result['error']}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
