"""Build the converted checkpoint in a staging folder: config and index rewritten, shards repacked or linked.

Only regular files of the checkpoint itself are carried over; nothing outside the staging folder
is written. `planned_files` is the same walk without writing (a dry run's answer).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from dflash_tools.convert.json_edit import dumps_like
from dflash_tools.convert.plan import ConvertPlan
from dflash_tools.convert.repack import plan_repack, rewrite_index, write_repacked
from dflash_tools.convert.result import ConvertResult, FileRecord
from dflash_tools.errors import OperationError
from dflash_tools.files.atomic import (
    LinkMode,
    atomic_write,
    atomic_write_text,
    contains,
    fsync_dir,
    pause_point,
    place_file,
)
from dflash_tools.files.hf_cache import is_in_hf_cache
from dflash_tools.findings import Finding, make_finding
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    INDEX_NAME,
    MAX_JSON_BYTES,
    IndexUnreadable,
    LoadedCheckpoint,
    index_document,
    path_exists,
    read_small_file,
    safe_shard_name,
    too_large_reason,
)


def planned_files(plan: ConvertPlan, placement: str = "link", *, to_output: bool = False) -> list[FileRecord]:
    """What a run would do with config.json, the index and every shard (a dry run's answer).

    `placement`: the word the run records for an unchanged file (`files.atomic.Placed.method`:
    "hardlink", "copy" or "symlink"; "link" where no output is named). `to_output`: the run
    writes OUT, where config.json is always written."""
    config = "write" if plan.config_changed or to_output else placement
    files = [FileRecord(CONFIG_NAME, config, len(plan.config_text.encode()))]
    edits = plan.edits
    if not edits.empty and plan.loaded.shards and len(plan.loaded.shards) > 1:
        files.append(FileRecord(INDEX_NAME, "write", 0, "weight_map updated"))
    for shard in plan.loaded.shards:
        size = shard.file_size or shard.data_start + sum(t.num_bytes for t in shard.tensors.values())
        if edits.touches(shard.tensors):
            kept = [n for n in shard.tensors if n not in edits.drop]
            if not kept:
                files.append(FileRecord(shard.file, "omit", 0, "every tensor dropped"))
                continue
            repack = plan_repack(shard, edits)
            files.append(FileRecord(shard.file, "repack", repack.data_bytes, f"{len(repack.dropped)} dropped"))
        else:
            files.append(FileRecord(shard.file, placement, size))
    return files


def _source_files(folder: Path) -> list[str]:
    """Relative paths of every file to carry over, hidden entries (.cache, .git, staging) excluded."""
    _refuse_escaping_index(folder)
    out: list[str] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(root) / name
            if path.is_symlink() and not path.exists():
                continue  # a dangling link carries nothing
            _refuse_unsafe_source_file(folder, path)
            out.append(path.relative_to(folder).as_posix())
    return out


class IndexRefused(OperationError):
    """The shard index must be rewritten (tensors dropped or renamed) but cannot be read: the
    DFT004 finding that names the file and why comes with it (JSON `error.findings`)."""

    def __init__(self, message: str, hint: str, findings: list[Finding]) -> None:
        super().__init__(message, hint)
        self.findings = findings


def rewrites_index(plan: ConvertPlan, folder: Path) -> bool:
    """Whether building from `folder` rewrites its shard index (tensors are dropped or renamed)."""
    return not plan.edits.empty and path_exists(folder / INDEX_NAME)


def rewritable_index(folder: Path) -> tuple[dict[str, Any], str]:
    """The shard index of `folder` (document and text) for a conversion that rewrites it.

    Read as inspect reads it (a regular file, at most 64 MiB, strict UTF-8, bounded values and
    nesting, an object with a weight_map object): anything else raises IndexRefused before a
    byte of the output is written.
    """
    path = folder / INDEX_NAME
    try:
        data = read_small_file(path)
        return index_document(data), data.decode("utf-8")
    except IndexUnreadable as exc:
        reason = str(exc)
    except (OSError, ValueError) as exc:  # not a regular file, too large, unreadable
        reason = f"cannot be read: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"
    hint = "restore the index (re-download it, or regenerate it from the shards), then run convert again"
    finding = make_finding("DFT004", f"{INDEX_NAME} {reason}", hint, file=INDEX_NAME)
    raise IndexRefused(
        f"{path} {reason}: convert drops or renames tensors and must rewrite the index to match", hint, [finding]
    )


def _refuse_escaping_index(folder: Path) -> None:
    """An index naming `../x` or `/abs` would make OUT load files from outside OUT: refuse it."""
    try:
        weight_map = index_document(read_small_file(folder / INDEX_NAME))["weight_map"]
    except (OSError, ValueError):
        # Absent, unreadable or not a regular file: inspect reports it, there is nothing to follow
        # (and `_source_files` refuses a FIFO or device by name).
        return
    for shard in weight_map.values():
        problem = safe_shard_name(shard)
        if problem:
            raise OperationError(
                f"{folder / INDEX_NAME}: {problem}: refusing to write an index that points outside the output",
                "fix the index so that every shard is a file inside the checkpoint folder",
            )


def _refuse_unsafe_source_file(folder: Path, path: Path) -> None:
    """Only regular files of the checkpoint itself are carried over.

    A device or FIFO would be read forever (a link to /dev/zero fills the disk), and a link out
    of the folder would carry any file of the user's into OUT and on to --push-to-hub. Links
    from a Hugging Face snapshot into its cache's blobs are what a snapshot is made of.
    """
    name = path.relative_to(folder).as_posix()
    if not path.is_file():
        raise OperationError(
            f"{folder / name} is not a regular file (a device, FIFO or socket): convert carries only regular files",
            "remove it from the checkpoint folder",
        )
    if name == INDEX_NAME and path.stat().st_size > MAX_JSON_BYTES:
        # An index is kilobytes; a sparse one claiming a terabyte would be copied whole.
        raise OperationError(
            f"{folder / name} is {too_large_reason(MAX_JSON_BYTES)}: not a shard index, and convert does not carry it",
            "restore the index (re-download it, or regenerate it from the shards)",
        )
    if path.is_symlink() and not contains(folder, path):
        target = Path(os.path.realpath(path))
        if not (is_in_hf_cache(folder) and (is_in_hf_cache(target) or _is_blob_of(folder, target))):
            raise OperationError(
                f"{folder / name} links outside the checkpoint folder (to {target}): refusing to carry it into the output",
                "replace the link with the file itself, or remove it",
            )


def _is_blob_of(snapshot: Path, target: Path) -> bool:
    """`target` is a blob of the cache repo that `snapshot` (…/snapshots/<commit>) belongs to.

    Cache layouts also live outside HF_HUB_CACHE (another cache dir, a copied cache), where the
    path pattern is the only evidence.
    """
    repo = Path(os.path.realpath(snapshot)).parent.parent
    return target.parent.name == "blobs" and target.parent.parent == repo


def file_mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def build_staged(
    plan: ConvertPlan, local: LoadedCheckpoint, stage: Path, mode: LinkMode, result: ConvertResult
) -> None:
    """Fill `stage` with the converted checkpoint (nothing outside it is written)."""
    assert local.local_dir is not None
    source_dir = local.local_dir
    edits = plan.edits
    shards = {s.file: s for s in local.shards}
    removed_bytes = sum(t.num_bytes for s in local.shards for n, t in s.tensors.items() if n in edits.drop)
    fallback_noted = False
    # Checked before any shard is repacked: a broken index refuses the run, not its last step.
    index = rewritable_index(source_dir) if rewrites_index(plan, source_dir) else None
    pause_point("staged")
    for relative in _source_files(source_dir):
        source = source_dir / relative
        target = stage / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if relative == CONFIG_NAME:
            atomic_write_text(target, plan.config_text, mode=file_mode(source))
            result.files.append(FileRecord(relative, "write", len(plan.config_text.encode())))
            pause_point("config-written")
            continue
        if relative == INDEX_NAME and index is not None:
            document, text = index
            new_text = dumps_like(rewrite_index(document, edits, removed_bytes), text)
            atomic_write_text(target, new_text, mode=file_mode(source))
            result.files.append(FileRecord(relative, "write", len(new_text.encode()), "weight_map updated"))
            continue
        shard = shards.get(relative)
        if shard is not None and edits.touches(shard.tensors):
            repack = plan_repack(shard, edits)
            if not repack.kept:
                result.files.append(FileRecord(relative, "omit", 0, "every tensor dropped"))
                continue

            def write(handle: Any, repack: Any = repack, source: Path = source) -> None:
                write_repacked(source, handle, repack, on_run=lambda index: pause_point("repacking"))

            atomic_write(target, write, mode=file_mode(source))
            detail = ", ".join(
                [f"dropped {n}" for n in repack.dropped] + [f"renamed {a} -> {b}" for a, b in repack.renamed]
            )
            result.files.append(FileRecord(relative, "repack", repack.data_bytes, detail))
            continue
        placed = place_file(source, target, mode)
        size = target.stat().st_size
        if placed.fallback_reason and not fallback_noted:
            fallback_noted = True
            result.notes.append(f"hard links are not possible here ({placed.fallback_reason}): files were copied")
        result.files.append(FileRecord(relative, placed.method, size))
    if CONFIG_NAME not in {f.path for f in result.files}:  # pragma: no cover - a source always has one
        atomic_write_text(stage / CONFIG_NAME, plan.config_text)
        result.files.append(FileRecord(CONFIG_NAME, "write", len(plan.config_text.encode())))
    fsync_dir(stage)
    pause_point("built")
