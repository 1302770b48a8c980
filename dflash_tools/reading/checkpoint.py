"""The loaded-checkpoint type and the shard/index/config helpers that local and Hub reading share.

`LoadedCheckpoint` is everything the reading layer returns: the parsed config dict, the tensor
headers and the findings about the files themselves (DFT001, DFT003, DFT004, DFT005). Weights
are never read. This module sits below both `local` and `hub`, which fill it in.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from dflash_tools.errors import UsageError
from dflash_tools.findings import Finding, make_finding
from dflash_tools.reading.json_hazards import (
    JsonRefused,
    hazard_findings,
    json_values_bound,
    loads_bounded,
    loads_tracking_duplicates,
)
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


def source_text(value: Any, name: str = "source") -> str:
    """A SOURCE given to the Python API as text: a `str`, or any `os.PathLike` (`pathlib.Path`)
    as its path. Anything else (None, a number, bytes, a list) raises UsageError naming the
    argument, as a bad option does on the command line."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, os.PathLike):
        path = os.fspath(value)
        if not isinstance(path, str):
            raise UsageError(f"{name} is a bytes path {path!r}", "pass the path as str or pathlib.Path")
        text = path
    else:
        raise UsageError(
            f"{name} is {_shown_argument(value)}, not a path or a name",
            "pass a folder or file (str or pathlib.Path), a Hub repo id or example:NAME",
        )
    if not text.strip() or "\x00" in text:
        raise UsageError(f"{name} is {text!r}, not a path or a name", "pass a folder, a Hub repo id or example:NAME")
    return text


def _shown_argument(value: Any) -> str:
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({type(value).__name__})"


def optional_text(value: Any, name: str) -> str | None:
    """A text argument of the Python API (a revision, a token): a `str` or None, else UsageError."""
    if value is None or isinstance(value, str):
        return value
    raise UsageError(f"{name} is {_shown_argument(value)}, not text", f"pass {name} as a str, or leave it out")


def optional_count(value: Any, name: str) -> int | None:
    """A count argument of the Python API (K, a block size): an int of at least 1 (not a bool,
    not beyond 64 bits, which no engine holds), or None; else UsageError naming it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**63 - 1:
        raise UsageError(f"{name} is {_shown_argument(value)}, not an integer of 1 or more", f"pass {name}=7, or None")
    return value


def optional_seconds(value: Any, name: str) -> float | None:
    """A timeout argument of the Python API: a finite number of seconds above 0, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise UsageError(f"{name} is {_shown_argument(value)}, not a number of seconds", f"pass {name}=10.0, or None")
    return float(value)


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


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in a few words ("a FIFO", "a folder")."""
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


class NotRegularFile(ValueError):
    """A path that names a folder, a FIFO, a device or a socket: reading it would hang or mean nothing."""


def read_small_file(path: Path | str, limit: int = MAX_JSON_BYTES) -> bytes:
    """A small file's bytes (a config, an index, a preset); raises OSError, NotRegularFile (a
    ValueError) for a folder, FIFO, device or socket, or ValueError when it is larger than `limit`.

    Opened without blocking and checked on its descriptor before a byte is read: opening a FIFO
    for reading waits for a writer forever, and a device never ends. A link is followed (the
    Hub cache is made of them); what it names must be a regular file too.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = file_kind(mode)
        raise NotRegularFile(kind if kind == "not a regular file" else f"not a regular file ({kind})")
    with os.fdopen(fd, "rb") as handle:
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
        return None, [make_finding("DFT001", f"{file} holds {refused}: not a config", f"restore {file}", file=file)]
    try:
        config, duplicates = loads_tracking_duplicates(text)
    except (ValueError, RecursionError) as exc:
        return None, [
            make_finding(
                "DFT001",
                f"{file} is not valid JSON: {exc}",
                f"restore {file} from the original checkpoint (or re-download it)",
                file=file,
            )
        ]
    if not isinstance(config, dict):
        return None, [
            make_finding(
                "DFT001",
                f"{file} holds a JSON {type(config).__name__}, not an object",
                f"restore {file}",
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


NO_WEIGHT_MAP = "has no weight_map object"


class IndexUnreadable(ValueError):
    """A shard index that is not a JSON object with a `weight_map` object; the message says why,
    as it follows the file's name ("cannot be read as JSON: ...", "has no weight_map object")."""


def index_document(data: bytes) -> dict[str, Any]:
    """The parsed shard index, an object whose `weight_map` is an object; raises IndexUnreadable.

    Within the limits of any JSON read from a checkpoint (values, nesting: `json_hazards`), so
    that garbage, bytes that are not UTF-8, a list, a 100,000-deep nesting or a file of a
    million empty lists is a reason, never an exception from the parser.
    """
    refused = too_many_values(data)
    if refused:
        raise IndexUnreadable(f"cannot be read: {refused}")
    try:
        index = loads_bounded(data, max_values=MAX_JSON_VALUES)
    except JsonRefused as exc:
        raise IndexUnreadable(f"cannot be read as JSON: {exc}") from None
    if not isinstance(index, dict):
        raise IndexUnreadable(f"holds a JSON {type(index).__name__}, not an object with a weight_map")
    if not isinstance(index.get("weight_map"), dict):
        raise IndexUnreadable(NO_WEIGHT_MAP)
    return index


def parse_index(data: bytes, loaded: LoadedCheckpoint, file: str = INDEX_NAME) -> dict[str, str] | None:
    """Validate index bytes (from disk or the Hub): a weight_map whose shard names stay inside the folder.

    Unsafe entries become DFT004 findings (at most MAX_ENTRY_FINDINGS of them, then one that
    counts the rest) and are kept in `loaded.unsafe_index_entries` for convert's refusal.
    """
    try:
        weight_map: dict[str, Any] = index_document(data)["weight_map"]
    except IndexUnreadable as exc:
        keys = ("weight_map",) if str(exc) == NO_WEIGHT_MAP else ()
        loaded.findings.append(make_finding("DFT004", f"{file} {exc}", "re-download the index", keys=keys, file=file))
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
