"""Safetensors headers of Hub files through ranged GET requests: the header bytes only, never the weights."""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from huggingface_hub import hf_hub_url
from huggingface_hub.errors import RemoteEntryNotFoundError
from huggingface_hub.utils import get_session, hf_raise_for_status

from dflash_tools.reading.checkpoint import (
    LoadedCheckpoint,
    add_shard,
)
from dflash_tools.reading.hub.errors import RESUMABLE, IncompleteResponse, hub_errors
from dflash_tools.reading.hub.session import HubRepo
from dflash_tools.reading.safetensors_header import (
    SafetensorsHeaderError,
    ShardHeader,
    parse_header,
    read_header_length,
)

# First ranged request per safetensors file. A draft's header is a few kilobytes (81 tensors
# for the largest DFlash2 draft), so one request almost always carries the whole header; a
# larger header costs exactly one more request for the remainder.
HEADER_PROBE_BYTES = 64 * 1024
# Largest header read over the network (huggingface_hub's own limit for remote headers): a
# corrupt length field must not turn a header read into a download of the weights.
MAX_REMOTE_HEADER_BYTES = 25_000_000
# Ranged requests per file before giving up on a server that keeps sending short bodies.
MAX_RANGE_REQUESTS = 64
# Shards are fetched concurrently, at most this many at a time.
MAX_WORKERS = 8
# At most 20 digits (a 64-bit size): int() refuses 4300+ digits, and a broken proxy may send them.
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d{1,20})-(\d{1,20})/(\d{1,20}|\*)\s*$", re.IGNORECASE)
_UNSATISFIED_RANGE = re.compile(r"^\s*bytes\s+\*/(\d{1,20})\s*$", re.IGNORECASE)


@dataclass
class Fetched:
    """The first bytes of one safetensors file: the 8-byte length and the JSON header."""

    name: str
    prefix: bytes = b""
    file_size: int | None = None
    received: int = 0
    error: SafetensorsHeaderError | None = None
    missing: bool = False


def add_fetched(loaded: LoadedCheckpoint, fetched: Fetched) -> None:
    before = loaded.bytes_read
    if fetched.error is not None:
        add_shard(loaded, _raiser(fetched.error))
    else:
        prefix, size, name = fetched.prefix, fetched.file_size, fetched.name
        add_shard(loaded, lambda: parse_header(prefix[8:], name, size))
    # add_shard counts the header; over the network what counts is what actually arrived.
    loaded.bytes_read = before + fetched.received


def _raiser(error: SafetensorsHeaderError) -> Callable[[], ShardHeader]:
    def read() -> ShardHeader:
        raise error

    return read


def fetch_headers(
    hub: HubRepo,
    pinned: str | None,
    names: list[str],
    sizes: dict[str, int | None],
    *,
    missing_ok: bool,
) -> list[Fetched]:
    """Fetch the headers of `names`, concurrently when there are several; results in order."""

    def one(name: str) -> Fetched:
        with hub_errors(hub, name):
            try:
                return _fetch_header(hub, pinned, name, sizes.get(name))
            except RemoteEntryNotFoundError:
                if not missing_ok:
                    raise
                return Fetched(name=name, missing=True)

    if len(names) <= 1:
        return [one(name) for name in names]
    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(names))) as pool:
        futures = [pool.submit(one, name) for name in names]
        return [future.result() for future in futures]


def _fetch_header(hub: HubRepo, pinned: str | None, name: str, listed_size: int | None) -> Fetched:
    """Ranged GETs until the 8-byte length and the whole JSON header have arrived."""
    url = hf_hub_url(hub.repo_id, name, revision=pinned)
    headers = hub.headers()
    buffer = bytearray()
    file_size = listed_size
    needed: int | None = None
    received = 0
    for _ in range(MAX_RANGE_REQUESTS):
        end = needed if needed is not None else HEADER_PROBE_BYTES
        chunk, size, got = _ranged_get(url, headers, len(buffer), end, hub.timeout)
        received += got
        if size is not None:
            file_size = size
        buffer += chunk
        if needed is None and len(buffer) >= 8:
            try:
                length = read_header_length(bytes(buffer[:8]), name, file_size)
                if length > MAX_REMOTE_HEADER_BYTES:
                    raise SafetensorsHeaderError(
                        name,
                        f"header length {length} exceeds the {MAX_REMOTE_HEADER_BYTES}-byte limit "
                        "for headers read over the network",
                    )
            except SafetensorsHeaderError as exc:
                return Fetched(name, bytes(buffer), file_size, received, error=exc)
            needed = 8 + length
        if needed is not None and len(buffer) >= needed:
            return Fetched(name, bytes(buffer[:needed]), file_size, received)
        if file_size is not None and len(buffer) >= file_size:
            break  # the file really ends here
        if not chunk:
            break  # no progress
    if file_size is not None and len(buffer) >= file_size and len(buffer) < 8:
        try:
            read_header_length(bytes(buffer), name, file_size)
        except SafetensorsHeaderError as exc:
            return Fetched(name, bytes(buffer), file_size, received, error=exc)
    raise IncompleteResponse(f"got {len(buffer)} of {needed if needed is not None else 8} header bytes")


def _ranged_get(
    url: str, headers: dict[str, str], start: int, end: int, timeout: float
) -> tuple[bytes, int | None, int]:
    """Bytes [start, end) of the file at `url`: (data, total file size if known, bytes received).

    The body is streamed and cut off once `end` is reached, so a server that ignores `Range`
    and answers 200 with the whole file costs no more than the header.
    """
    want = end - start
    request_headers = {**headers, "Range": f"bytes={start}-{end - 1}"}
    with get_session().stream("GET", url, headers=request_headers, timeout=timeout) as response:
        if response.status_code == 416:
            match = _UNSATISFIED_RANGE.match(response.headers.get("Content-Range", ""))
            return b"", int(match.group(1)) if match else start, 0
        hf_raise_for_status(response)
        total: int | None = None
        skip = 0
        if response.status_code == 206:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if match is None or int(match.group(1)) != start:
                raise IncompleteResponse(
                    f"unexpected Content-Range {response.headers.get('Content-Range')!r} for bytes {start}-{end - 1}"
                )
            if match.group(3) != "*":
                total = int(match.group(3))
        else:  # 200: the server ignored the range and sends the file from byte 0
            skip = start
            length = response.headers.get("Content-Length")
            if length is not None and length.isdigit() and "Content-Encoding" not in response.headers:
                total = int(length)
        data = bytearray()
        received = 0
        finished = False
        try:
            for chunk in response.iter_bytes():
                received += len(chunk)
                if skip:
                    dropped = min(skip, len(chunk))
                    chunk = chunk[dropped:]
                    skip -= dropped
                data += chunk
                if len(data) >= want:
                    break
            else:
                finished = True
        except RESUMABLE:
            pass  # keep what arrived; the caller asks for the rest
        if finished and response.status_code == 200:
            total = received  # the whole file went by
        return bytes(data[:want]), total, received
