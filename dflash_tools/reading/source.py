"""Resolve SOURCE (local folder or file, `example:NAME`, Hub repo id) and read it.

The one entry point of the reading layer: it decides where SOURCE points and hands it to
`local` or `hub`, which both return a `checkpoint.LoadedCheckpoint`.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from dflash_tools.errors import SourceError
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    LoadedCheckpoint,
    is_offline,
    looks_like_repo_id,
    optional_seconds,
    optional_text,
    path_exists,
    source_text,
)
from dflash_tools.reading.local import examples_dir, list_examples, load_local

EXAMPLE_PREFIX = "example:"


def load_checkpoint(
    source: str | os.PathLike[str],
    *,
    revision: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
    folder_only: bool = False,
) -> LoadedCheckpoint:
    """Read a checkpoint's config and tensor headers from wherever `source` points.

    `folder_only` only words the error for a caller that needs a folder (convert, writing).

    Raises SourceError when the source cannot be found or reached; a source that exists but is
    broken comes back with findings instead. Arguments of the wrong type (the Python API's callers
    pass what they like) raise UsageError naming the argument.
    """
    source = source_text(source)
    revision, token = optional_text(revision, "revision"), optional_text(token, "token")
    timeout = optional_seconds(timeout, "timeout")
    if source.startswith(EXAMPLE_PREFIX):
        name = source[len(EXAMPLE_PREFIX) :]
        path = examples_dir() / name
        if not name or ".." in Path(name).parts or Path(name).is_absolute() or not (path / CONFIG_NAME).is_file():
            close = difflib.get_close_matches(name, list_examples(), n=2, cutoff=0.6)
            raise SourceError(
                f"no bundled example named {name!r}",
                (f"did you mean {' or '.join(EXAMPLE_PREFIX + c for c in close)}? " if close else "")
                + "`dflash-tools examples` lists them all",
            )
        loaded = load_local(path, source=source)
        loaded.kind = "example"
        return loaded
    path = Path(source).expanduser()
    if path_exists(path):
        if revision is not None:
            raise SourceError(
                f"--revision {revision} given for a local path {source}", "drop --revision for local folders"
            )
        return load_local(path, source=source)
    if looks_like_repo_id(source):
        from dflash_tools.reading.hub import load_hub_checkpoint

        try:
            return load_hub_checkpoint(source.removeprefix("hf://"), revision=revision, token=token, timeout=timeout)
        except SourceError as exc:
            raise _neither_local_nor_hub(source, revision, exc) from exc
    what = (
        "a checkpoint folder (a config.json only with --dry-run or --check)"
        if folder_only
        else "a checkpoint folder, a .safetensors or config.json file"
    )
    raise SourceError(
        f"{source}: no such file or folder, and not a Hugging Face repo id (owner/name)",
        f"pass {what}, a repo id like z-lab/Qwen3.8-27B-DFlash2, or example:zlab-dflash2 "
        "(`dflash-tools examples` lists them)",
    )


def _neither_local_nor_hub(source: str, revision: str | None, exc: SourceError) -> SourceError:
    """`checkpoints/my-draft` is shaped like a repo id: when it is neither a local folder nor a
    readable Hub repo, say both, and point at the local folder when its parent exists.

    Only when the Hub failure leaves open whether the repo exists (it does not, or the Hub could
    not be asked, or offline with nothing cached). A gated repo, a bad revision, an HTTP error
    on a file or a malformed answer are about a repo that is there, and keep their own message.
    """
    from dflash_tools.reading.hub.errors import HubSourceError

    absence = exc.absence if isinstance(exc, HubSourceError) else ""
    not_cached = is_offline() and "not in the local Hugging Face cache" in exc.message
    if revision is not None or source.startswith("hf://") or not (absence or not_cached):
        return exc
    reason = exc.message.split(": ", 1)[-1]
    if absence == "missing":
        message = f"{source}: no local folder {source}, and no Hub repo of that name ({reason})"
    else:
        message = (
            f"{source}: no local folder {source}, and the Hub could not be asked about a repo of that name ({reason})"
        )
    parent = Path(source).expanduser().parent
    if parent != Path() and parent.is_dir():
        try:
            entries = sorted(p.name for p in parent.iterdir() if p.is_dir())
        except OSError:
            entries = []
        close = difflib.get_close_matches(Path(source).name, entries, n=3, cutoff=0.5)
        if close:
            hint = "did you mean " + " or ".join(str(parent / name) for name in close) + "?"
        else:
            hint = f"{parent} exists locally but holds no {Path(source).name}: check the folder name"
        return SourceError(message, hint)  # a local path mistyped, not a repo the Hub was not asked about
    hint = f"check the local path; if it is a Hub repo id: {exc.hint}" if exc.hint else ""
    return HubSourceError(message, hint, absence=absence or "unreachable")


def hub_not_asked(source: str, exc: BaseException) -> str | None:
    """Why reading SOURCE failed, in a few words, when it failed only because the Hub could not
    be asked about it: HF_HUB_OFFLINE (or no connection, no answer within --timeout) with nothing
    in the local Hugging Face cache. None for anything else: a repo the Hub says does not exist,
    a local path (one whose parent folder exists here), a file that is there but broken. `plan`
    and `smoke-test --dry-run` go on without such a target and say what that leaves unchecked."""
    from huggingface_hub import constants

    from dflash_tools.reading.hub.errors import HubSourceError

    if not isinstance(exc, HubSourceError) or exc.absence != "unreachable":
        return None
    parent = Path(source).expanduser().parent
    if not source.startswith("hf://") and parent != Path() and parent.is_dir():
        return None
    cache = "the local Hugging Face cache does not hold it"
    if is_offline():
        return f"HF_HUB_OFFLINE is set and {cache}"
    return f"the Hub at {constants.ENDPOINT} could not be reached and {cache}"
