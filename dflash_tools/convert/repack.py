"""Streaming safetensors repack: drop or rename tensors without loading them, and without torch.

A safetensors file is an 8-byte header length, a JSON header whose `data_offsets` are relative to
the data buffer, then the buffer. Renaming only rewrites the header; dropping a tensor removes its
bytes, so the kept tensors' offsets are recomputed (the format forbids holes) and their bytes are
copied range by range. Memory stays bounded by one copy buffer whatever the file size: the
kernel copies where it can (`copy_file_range`), else a fixed-size buffer is reused.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dflash_tools.reading.safetensors_header import ShardHeader

DEFAULT_BUFFER_BYTES = 8 * 1024 * 1024
# Header entries are padded with spaces to a multiple of 8 bytes, as the reference writer does.
_ALIGNMENT = 8


@dataclass(frozen=True)
class TensorEdits:
    """Tensors to leave out and tensors to rename, by their current names."""

    drop: frozenset[str] = frozenset()
    rename: Mapping[str, str] = field(default_factory=dict)

    def touches(self, names: Iterable[str]) -> bool:
        """Whether any of `names` is dropped or renamed."""
        return any(name in self.drop or name in self.rename for name in names)

    @property
    def empty(self) -> bool:
        return not self.drop and not self.rename


@dataclass(frozen=True)
class RepackPlan:
    """What one output shard will hold, and which byte ranges of the input make its buffer."""

    file: str
    prefix: bytes  # 8-byte length + padded JSON header
    runs: tuple[tuple[int, int], ...]  # (absolute offset in the input, length), in output order
    kept: tuple[str, ...]  # output names, header order
    dropped: tuple[str, ...]
    renamed: tuple[tuple[str, str], ...]
    data_bytes: int

    @property
    def size(self) -> int:
        return len(self.prefix) + self.data_bytes


def plan_repack(shard: ShardHeader, edits: TensorEdits) -> RepackPlan:
    """Lay out the output shard: header order kept, data order kept, no holes."""
    kept = [t for t in shard.tensors.values() if t.name not in edits.drop]
    in_data_order = sorted(kept, key=lambda t: t.data_offsets)
    new_offsets: dict[str, tuple[int, int]] = {}
    runs: list[tuple[int, int]] = []
    position = 0
    for tensor in in_data_order:
        begin, end = tensor.data_offsets
        size = end - begin
        new_offsets[tensor.name] = (position, position + size)
        source = shard.data_start + begin
        if runs and runs[-1][0] + runs[-1][1] == source:
            # Adjacent in the input too: one longer copy instead of many small ones.
            runs[-1] = (runs[-1][0], runs[-1][1] + size)
        elif size:
            runs.append((source, size))
        position += size
    header: dict[str, Any] = {}
    if shard.metadata:
        header["__metadata__"] = dict(shard.metadata)
    for tensor in kept:
        header[edits.rename.get(tensor.name, tensor.name)] = {
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "data_offsets": list(new_offsets[tensor.name]),
        }
    if len(header) - ("__metadata__" in header) != len(kept):
        raise ValueError(f"{shard.file}: renaming would give two tensors the same name")
    body = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    body += b" " * (-len(body) % _ALIGNMENT)
    return RepackPlan(
        file=shard.file,
        prefix=struct.pack("<Q", len(body)) + body,
        runs=tuple(runs),
        kept=tuple(edits.rename.get(t.name, t.name) for t in kept),
        dropped=tuple(t.name for t in shard.tensors.values() if t.name in edits.drop),
        renamed=tuple((t.name, edits.rename[t.name]) for t in kept if t.name in edits.rename),
        data_bytes=position,
    )


def copy_range(
    source: IO[bytes],
    destination: IO[bytes],
    offset: int,
    length: int,
    *,
    buffer: bytearray | None = None,
    kernel_copy: bool = True,
) -> int:
    """Append `length` bytes of `source` starting at `offset` to `destination`.

    `kernel_copy` lets the kernel move the bytes (`copy_file_range`: no user-space buffer, and a
    reflink on file systems that share extents); otherwise, or where the kernel refuses, one
    reusable buffer bounds the memory.
    """
    remaining = length
    position = offset
    if kernel_copy and hasattr(os, "copy_file_range"):
        destination.flush()
        src_fd, dst_fd = source.fileno(), destination.fileno()
        try:
            while remaining > 0:
                copied = os.copy_file_range(src_fd, dst_fd, remaining, position)
                if copied == 0:
                    break
                remaining -= copied
                position += copied
        except OSError:
            # Not supported between these files (e.g. across some file systems): buffered path.
            pass
        # The kernel moved the descriptor's position; bring the buffered writer in step with it.
        destination.seek(0, os.SEEK_END)
        if remaining == 0:
            return length
    view_buffer = buffer if buffer is not None else bytearray(DEFAULT_BUFFER_BYTES)
    view = memoryview(view_buffer)
    while remaining > 0:
        chunk = min(remaining, len(view))
        source.seek(position)
        got = source.readinto(view[:chunk])  # type: ignore[attr-defined]
        if not got:
            raise OSError(f"unexpected end of file at byte {position}")
        destination.write(view[:got])
        remaining -= got
        position += got
    return length


def write_repacked(
    source_path: Path,
    destination: IO[bytes],
    plan: RepackPlan,
    *,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    kernel_copy: bool = True,
    on_run: Callable[[int], None] | None = None,
) -> int:
    """Write the repacked shard to an open file; returns the data bytes copied."""
    copied = 0
    buffer = bytearray(buffer_bytes) if not kernel_copy else None
    with open(source_path, "rb") as source:
        destination.write(plan.prefix)
        for index, (offset, length) in enumerate(plan.runs):
            copied += copy_range(source, destination, offset, length, buffer=buffer, kernel_copy=kernel_copy)
            if on_run is not None:
                on_run(index)
    destination.flush()
    return copied


def repack_file(
    source_path: Path,
    destination_path: Path,
    shard: ShardHeader,
    edits: TensorEdits,
    *,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    kernel_copy: bool = True,
) -> RepackPlan:
    """Write a new file at `destination_path` (atomically) holding `shard` minus/renamed by `edits`."""
    from dflash_tools.files.atomic import atomic_write

    plan = plan_repack(shard, edits)
    atomic_write(
        destination_path,
        lambda handle: write_repacked(source_path, handle, plan, buffer_bytes=buffer_bytes, kernel_copy=kernel_copy),
    )
    return plan


def rewrite_index(index: dict[str, Any], edits: TensorEdits, removed_bytes: int) -> dict[str, Any]:
    """The shard index after `edits`: weight_map entries dropped or renamed, total_size updated.

    Key order is kept (renamed entries stay where they were).
    """
    out = dict(index)
    weight_map = index.get("weight_map")
    if isinstance(weight_map, dict):
        out["weight_map"] = {
            edits.rename.get(name, name): shard for name, shard in weight_map.items() if name not in edits.drop
        }
    metadata = index.get("metadata")
    if isinstance(metadata, dict) and removed_bytes:
        total = metadata.get("total_size")
        if isinstance(total, int) and not isinstance(total, bool):
            out["metadata"] = {**metadata, "total_size": total - removed_bytes}
    return out
