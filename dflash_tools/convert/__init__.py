"""`convert` as a library: normalize a draft checkpoint, or translate it between z-lab and speculators.

    plan = plan_conversion("./draft")                  # reads config + headers, writes nothing
    plan.changed, plan.diff(), plan.decisions
    result = convert_checkpoint("./draft", "./out")    # staged, verified, renamed into place

One module per step, in the order a conversion runs them:

- `decide`     what changes: the output geometry, and how each value was decided
- `translate`  cross-dialect refusals, rendering and the restore record
- `plan`       the edit plan (`ConvertPlan`): config text, decisions, tensor edits; writes nothing
- `json_edit`  byte-preserving JSON edits (config.json, the shard index)
- `repack`     streaming tensor repack (drops, renames) of a safetensors shard, no torch
- `build`      the converted checkpoint, built in a staging folder
- `verify`     inspect the staged output; refuse new errors
- `write`      destination checks, then publish the staged folder or swap files in place
- `hub_io`     download a Hub source, push the result
- `result`     what was done (`ConvertResult`, the JSON document)
- `run`        `convert_checkpoint`, which runs the steps

Imports: `inspect`, `dialects`, `draft`, `reading`, `files`, `errors`, `engine_rules` and `serving`
(`--for`: what each release reads of the written config), `plan` (the `--for` names, resolved as
plan's `--engine`). Modules here import each
other downward only (a step never imports a later one) and never this package's `__init__`.
"""

from dflash_tools.convert.build import planned_files
from dflash_tools.convert.decide import Decision, decide_geometry
from dflash_tools.convert.hub_io import commit_description, default_commit_message, push_folder
from dflash_tools.convert.plan import ConvertPlan, TensorChange, plan_conversion
from dflash_tools.convert.result import BACKUP_SUFFIX, SCHEMA_VERSION, ConvertResult, FileRecord, PushResult
from dflash_tools.convert.run import convert_checkpoint
from dflash_tools.convert.translate import RESTORE_KEY, TARGET_FAMILIES
from dflash_tools.convert.verify import VerificationFailed, new_error_findings
from dflash_tools.convert.write import atomic_write_bytes_from, finish_interrupted_swap
from dflash_tools.reading.local import load_following_links

__all__ = [
    "BACKUP_SUFFIX",
    "RESTORE_KEY",
    "SCHEMA_VERSION",
    "TARGET_FAMILIES",
    "ConvertPlan",
    "ConvertResult",
    "Decision",
    "FileRecord",
    "PushResult",
    "TensorChange",
    "VerificationFailed",
    "atomic_write_bytes_from",
    "commit_description",
    "convert_checkpoint",
    "decide_geometry",
    "default_commit_message",
    "finish_interrupted_swap",
    "load_following_links",
    "new_error_findings",
    "planned_files",
    "plan_conversion",
    "push_folder",
]
