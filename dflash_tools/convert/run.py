"""`convert_checkpoint`: read, plan, then write to a new folder or in place, verify, and push.

The steps, each its own module: `plan` (decide what changes: `decide`, `translate`; tensor edits)
-> `build` (byte-preserving JSON edits via `json_edit`, shards via `repack`, in a staging folder)
-> `verify` -> `write` (publish, or swap in place) -> `hub_io` (download the source, push the result).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from dflash_tools.convert.build import planned_files, rewritable_index, rewrites_index
from dflash_tools.convert.hub_io import (
    commit_description,
    default_commit_message,
    local_checkpoint,
    push_folder,
    require_cached_weights,
)
from dflash_tools.convert.plan import follow_cache_links, plan_conversion
from dflash_tools.convert.result import ConvertResult
from dflash_tools.convert.write import (
    check_in_place,
    check_output,
    finish_interrupted_swap,
    require_folder,
    run_in_place,
    run_to_output,
)
from dflash_tools.draft.target import TargetDescription
from dflash_tools.errors import UsageError
from dflash_tools.files.atomic import LinkMode
from dflash_tools.files.hf_cache import is_in_hf_cache
from dflash_tools.files.locking import LOCK_MARK, folder_lock, writing_in_place, writing_output
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.reading.source import load_checkpoint


def _arguments(
    source: str | os.PathLike[str], output: str | os.PathLike[str] | None, link_mode: LinkMode | str
) -> tuple[str, str | None, LinkMode]:
    from dflash_tools.reading.checkpoint import source_text

    try:
        mode = LinkMode(link_mode)
    except ValueError:
        choices = ", ".join(mode.value for mode in LinkMode)
        raise UsageError(f"link_mode is {link_mode!r:.60}, not one of {choices}", "pass link_mode='auto'") from None
    return source_text(source), None if output is None else source_text(output, "output"), mode


def _flags(**flags: object) -> None:
    """The API's on/off arguments are bools: `backup="no"` is truthy and would keep backups."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise UsageError(
                f"{name} is {value!r:.60} ({type(value).__name__}), not True or False", f"pass {name}=True or False"
            )


