"""The loaded-checkpoint type and the shard/index/config helpers that local and Hub reading share.

`LoadedCheckpoint` is everything the reading layer returns: the parsed config dict, the tensor
headers and the findings about the files themselves (DFT001, DFT003, DFT004, DFT005). Weights
are never read. This module sits below both `local` and `hub`, which fill it in.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from dflash_tools.draft.findings import Finding, make_finding
from dflash_tools.reading.json_hazards import hazard_findings, loads_tracking_duplicates
from dflash_tools.reading.safetensors_header import (
    SafetensorsHeaderError,
    ShardHeader,
    TensorHeader,
)

INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "config.json"
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
