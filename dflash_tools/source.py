"""Resolve a source (local folder, single file, bundled example, Hub repo) into config + headers.

This is the only layer that touches the file system or the network for reading. Everything it
returns is data: the parsed config dict, the tensor headers and the findings about the files
themselves (DFT001, DFT003, DFT004, DFT005). Weights are never read.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from dflash_tools.errors import SourceError
from dflash_tools.findings import Finding, make_finding
from dflash_tools.json_hazards import hazard_findings, loads_tracking_duplicates
from dflash_tools.safetensors_header import (
    SafetensorsHeaderError,
    ShardHeader,
    TensorHeader,
    read_local_header,
)

INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "config.json"
EXAMPLE_PREFIX = "example:"
_REPO_ID = re.compile(r"^(hf://)?[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")
# A config or index is kilobytes; a hostile (sparse) one may claim terabytes.
MAX_JSON_BYTES = 64 * 1024 * 1024


@dataclass
class LoadedCheckpoint:
    """Everything `inspect` knows about a source after reading config and headers."""

    source: str
    kind: str  # "local" | "hub" | "example"
    location: str  # resolved path, or repo id with revision
    config: dict[str, Any] | None
    config_text: str | None
    shards: list[ShardHeader] = field(default_factory=list)
    tensors: dict[str, TensorHeader] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    weights_inspected: bool = True
    local_dir: Path | None = None
    revision: str | None = None
    commit: str | None = None
    bytes_read: int = 0


def examples_dir() -> Path:
    return Path(__file__).parent / "examples"


def list_examples() -> list[str]:
    root = examples_dir()
    if not root.is_dir():
        return []
    # Only drafts: a folder with weights (the bundled targets have a config.json alone).
    return sorted(p.name for p in root.iterdir() if (p / CONFIG_NAME).is_file() and any(p.glob("*.safetensors")))


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


def path_exists(path: Path) -> bool:
    """Whether anything (even a dangling link) is at `path`; a name the OS refuses is nothing."""
    try:
        return path.exists() or path.is_symlink()
    except OSError:  # ENAMETOOLONG and friends, which pathlib does not swallow
        return False


def read_small_file(path: Path, limit: int = MAX_JSON_BYTES) -> bytes:
    """A JSON file's bytes; raises OSError, or ValueError when it is larger than `limit`."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit // (1024 * 1024)} MiB")
    return data


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
        from dflash_tools.hub import load_hub_checkpoint

        return load_hub_checkpoint(source.removeprefix("hf://"), revision=revision, token=token, timeout=timeout)
    raise SourceError(
        f"{source}: no such file or folder, and not a Hugging Face repo id (owner/name)",
        "pass a checkpoint folder, a .safetensors or config.json file, a repo id like z-lab/Qwen3.8-27B-DFlash2, "
        "or example:zlab-dflash2",
    )


def parse_config_text(text: str, file: str) -> tuple[dict[str, Any] | None, list[Finding]]:
    """Parse config.json text; problems become DFT001 findings."""
    try:
        config, duplicates = loads_tracking_duplicates(text)
    except (ValueError, RecursionError) as exc:
        return None, [
            make_finding(
                "DFT001",
                f"{file} is not valid JSON: {exc}",
                "restore config.json from the original checkpoint (or re-download it)",
                file=file,
            )
        ]
    if not isinstance(config, dict):
        return None, [
            make_finding(
                "DFT001",
                f"{file} holds a JSON {type(config).__name__}, not an object",
                "restore config.json",
                file=file,
            )
        ]
    return config, hazard_findings(config, duplicates, file)


def read_config_file(path: Path, file: str = CONFIG_NAME) -> tuple[dict[str, Any] | None, str | None, list[Finding]]:
    if not path.is_file():
        return (
            None,
            None,
            [
                make_finding(
                    "DFT001",
                    f"{file} is missing",
                    "a draft checkpoint needs its config.json next to the weights",
                    file=file,
                )
            ],
        )
    try:
        raw = read_small_file(path)
        text = raw.decode("utf-8")
    except OSError as exc:
        return None, None, [make_finding("DFT001", f"{file} cannot be read: {exc.strerror or exc}", file=file)]
    except UnicodeDecodeError as exc:
        return (
            None,
            None,
            [make_finding("DFT001", f"{file} is not UTF-8 text: {exc}", "restore config.json", file=file)],
        )
    except ValueError as exc:
        return None, None, [make_finding("DFT001", f"{file} is {exc}: not a config", "restore config.json", file=file)]
    config, findings = parse_config_text(text, file)
    return config, text, findings


