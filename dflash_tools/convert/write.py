"""The staged, atomic write: check the destination, build beside it, verify, then publish or swap in.

To a new folder (`run_to_output`): the staging folder is renamed into place. In place
(`run_in_place`): only the changed files are swapped in, each atomically, with `NAME.bak` backups,
in an order that keeps every intermediate state a consistent checkpoint; a run killed between its
two index writes is finished by the next one (`finish_interrupted_swap`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dflash_tools.convert.build import build_staged, file_mode
from dflash_tools.convert.json_edit import dumps_like
from dflash_tools.convert.plan import ConvertPlan
from dflash_tools.convert.result import BACKUP_SUFFIX, ConvertResult, FileRecord
from dflash_tools.convert.verify import refuse_unverified, verify_staged
from dflash_tools.errors import OperationError, UsageError
from dflash_tools.files.atomic import (
    LinkMode,
    atomic_write_bytes,
    atomic_write_text,
    cleanup_on_error,
    contains,
    fsync_dir,
    is_empty_dir,
    make_staging_dir,
    pause_point,
    publish_dir,
    remove_tree,
)
from dflash_tools.files.hf_cache import is_in_hf_cache
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    INDEX_NAME,
    LoadedCheckpoint,
)


def require_folder(loaded: LoadedCheckpoint) -> None:
    if loaded.kind == "local" and not Path(loaded.location).is_dir():
        raise UsageError(
            f"{loaded.source}: convert works on a checkpoint folder, not a single file",
            "pass the folder that holds config.json and the weights",
        )


def check_output(output: Path, loaded: LoadedCheckpoint, *, force: bool) -> Path:
    destination = output.expanduser().absolute()
    if destination.is_symlink() or (destination.exists() and not destination.is_dir()):
        raise UsageError(f"{output}: exists and is not a folder", "pass a new folder name to -o")
    if is_in_hf_cache(destination):
        raise UsageError(
            f"{output} is inside the Hugging Face cache, which must never be written to",
            "pass an output folder outside the cache",
        )
    if loaded.local_dir is not None and loaded.kind != "hub":
        source_dir = loaded.local_dir
        if contains(source_dir, destination) or contains(destination, source_dir):
            raise UsageError(
                f"{output} is the source folder, inside it, or contains it",
                "pass an output folder beside the source, or use --in-place to rewrite the source itself",
            )
    if destination.is_dir() and not is_empty_dir(destination) and not force:
        raise UsageError(
            f"{output} exists and is not empty",
            "pass another -o folder, or --force to replace it (the old content is removed once the new one is complete)",
        )
    return destination


def check_in_place(loaded: LoadedCheckpoint, plan: ConvertPlan, *, backup: bool, force: bool) -> Path:
    if loaded.kind == "hub":
        raise UsageError(
            f"--in-place on Hub repo {loaded.source}: its files live in the Hugging Face cache, which must never be written to",
            "pass -o OUT to write a converted copy (and --push-to-hub to propose it upstream)",
        )
    if loaded.kind == "example" or loaded.local_dir is None:
        raise UsageError(
            f"--in-place on {loaded.source}: not a folder of yours", "pass -o OUT to write a converted copy"
        )
    folder = loaded.local_dir.absolute()
    if is_in_hf_cache(folder):
        raise UsageError(
            f"--in-place on {loaded.source}: it is inside the Hugging Face cache (files there are links into shared blobs)",
            "pass -o OUT to write a converted copy outside the cache",
        )
    if any(is_in_hf_cache(p) for p in folder.iterdir() if p.is_symlink()):
        raise UsageError(
            f"--in-place on {loaded.source}: its files are links into the Hugging Face cache",
            "pass -o OUT to write a converted copy",
        )
    if not os.access(folder, os.W_OK):
        raise UsageError(f"--in-place on {loaded.source}: the folder is not writable", "pass -o OUT instead")
    if backup and not force:
        for name in _files_replaced_in_place(plan):
            backup_path = folder / (name + BACKUP_SUFFIX)
            if backup_path.exists() or backup_path.is_symlink():
                raise UsageError(
                    f"{backup_path} already exists (a backup from an earlier run)",
                    "move it away, or pass --force to overwrite it (or --no-backup)",
                )
    return folder


def _files_replaced_in_place(plan: ConvertPlan) -> list[str]:
    names = [CONFIG_NAME] if plan.config_changed else []
    edited = sorted({c.file for c in plan.tensor_changes})
    names += edited
    if edited and plan.loaded.local_dir is not None and (plan.loaded.local_dir / INDEX_NAME).is_file():
        names.append(INDEX_NAME)
    return names


def run_to_output(
    plan: ConvertPlan, local: LoadedCheckpoint, destination: Path, result: ConvertResult, mode: LinkMode, *, force: bool
) -> None:
    stage = make_staging_dir(destination)
    with cleanup_on_error(stage):
        build_staged(plan, local, stage, mode, result)
        symlinked = {f.path for f in result.files if f.action == "symlink"}
        if symlinked:
            result.notes.append(
                "symlinked weights point outside OUT: `dflash-tools inspect` reports them as DFT004; "
                "use --link-mode hardlink or copy for a self-contained checkpoint"
            )
        after, new_errors = verify_staged(plan, stage, destination, symlinked)
        if new_errors:
            raise refuse_unverified(new_errors)
        pause_point("verified")
        if destination.is_dir() and not is_empty_dir(destination) and not force:
            raise UsageError(f"{destination} was filled by someone else meanwhile", "run again with another -o folder")
        publish_dir(stage, destination, replace_existing=force)
    pause_point("published")
    after.loaded.location = str(destination)
    result.after = after
    result.written = True


def run_in_place(
    plan: ConvertPlan, local: LoadedCheckpoint, folder: Path, result: ConvertResult, *, backup: bool
) -> None:
    """Build and verify beside the folder, then swap in only the changed files, atomically each.

    Every intermediate state is a consistent checkpoint. Weights change before config.json (the
    tensors convert drops are optional or unloadable ones, so the old config still describes the
    new weights). With a shard index, repacked shards first go in under temporary names that only
    the (atomically replaced) index points to, and take their real names back while both names
    hold the new bytes. Each replaced file keeps its original as `NAME.bak` (a hard link: no
    copy) unless `backup` is False.
    """
    stage = make_staging_dir(folder)
    with cleanup_on_error(stage):
        # Hard links make the verification copy free; the staged folder is removed at the end.
        build_staged(plan, local, stage, LinkMode.AUTO, result)
        after, new_errors = verify_staged(plan, stage, folder)
        if new_errors:
            raise refuse_unverified(new_errors)
        pause_point("verified")
        changed = [f for f in result.files if f.action in ("write", "repack", "omit")]
        if backup:
            for record in changed:
                result.backups.append(_backup(folder / record.path))
        pause_point("backed-up")
        shards = [f for f in changed if f.path.endswith(".safetensors")]
        index = next((f for f in changed if f.path == INDEX_NAME), None)
        config = next((f for f in changed if f.path == CONFIG_NAME), None)
        if index is not None and shards:
            _swap_indexed_shards(stage, folder, shards)
        else:
            for record in shards:
                _swap(stage, folder, record)
            pause_point("replaced")
            if index is not None:
                _swap(stage, folder, index)
        if config is not None:
            _swap(stage, folder, config)
        pause_point("config-replaced")
    remove_tree(stage)
    after.loaded.location = str(folder)
    result.after = after
    result.written = True
    result.files = [f for f in result.files if f.action in ("write", "repack", "omit")]


def _backup(target: Path) -> Path:
    backup_path = target.with_name(target.name + BACKUP_SUFFIX)
    if backup_path.exists() or backup_path.is_symlink():
        backup_path.unlink()
    try:
        os.link(target, backup_path)
    except OSError:
        atomic_write_bytes_from(target, backup_path)
    return backup_path


def _swap(stage: Path, folder: Path, record: FileRecord) -> None:
    target = folder / record.path
    if record.action == "omit":
        target.unlink()
    else:
        (stage / record.path).replace(target)
    fsync_dir(target.parent)


def _swap_indexed_shards(stage: Path, folder: Path, shards: list[FileRecord]) -> None:
    """Replace indexed shards so that the index always names files holding what it promises."""
    final_text = (stage / INDEX_NAME).read_text(encoding="utf-8")
    final = json.loads(final_text)
    temporary = {
        r.path: f"{Path(r.path).stem}.dflash-tools-new{Path(r.path).suffix}" for r in shards if r.action == "repack"
    }
    for name, temp in temporary.items():
        (stage / name).replace(folder / temp)
    fsync_dir(folder)
    interim = dict(final)
    weight_map = final.get("weight_map")
    if isinstance(weight_map, dict):
        interim["weight_map"] = {k: temporary.get(v, v) for k, v in weight_map.items()}
    # The commit point for the weights: from here on the index names only new shards.
    atomic_write_text(folder / INDEX_NAME, dumps_like(interim, final_text))
    pause_point("replaced")
    for name, temp in temporary.items():
        link = folder / f".{name}.dflash-tools-link"
        link.unlink(missing_ok=True)
        os.link(folder / temp, link)
        link.replace(folder / name)
    fsync_dir(folder)
    pause_point("renamed")
    atomic_write_text(folder / INDEX_NAME, final_text)
    for temp in temporary.values():
        (folder / temp).unlink()
    for record in shards:
        if record.action == "omit":
            (folder / record.path).unlink()
    fsync_dir(folder)


def finish_interrupted_swap(folder: Path) -> list[str]:
    """Complete an in-place shard swap that a killed run left between its two index writes.

    `_swap_indexed_shards` first points the index at `NAME.dflash-tools-new.safetensors`; a run
    killed before the final index write leaves a consistent checkpoint under interim names. The
    next in-place run gives those shards their real names back (the same steps, in the same
    order) before it plans anything. Returns the final names restored.
    """
    index_path = folder / INDEX_NAME
    if not folder.is_dir() or folder.is_symlink() or not index_path.is_file():
        return []
    try:
        text = index_path.read_text(encoding="utf-8")
        index = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return []
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        return []
    interim_mark = ".dflash-tools-new.safetensors"
    named = {
        value: value[: -len(interim_mark)] + ".safetensors"
        for value in set(weight_map.values())
        if isinstance(value, str) and value.endswith(interim_mark) and "/" not in value
    }
    final_names = {interim: final for interim, final in named.items() if (folder / interim).is_file()}
    # An interim name whose file is gone: the rename finished and only the final index write is
    # missing, if the final name holds a file; otherwise the folder cannot be repaired here.
    renamed = {interim: final for interim, final in named.items() if interim not in final_names}
    lost = sorted(interim for interim, final in renamed.items() if not (folder / final).is_file())
    if lost:
        raise OperationError(
            f"{folder} was left part way through an in-place conversion: {INDEX_NAME} names {', '.join(lost)}, "
            "which is missing",
            "restore the files from their .bak copies (or the original checkpoint), then run convert again",
        )
    if not named:
        _remove_swap_leftovers(folder, set(weight_map.values()))
        return []
    for interim, final in final_names.items():
        link = folder / f".{final}.dflash-tools-link"
        link.unlink(missing_ok=True)
        target = folder / final
        # Killed after the renames, both names are already one file (and rename() of a file
        # onto another link to itself does nothing, which would leave `link` behind).
        if target.exists() and (folder / interim).samefile(target):
            continue
        os.link(folder / interim, link)
        link.replace(target)
    fsync_dir(folder)
    index["weight_map"] = {k: named.get(v, v) for k, v in weight_map.items()}
    atomic_write_text(index_path, dumps_like(index, text))
    for interim in final_names:
        (folder / interim).unlink()
    fsync_dir(folder)
    _remove_swap_leftovers(folder, set(index["weight_map"].values()))
    return sorted(named.values())


def _remove_swap_leftovers(folder: Path, indexed: set[Any]) -> None:
    """Names only a killed swap leaves: interim shards the index no longer names, and link files."""
    for entry in folder.iterdir():
        name = entry.name
        interim = name.endswith(".dflash-tools-new.safetensors") and name not in indexed
        link = name.startswith(".") and name.endswith(".dflash-tools-link")
        if (interim or link) and (entry.is_file() or entry.is_symlink()):
            entry.unlink()


def atomic_write_bytes_from(source: Path, destination: Path) -> None:
    """A copy of `source` at `destination`, written atomically (the backup fallback)."""
    with open(source, "rb") as handle:
        data = handle.read()
    atomic_write_bytes(destination, data, mode=file_mode(source))
