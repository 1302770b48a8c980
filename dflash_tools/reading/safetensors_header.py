"""Read and validate safetensors headers without touching tensor data.

`safetensors.safe_open` needs torch or numpy just to list shapes, and huggingface_hub's parser
does not check offsets against the file, so this module parses the format itself (8-byte
little-endian header length, JSON header, raw data) and validates every promise the format makes:
known dtypes, offsets inside the file, byte length = elements x dtype size, no overlaps, no holes.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The reference implementation refuses headers above 100 MB; a draft's header is kilobytes.
MAX_HEADER_BYTES = 100_000_000

# Size in bits, so sub-byte dtypes (F4, F6) are exact.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
FLOAT_DTYPES = frozenset({"F8_E5M2", "F8_E4M3", "F8_E8M0", "F16", "BF16", "F32", "F64", "F4", "F6_E2M3", "F6_E3M2"})


class SafetensorsHeaderError(ValueError):
    """The header of `file` breaks the safetensors format; `reason` says how."""

    def __init__(self, file: str, reason: str) -> None:
        super().__init__(f"{file}: {reason}")
        self.file = file
        self.reason = reason


@dataclass(frozen=True)
class TensorHeader:
    name: str
    dtype: str
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]
    file: str

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def num_bytes(self) -> int:
        return self.data_offsets[1] - self.data_offsets[0]

    @property
    def is_floating(self) -> bool:
        return self.dtype in FLOAT_DTYPES


@dataclass
class ShardHeader:
    """One safetensors file's header. `file` is the name as the checkpoint refers to it."""

    file: str
    tensors: dict[str, TensorHeader]
    metadata: dict[str, str] = field(default_factory=dict)
    header_length: int = 0
    file_size: int | None = None

    @property
    def data_start(self) -> int:
        return 8 + self.header_length


def expected_nbytes(dtype: str, shape: Iterable[int]) -> int:
    bits = DTYPE_BITS[dtype] * math.prod(shape)
    return (bits + 7) // 8


def read_header_length(prefix: bytes, file: str, file_size: int | None = None) -> int:
    if len(prefix) < 8:
        raise SafetensorsHeaderError(file, f"file is {len(prefix)} bytes, shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length == 0:
        raise SafetensorsHeaderError(file, "header length is 0")
    if length > MAX_HEADER_BYTES:
        raise SafetensorsHeaderError(file, f"header length {length} exceeds the {MAX_HEADER_BYTES}-byte limit")
    if file_size is not None and 8 + length > file_size:
        raise SafetensorsHeaderError(file, f"header length {length} runs past the end of the {file_size}-byte file")
    return int(length)


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _has_lone_surrogate(value: Any) -> bool:
    # Iterative: a hostile header may nest as deep as the JSON parser allows.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= char <= "\udfff" for char in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _is_nonneg_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_header(header_bytes: bytes, file: str, file_size: int | None = None) -> ShardHeader:
    """Validate a header's JSON (the bytes after the 8-byte length) and build its tensor table.

    `file_size`, when known, lets the data section be checked for holes and overruns; remote
    headers fetched by range request may not know it.
    """
    header_length = len(header_bytes)
    try:
        text = header_bytes.decode("utf-8")
        raw = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SafetensorsHeaderError(file, f"header is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise SafetensorsHeaderError(file, "header is not a JSON object")
    if "\\u" in text and _has_lone_surrogate(raw):
        # Python accepts "\ud800" escapes; the safetensors library (serde_json) refuses the file,
        # and such a name could not be written back as UTF-8.
        raise SafetensorsHeaderError(file, "header is not valid JSON (a lone UTF-16 surrogate escape)")

    metadata: dict[str, str] = {}
    tensors: dict[str, TensorHeader] = {}
    for name, entry in raw.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise SafetensorsHeaderError(file, "__metadata__ must map strings to strings")
            metadata = dict(entry)
            continue
        tensors[name] = _parse_entry(name, entry, file)

    data_size = None if file_size is None else file_size - 8 - header_length
    _check_layout(tensors, file, data_size)
    return ShardHeader(file=file, tensors=tensors, metadata=metadata, header_length=header_length, file_size=file_size)


def _parse_entry(name: str, entry: Any, file: str) -> TensorHeader:
    if not isinstance(entry, dict):
        raise SafetensorsHeaderError(file, f"tensor {name!r}: entry is not an object")
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise SafetensorsHeaderError(file, f"tensor {name!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_nonneg_int(d) for d in shape):
        raise SafetensorsHeaderError(file, f"tensor {name!r}: shape {shape!r} is not a list of non-negative ints")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_nonneg_int(o) for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise SafetensorsHeaderError(file, f"tensor {name!r}: data_offsets {offsets!r} are not [begin, end]")
    begin, end = offsets
    want = expected_nbytes(dtype, shape)
    if end - begin != want:
        raise SafetensorsHeaderError(
            file,
            f"tensor {name!r}: {dtype} {list(shape)} needs {want} bytes but data_offsets "
            f"[{begin}, {end}] span {end - begin}",
        )
    return TensorHeader(name=name, dtype=dtype, shape=tuple(shape), data_offsets=(begin, end), file=file)


def _check_layout(tensors: dict[str, TensorHeader], file: str, data_size: int | None) -> None:
    position = 0
    for tensor in sorted(tensors.values(), key=lambda t: t.data_offsets):
        begin, end = tensor.data_offsets
        if begin < position:
            raise SafetensorsHeaderError(file, f"tensor {tensor.name!r} overlaps the previous tensor at byte {begin}")
        if begin > position:
            raise SafetensorsHeaderError(
                file, f"hole of {begin - position} bytes in the data before tensor {tensor.name!r}"
            )
        position = end
    if data_size is not None:
        if position > data_size:
            raise SafetensorsHeaderError(
                file, f"tensor data ends at byte {position} but the file holds only {data_size} data bytes"
            )
        if position < data_size:
            raise SafetensorsHeaderError(file, f"{data_size - position} trailing bytes after the last tensor")


def read_local_header(path: Path, file: str | None = None) -> ShardHeader:
    """Read only the header of a local safetensors file (never its data)."""
    name = file or path.name
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            length = read_header_length(handle.read(8), name, size)
            header_bytes = handle.read(length)
    except OSError as exc:
        raise SafetensorsHeaderError(name, f"cannot read file ({exc.strerror or exc})") from None
    if len(header_bytes) != length:
        raise SafetensorsHeaderError(name, "file ends inside the header")
    return parse_header(header_bytes, name, size)


def encode_header(
    tensors: list[tuple[str, str, tuple[int, ...]]], metadata: dict[str, str] | None = None
) -> tuple[bytes, list[tuple[int, int]]]:
    """Lay out tensors contiguously in the given order; return the full header prefix and offsets.

    The header is padded with spaces to a multiple of 8 bytes, as the reference writer does, so
    data stays aligned.
    """
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offsets: list[tuple[int, int]] = []
    position = 0
    for name, dtype, shape in tensors:
        size = expected_nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [position, position + size]}
        offsets.append((position, position + size))
        position += size
    body = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    body += b" " * (-len(body) % 8)
    return struct.pack("<Q", len(body)) + body, offsets