def load_local(path: Path, *, source: str) -> LoadedCheckpoint:
    """A folder, a single .safetensors file (config.json beside it) or a config.json alone."""
    if not path.is_dir() and not path.is_file():
        raise SourceError(f"{source}: not a regular file or folder", "pass a checkpoint folder or file")
    if path.is_file() and path.suffix not in (".safetensors", ".json"):
        raise SourceError(
            f"{source}: expected a checkpoint folder, a .safetensors file or a config.json",
            "pass the folder that holds config.json and the weights",
        )
    folder = path if path.is_dir() else path.parent
    config_path = path if path.suffix == ".json" and path.is_file() else folder / CONFIG_NAME
    config, text, findings = read_config_file(config_path, config_path.name)
    loaded = LoadedCheckpoint(
        source=source,
        kind="local",
        location=str(path.resolve()),
        config=config,
        config_text=text,
        findings=findings,
        local_dir=folder,
    )
    if path.is_dir():
        read_local_weights(folder, loaded)
    elif path.suffix == ".safetensors":
        add_shard(loaded, lambda: read_local_header(path, path.name))
    else:
        loaded.weights_inspected = False
        loaded.findings.append(
            make_finding(
                "DFT005",
                f"{path.name} given alone: tensor shapes were not checked",
                "pass the checkpoint folder to check tensors too",
            )
        )
    return loaded


def add_shard(loaded: LoadedCheckpoint, read: Any) -> ShardHeader | None:
    """Run a header read; a broken header becomes DFT003 instead of an exception."""
    try:
        shard: ShardHeader = read()
    except SafetensorsHeaderError as exc:
        loaded.findings.append(
            make_finding(
                "DFT003",
                f"{exc.file}: {exc.reason}",
                "the file is damaged or truncated: re-download or re-save it",
                file=exc.file,
            )
        )
        return None
    loaded.shards.append(shard)
    loaded.bytes_read += 8 + shard.header_length
    for name, tensor in shard.tensors.items():
        if name in loaded.tensors:
            loaded.findings.append(
                make_finding(
                    "DFT003",
                    f"tensor {name!r} is stored twice: in {loaded.tensors[name].file} and {shard.file}",
                    "keep one copy (engines pick one arbitrarily)",
                    keys=(name,),
                    file=shard.file,
                )
            )
            continue
        loaded.tensors[name] = tensor
    return shard


def safe_shard_name(name: Any) -> str | None:
    """The reason a shard name from an index is unsafe, or None when it is fine."""
    if not isinstance(name, str) or not name:
        return f"shard name {name!r} is not a file name"
    # A lone surrogate (a legal JSON escape) cannot be encoded as a file name at all.
    if "\x00" in name or "\\" in name or any("\ud800" <= char <= "\udfff" for char in name):
        return f"shard name {name!r} has forbidden characters"
    pure = PurePosixPath(name)
    if pure.is_absolute() or re.match(r"^[A-Za-z]:", name):
        return f"shard name {name!r} is an absolute path"
    if ".." in pure.parts:
        return f"shard name {name!r} escapes the checkpoint folder"
    return None


def read_index(folder: Path, loaded: LoadedCheckpoint, file: str = INDEX_NAME) -> dict[str, str] | None:
    """The weight map of a local shard index, validated; problems become DFT004 findings."""
    try:
        data = read_small_file(folder / file)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        loaded.findings.append(
            make_finding("DFT004", f"{file} cannot be read: {reason}", "re-download the index", file=file)
        )
        return None
    return parse_index(data, loaded, file)


def parse_index(data: bytes, loaded: LoadedCheckpoint, file: str = INDEX_NAME) -> dict[str, str] | None:
    """Validate index bytes (from disk or the Hub): a weight_map whose shard names stay inside the folder."""
    try:
        index = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        loaded.findings.append(
            make_finding("DFT004", f"{file} cannot be read as JSON: {exc}", "re-download the index", file=file)
        )
        return None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        loaded.findings.append(
            make_finding(
                "DFT004", f"{file} has no weight_map object", "re-download the index", keys=("weight_map",), file=file
            )
        )
        return None
    valid: dict[str, str] = {}
    for tensor, shard in weight_map.items():
        problem = safe_shard_name(shard)
        if problem:
            loaded.findings.append(
                make_finding(
                    "DFT004",
                    f"{file}: tensor {tensor!r}: {problem}",
                    "the index must name files inside the checkpoint folder",
                    keys=(tensor,),
                    file=file,
                )
            )
            continue
        valid[tensor] = shard
    return valid


