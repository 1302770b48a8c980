"""Safetensors headers of Hub files through ranged GETs: the header bytes only, never the weights.

Bounds: one deadline (--timeout) per file for all of its range requests; at most
MAX_RANGE_REQUESTS requests per file; a header of at most MAX_REMOTE_HEADER_BYTES; at most
MAX_REMOTE_SHARDS files, and MAX_REMOTE_HEADER_TOTAL header bytes in all, per checkpoint (what is
parsed from them is what costs memory: about 10 bytes for each header byte).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from huggingface_hub import hf_hub_url
from huggingface_hub.errors import RemoteEntryNotFoundError

from dflash_tools.reading.checkpoint import LoadedCheckpoint, add_shard
from dflash_tools.reading.http import HttpIncomplete, HttpMalformed
from dflash_tools.reading.hub.errors import hub_errors
from dflash_tools.reading.hub.http import Deadline, request
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
# Largest header read over the network. A big model's shard header is a few hundred kilobytes;
# a corrupt length field must not turn a header read into a download of the weights, and a
# parsed header takes about ten times its size in memory.
MAX_REMOTE_HEADER_BYTES = 8 * 1024 * 1024
# Header bytes read over the network for one checkpoint, all files together.
MAX_REMOTE_HEADER_TOTAL = 32 * 1024 * 1024
# Files whose headers are read over the network for one checkpoint. A draft has one or two;
# the largest published models have a few hundred shards.
MAX_REMOTE_SHARDS = 512
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
    over_budget: bool = False  # not read: the checkpoint's header budget was spent


class HeaderBudget:
    """MAX_REMOTE_HEADER_TOTAL bytes of headers for one checkpoint, shared by the fetching threads."""

    def __init__(self, total: int | None = None) -> None:
        self.left = MAX_REMOTE_HEADER_TOTAL if total is None else total
        self._lock = threading.Lock()

    def take(self, count: int) -> bool:
        with self._lock:
            if count > self.left:
                self.left = 0
                return False
            self.left -= count
            return True


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


def fetch_headers(hub: HubRepo, pinned: str | None, names: list[str], *, missing_ok: bool) -> Iterator[Fetched]:
    """Fetch the headers of `names` (concurrently when there are several), yielded in order.

    Yielded one by one so that each raw header can be parsed and dropped before the next; the
    first failure stops the fetches still waiting.
    """
    budget = HeaderBudget()
    # Every file's first probe is reserved here, in the order of `names`, before a thread starts:
    # the files a spent budget leaves unread are then the last ones on every run, not whichever
    # thread lost a race (only a header longer than the probe takes more, as it arrives).
    probe_reserved = [budget.take(HEADER_PROBE_BYTES) for _ in names]

    def one(name: str, reserved: bool) -> Fetched:
        if not reserved:
            return Fetched(name, over_budget=True)
        with hub_errors(hub, name):
            try:
                return _fetch_header(hub, pinned, name, budget)
            except RemoteEntryNotFoundError:
                if not missing_ok:
                    raise
                return Fetched(name=name, missing=True)

    if len(names) <= 1:
        yield from (one(name, reserved) for name, reserved in zip(names, probe_reserved, strict=True))
        return
    pool = ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(names)))
    try:
        futures = [pool.submit(one, name, reserved) for name, reserved in zip(names, probe_reserved, strict=True)]
        for future in futures:
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _fetch_header(hub: HubRepo, pinned: str | None, name: str, budget: HeaderBudget) -> Fetched:
    """Ranged GETs until the 8-byte length and the whole JSON header have arrived, within one deadline."""
    url = hf_hub_url(hub.repo_id, name, revision=pinned)
    headers = hub.headers()
    deadline = Deadline(hub.timeout)
    buffer = bytearray()
    file_size: int | None = None
    needed: int | None = None
    received = 0  # the probe's HEADER_PROBE_BYTES were reserved by fetch_headers
    for _ in range(MAX_RANGE_REQUESTS):
        end = needed if needed is not None else HEADER_PROBE_BYTES
        chunk, size, got = _ranged_get(url, name, headers, len(buffer), end, deadline)
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
                return Fetched(name, bytes(buffer[:8]), file_size, received, error=exc)
            needed = 8 + length
            if needed > HEADER_PROBE_BYTES and not budget.take(needed - HEADER_PROBE_BYTES):
                return Fetched(name, received=received, over_budget=True)
            del buffer[needed:]
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
    raise HttpIncomplete(name, f"got {len(buffer)} of {needed if needed is not None else 8} header bytes")


def _ranged_get(
    url: str, name: str, headers: dict[str, str], start: int, end: int, deadline: Deadline
) -> tuple[bytes, int | None, int]:
    """Bytes [start, end) of the file at `url`: (data, total file size if known, bytes received).

    At most `end - start` bytes are kept: a server that ignores `Range` and answers 200 with the
    whole file costs no more than the header (the body is cut off there).
    """
    want = end - start
    request_headers = {**headers, "Range": f"bytes={start}-{end - 1}"}
    answer = request(
        url,
        what=name,
        headers=request_headers,
        deadline=deadline,
        limit=want,
        cut=True,
        accept=frozenset({416}),
        skip=start,
    )
    if answer.status == 416:
        match = _UNSATISFIED_RANGE.match(answer.headers.get("Content-Range", ""))
        return b"", int(match.group(1)) if match else start, 0
    if answer.status == 206:
        match = _CONTENT_RANGE.match(answer.headers.get("Content-Range", ""))
        if match is None or int(match.group(1)) != start:
            raise HttpIncomplete(
                name, f"unexpected Content-Range {answer.headers.get('Content-Range')!r} for bytes {start}-{end - 1}"
            )
        return answer.body, None if match.group(3) == "*" else int(match.group(3)), answer.received
    if answer.status != 200:
        raise HttpMalformed(name, f"HTTP {answer.status} to a range request")
    # 200: the server ignored the range and sent the file from byte 0 (`skip` dropped the start).
    total = None
    length = answer.headers.get("Content-Length")
    if length is not None and length.strip().isdigit() and len(length.strip()) <= 20:
        total = int(length)
    if answer.complete:
        total = answer.received  # the whole file went by
    return answer.body, total, answer.received
