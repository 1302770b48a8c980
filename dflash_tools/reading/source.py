"""Resolve SOURCE (local folder or file, `example:NAME`, Hub repo id) and read it.

The one entry point of the reading layer: it decides where SOURCE points and hands it to
`local` or `hub`, which both return a `checkpoint.LoadedCheckpoint`.
"""

from __future__ import annotations

import re
from pathlib import Path

from dflash_tools.errors import SourceError
from dflash_tools.reading.checkpoint import CONFIG_NAME, LoadedCheckpoint, path_exists
from dflash_tools.reading.local import examples_dir, list_examples, load_local

EXAMPLE_PREFIX = "example:"
_REPO_ID = re.compile(r"^(hf://)?[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def looks_like_repo_id(source: str) -> bool:
    if not _REPO_ID.match(source):
        return False
    # The Hub's own rules (length, "--", "..", trailing "."): huggingface_hub raises on the rest.
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(source.removeprefix("hf://"))
    except HFValidationError:
        return False
    return True


def load_checkpoint(
    source: str,
    *,
    revision: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
) -> LoadedCheckpoint:
    """Read a checkpoint's config and tensor headers from wherever `source` points.

    Raises SourceError when the source cannot be found or reached; a source that exists but is
    broken comes back with findings instead.
    """
    if source.startswith(EXAMPLE_PREFIX):
        name = source[len(EXAMPLE_PREFIX) :]
        path = examples_dir() / name
        if not name or ".." in Path(name).parts or Path(name).is_absolute() or not (path / CONFIG_NAME).is_file():
            raise SourceError(
                f"no bundled example named {name!r}",
                "bundled examples: " + ", ".join(EXAMPLE_PREFIX + e for e in list_examples()),
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

        return load_hub_checkpoint(source.removeprefix("hf://"), revision=revision, token=token, timeout=timeout)
    raise SourceError(
        f"{source}: no such file or folder, and not a Hugging Face repo id (owner/name)",
        "pass a checkpoint folder, a .safetensors or config.json file, a repo id like z-lab/Qwen3.8-27B-DFlash2, "
        "or example:zlab-dflash2",
    )