def _is_regular_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a name longer than the file system allows
        return False


def _inside(folder: Path, candidate: Path) -> bool:
    """Whether `candidate` stays in the checkpoint: in the folder, or in its Hub cache blob store.

    A Hugging Face cache snapshot (`models--org--name/snapshots/<commit>/`) holds links into the
    repo's own `blobs/` folder; those are the checkpoint's files, not an escape.
    """
    try:
        resolved = candidate.resolve()
        root = folder.resolve()
    except (OSError, RuntimeError):
        return False
    if resolved.is_relative_to(root):
        return True
    if root.parent.name == "snapshots":
        return resolved.is_relative_to(root.parent.parent / "blobs")
    return False


def read_local_weights(folder: Path, loaded: LoadedCheckpoint) -> None:
    index_path = folder / INDEX_NAME
    if index_path.is_file():
        weight_map = read_index(folder, loaded)
        if weight_map is None:
            # The index is unusable (already a DFT004); the shards themselves can still be checked.
            _read_all_shards(folder, loaded)
            return
        shard_names = sorted(set(weight_map.values()))
        reported: set[str] = set()
        for shard_name in shard_names:
            shard_path = folder / shard_name
            if not _inside(folder, shard_path):
                loaded.findings.append(
                    make_finding(
                        "DFT004",
                        f"{INDEX_NAME} names {shard_name}, which resolves outside the checkpoint folder",
                        "replace the link with the real file",
                        file=shard_name,
                    )
                )
                reported.add(shard_name)
                continue
            if not _is_regular_file(shard_path):
                what = "is not a regular file" if path_exists(shard_path) else "does not exist"
                loaded.findings.append(
                    make_finding(
                        "DFT004",
                        f"{INDEX_NAME} names {shard_name}, which {what}",
                        "download the missing shard",
                        file=shard_name,
                    )
                )
                reported.add(shard_name)
                continue
            add_shard(loaded, lambda p=shard_path, n=shard_name: read_local_header(p, n))
        check_index_against_shards(loaded, weight_map, reported)
        return
    _read_all_shards(folder, loaded)


def _read_all_shards(folder: Path, loaded: LoadedCheckpoint) -> None:
    files = []
    for path in sorted(folder.glob("*.safetensors")):
        if _is_regular_file(path):
            files.append(path)
        else:  # a folder, a device or FIFO (reading would never end), or a broken link
            loaded.findings.append(
                make_finding(
                    "DFT004",
                    f"{path.name} is not a regular file: not read",
                    "replace it with the real file",
                    file=path.name,
                )
            )
    if not files:
        loaded.weights_inspected = False
        loaded.findings.append(
            make_finding(
                "DFT005", f"no *.safetensors files in {folder}", "download the weights to check tensor shapes too"
            )
        )
        return
    for path in files:
        if not _inside(folder, path):
            loaded.findings.append(
                make_finding(
                    "DFT004",
                    f"{path.name} links outside the checkpoint folder",
                    "replace the link with the real file",
                    file=path.name,
                )
            )
            continue
        add_shard(loaded, lambda p=path: read_local_header(p, p.name))


def check_index_against_shards(loaded: LoadedCheckpoint, weight_map: dict[str, str], unreadable: set[str]) -> None:
    """Every indexed tensor must sit in the shard the index names, and every stored tensor be indexed."""
    read_files = {s.file for s in loaded.shards}
    for tensor, shard_name in weight_map.items():
        if shard_name not in read_files or shard_name in unreadable:
            continue
        found = loaded.tensors.get(tensor)
        if found is None or found.file != shard_name:
            loaded.findings.append(
                make_finding(
                    "DFT004",
                    f"{INDEX_NAME} puts {tensor!r} in {shard_name}, but that shard does not hold it",
                    "regenerate the index from the shards",
                    keys=(tensor,),
                    file=shard_name,
                )
            )
    for name, tensor_header in loaded.tensors.items():
        if name not in weight_map:
            loaded.findings.append(
                make_finding(
                    "DFT004",
                    f"{tensor_header.file} holds {name!r}, which {INDEX_NAME} does not list (engines that follow the index never load it)",
                    "regenerate the index from the shards",
                    keys=(name,),
                    file=tensor_header.file,
                )
            )


def is_offline() -> bool:
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except Exception:  # pragma: no cover - huggingface_hub is a hard dependency
        return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")
