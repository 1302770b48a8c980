"""`inspect` as a library: read a checkpoint, describe it, derive its geometry, check it, report.

    report = inspect_checkpoint("example:zlab-dflash2", num_speculative_tokens=7)

`report` walks straight down the layers: `reading` → `dialects` → `draft` (geometry, tensors,
checks, target, profiles) → `InspectReport`. Imports: `reading`, `dialects`, `draft`.
"""

from dflash_tools.inspect.report import (
    SCHEMA_VERSION,
    InspectReport,
    cap_findings,
    describe,
    finish_findings,
    inspect_checkpoint,
    inspect_loaded,
)

__all__ = [
    "SCHEMA_VERSION",
    "InspectReport",
    "cap_findings",
    "describe",
    "finish_findings",
    "inspect_checkpoint",
    "inspect_loaded",
]
