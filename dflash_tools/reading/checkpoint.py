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

from dflash_tools.findings import Finding, make_finding
from dflash_tools.reading.json_hazards import hazard_findings, json_values_bound, loads_tracking_duplicates
from dflash_tools.reading.safetensors_header import (
    SafetensorsHeaderError,
    ShardHeader,
    TensorHeader,
)

INDEX_NAME = "model.safetensors.index.json"
# Findings about single entries of one file (index entries, tensors) before one finding counts the rest.
MAX_ENTRY_FINDINGS = 50
CONFIG_NAME = "config.json"
# A config or index is kilobytes; a hostile (sparse) one may claim terabytes.
MAX_JSON_BYTES = 64 * 1024 * 1024
# Parsed JSON costs ~60-100 bytes of memory per value (an empty list: 64), so the byte cap alone
# lets 64 MiB of `[[],[],...]` take gigabytes. A real config holds a few hundred values (a list of
# a million layer ids still passes), an index one per tensor and two per entry.
MAX_JSON_VALUES = 2_000_000


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
    # Index entries naming files outside the checkpoint ("tensor 'x': shard name '../y' escapes ..."):
    # DFT004 findings for inspect, a refusal for convert before anything is downloaded or written.
    unsafe_index_entries: list[str] = field(default_factory=list)


def brief_names(names: list[str], shown: int = 5) -> str:
    """`a, b, c` or `a, b, c, d, e and 9,995 more`: a list that stays one readable line."""
    head = ", ".join(names[:shown])
    return head if len(names) <= shown else f"{head} and {len(names) - shown:,} more"


def path_exists(path: Path) -> bool:
    """Whether anything (even a dangling link) is at `path`; a name the OS refuses is nothing."""
    try:
        return path.exists() or path.is_symlink()
    except OSError:  # ENAMETOOLONG and friends, which pathlib does not swallow
        return False


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


def too_large_reason(limit: int) -> str:
    """How a file over `limit` is described, locally and on the Hub alike."""
    return f"larger than {limit // (1024 * 1024)} MiB"


def read_small_file(path: Path, limit: int = MAX_JSON_BYTES) -> bytes:
    """A JSON file's bytes; raises OSError, or ValueError when it is larger than `limit`."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(too_large_reason(limit))
    return data


def too_many_values(text: str | bytes) -> str | None:
    """Why a JSON text is refused before parsing (too many values to hold in memory), or None."""
    if json_values_bound(text) > MAX_JSON_VALUES:
        return f"more than {MAX_JSON_VALUES:,} JSON values"
    return None


def parse_config_text(text: str, file: str) -> tuple[dict[str, Any] | None, list[Finding]]:
    """Parse config.json text; problems become DFT001 findings."""
    refused = too_many_values(text)
    if refused:
        return None, [make_finding("DFT001", f"{file} holds {refused}: not a config", "restore config.json", file=file)]
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
    return config, hazard_findings(config, duplicates, file, text)


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
    if (
        name.isascii()
        and ".." not in name
        and "\\" not in name
        and "\x00" not in name
        and not name.startswith("/")
        and name[1:2] != ":"
    ):
        return None  # the common case, decided without building a path (an index may name 100,000)
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
    """Validate index bytes (from disk or the Hub): a weight_map whose shard names stay inside the folder.

    Unsafe entries become DFT004 findings (at most MAX_ENTRY_FINDINGS of them, then one that
    counts the rest) and are kept in `loaded.unsafe_index_entries` for convert's refusal.
    """
    refused = too_many_values(data)
    if refused:
        loaded.findings.append(
            make_finding("DFT004", f"{file} cannot be read: {refused}", "re-download the index", file=file)
        )
        return None
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
    unsafe = 0
    for tensor, shard in weight_map.items():
        problem = safe_shard_name(shard)
        if problem:
            unsafe += 1
            loaded.unsafe_index_entries.append(f"tensor {tensor!r}: {problem}")
            if unsafe <= MAX_ENTRY_FINDINGS:
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
    if unsafe > MAX_ENTRY_FINDINGS:
        loaded.findings.append(
            make_finding(
                "DFT004",
                f"{file}: {unsafe - MAX_ENTRY_FINDINGS:,} more entries name files outside the checkpoint folder",
                "the index must name files inside the checkpoint folder",
                file=file,
            )
        )
    return valid


def check_index_against_shards(loaded: LoadedCheckpoint, weight_map: dict[str, str], unreadable: set[str]) -> None:
    """Every indexed tensor must sit in the shard the index names, and every stored tensor be indexed."""
    read_files = {s.file for s in loaded.shards}
    misplaced = [
        (tensor, shard_name)
        for tensor, shard_name in weight_map.items()
        if shard_name in read_files
        and shard_name not in unreadable
        and (loaded.tensors.get(tensor) is None or loaded.tensors[tensor].file != shard_name)
    ]
    for tensor, shard_name in misplaced[:MAX_ENTRY_FINDINGS]:
        loaded.findings.append(
            make_finding(
                "DFT004",
                f"{INDEX_NAME} puts {tensor!r} in {shard_name}, but that shard does not hold it",
                "regenerate the index from the shards",
                keys=(tensor,),
                file=shard_name,
            )
        )
    if len(misplaced) > MAX_ENTRY_FINDINGS:
        loaded.findings.append(
            make_finding(
                "DFT004",
                f"{INDEX_NAME} puts {len(misplaced) - MAX_ENTRY_FINDINGS:,} more tensors in shards that do not hold them",
                "regenerate the index from the shards",
                file=INDEX_NAME,
            )
        )
    unlisted = [(name, header.file) for name, header in loaded.tensors.items() if name not in weight_map]
    for name, file in unlisted[:MAX_ENTRY_FINDINGS]:
        loaded.findings.append(
            make_finding(
                "DFT004",
                f"{file} holds {name!r}, which {INDEX_NAME} does not list (engines that follow the index never load it)",
                "regenerate the index from the shards",
                keys=(name,),
                file=file,
            )
        )
    if len(unlisted) > MAX_ENTRY_FINDINGS:
        loaded.findings.append(
            make_finding(
                "DFT004",
                f"{len(unlisted) - MAX_ENTRY_FINDINGS:,} more stored tensors are not listed in {INDEX_NAME}",
                "regenerate the index from the shards",
                file=INDEX_NAME,
            )
        )


def is_offline() -> bool:
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except Exception:  # pragma: no cover - huggingface_hub is a hard dependency
        return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")