def convert_checkpoint(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    *,
    in_place: bool = False,
    to: str | None = None,
    block_size: int | None = None,
    sample_from_anchor: bool | None = None,
    target: str | os.PathLike[str] | TargetDescription | None = None,
    force: bool = False,
    backup: bool = True,
    link_mode: LinkMode | str = LinkMode.AUTO,
    dry_run: bool = False,
    revision: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
    push_to_hub: str | None = None,
    create_pr: bool = True,
    commit_message: str | None = None,
    for_engines: list[str] | None = None,
    push_with_errors: bool = True,
) -> ConvertResult:
    """Convert `source` into `output` (a new folder), or rewrite it `in_place`.

    `dry_run` decides everything (including the refusals about the output) and writes nothing.
    With `push_to_hub`, the result is uploaded as a pull request (or a direct commit with
    `create_pr=False`). Raises UsageError for option mistakes and output locations that cannot
    be used, OperationError for refused conversions and failed verification or upload, and
    `files.locking.LockBusy` (a UsageError, exit 2) when another run is writing the folder or OUT.
    `push_with_errors=False` pushes nothing while the written checkpoint still has error findings
    (`ConvertResult.remaining_errors`; the CLI's default, `--allow-errors` lifts it).
    """
    with contextlib.ExitStack() as locks:
        # The Python API's arguments: paths as str or os.PathLike, anything else a UsageError.
        source, output, link_mode = _arguments(source, output, link_mode)
        _flags(
            in_place=in_place,
            force=force,
            backup=backup,
            dry_run=dry_run,
            create_pr=create_pr,
            push_with_errors=push_with_errors,
        )
        mode = LinkMode(link_mode)
        if in_place and output is not None:
            raise UsageError("--in-place and -o/--output exclude each other", "pass one of them")
        if not in_place and output is None and not dry_run:
            raise UsageError("no output given", "pass -o OUT (a new folder), --in-place, --dry-run or --check")
        source_dir = Path(source).expanduser().absolute()
        if not dry_run and source_dir.is_dir():
            # Held until the run ends: planning, writing and verifying see one state of the folder.
            if in_place:
                locks.enter_context(writing_in_place(source_dir, may_write_beside=not is_in_hf_cache(source_dir)))
            else:
                locks.enter_context(folder_lock(source_dir, exclusive=False))
        recovered = finish_interrupted_swap(Path(source)) if in_place and not dry_run else []
        loaded = follow_cache_links(
            load_checkpoint(source, revision=revision, token=token, timeout=timeout, folder_only=not dry_run)
        )
        if not dry_run:
            # A plan (--dry-run, --check) works on a lone config.json too; writing needs the folder.
            require_folder(loaded)
            require_cached_weights(loaded)
        plan = plan_conversion(
            loaded,
            to=to,
            block_size=block_size,
            sample_from_anchor=sample_from_anchor,
            target=target,
            force=force,
            token=token,
            timeout=timeout,
            for_engines=for_engines,
        )
        if loaded.local_dir is not None and rewrites_index(plan, loaded.local_dir):
            # Refused before OUT or its lock exists (a dry run too): the index must be rewritten.
            rewritable_index(loaded.local_dir)
        destination: Path | None
        if in_place:
            destination = check_in_place(loaded, plan, backup=backup, force=force)
        elif output is not None:
            destination = check_output(Path(output), loaded, force=force)
            if not dry_run:
                try:
                    locks.enter_context(writing_output(destination))
                except OSError as exc:
                    raise _unwritable(output, exc) from None
                # Checked again under the lock: another run may have written OUT meanwhile.
                destination = check_output(Path(output), loaded, force=force)
        else:
            destination = None
        run_mode = "dry-run" if dry_run else ("in-place" if in_place else "output")
        result = ConvertResult(plan=plan, mode=run_mode, output=destination)
        if recovered:
            result.notes.append(
                "finished an interrupted in-place conversion: shards "
                + ", ".join(recovered)
                + " took their final names"
            )
        if dry_run:
            if destination is not None and not in_place:
                placement = planned_placement(loaded, destination, mode)
                result.files = planned_files(plan, placement, to_output=True)
            else:
                result.files = planned_files(plan)
            return result
        if in_place and not plan.changed:
            result.notes.append("already normalized: nothing to write")
        else:
            assert destination is not None
            local = local_checkpoint(loaded, token=token, timeout=timeout)
            if in_place:
                run_in_place(plan, local, destination, result, backup=backup)
            else:
                if local.kind == "example" and mode is LinkMode.AUTO:
                    # Never tie a user's folder to files inside the installed package.
                    mode = LinkMode.COPY
                run_to_output(plan, local, destination, result, mode, force=force)
        if push_to_hub and not push_with_errors and result.remaining_errors:
            codes = ", ".join(sorted({f.code for f in result.remaining_errors}))
            result.notes.append(f"not pushed to {push_to_hub}: the written checkpoint still has errors ({codes})")
        elif push_to_hub:
            assert destination is not None
            result.push = push_folder(
                destination,
                push_to_hub,
                create_pr=create_pr,
                token=token,
                commit_message=commit_message or default_commit_message(plan),
                commit_description=commit_description(plan),
            )
        return result


def planned_placement(loaded: LoadedCheckpoint, destination: Path, mode: LinkMode) -> str:
    """The word a run to `destination` records for an unchanged file (`files.atomic.place_file`),
    so that a dry run says what the run will do: `auto` hard-links where the source and OUT share
    a file system and copies elsewhere, and copies a bundled example."""
    if mode is not LinkMode.AUTO:
        return mode.value
    if loaded.kind == "example":
        return LinkMode.COPY.value
    if loaded.kind != "local":
        return LinkMode.HARDLINK.value  # from the Hugging Face cache; a copy where it is elsewhere
    parent = destination.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:
        same = Path(loaded.location).stat().st_dev == parent.stat().st_dev
    except OSError:
        return LinkMode.HARDLINK.value
    return LinkMode.HARDLINK.value if same else LinkMode.COPY.value


def _unwritable(output: str | os.PathLike[str], exc: OSError) -> OSError:
    """The lock beside OUT could not be made: said with the user's -o path, not the lock file's
    hidden name (`.OUT.dflash-tools-lock`), and the folder in the way when it is not OUT's own."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    where = exc.filename
    if where is not None and not str(where).endswith(LOCK_MARK):
        reason += f" ({where})"
    return OSError(exc.errno, f"-o cannot be written there: {reason}", os.fspath(output))
