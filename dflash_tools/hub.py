"""Read a draft checkpoint's config and safetensors headers from the Hugging Face Hub.

Only metadata crosses the network:

- `config.json` and `model.safetensors.index.json` through `hf_hub_download`, which keeps them
  in the Hub cache (so a later offline run finds them). This module only ever *reads* the cache.
- the header of every safetensors file through ranged GET requests sent on huggingface_hub's
  own HTTP session (same auth, proxy, offline switch and user agent). The raw header bytes go
  through our own `parse_header`, with the real file size taken from `Content-Range`, so the
  DFT003 layout checks (holes, overlaps, overruns) apply to remote files exactly as to local
  ones. huggingface_hub's `parse_safetensors_file_metadata` returns parsed tensors only and
  cannot tell a truncated file from a healthy one, hence the raw fetch.

Weights are never downloaded: a response that ignores the `Range` header is streamed and cut
off as soon as the header has arrived.

Offline (`HF_HUB_OFFLINE=1`, or the Hub unreachable) only the local Hub cache is used: the
cached config, and the headers of whichever shards happen to be cached, read in place.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from huggingface_hub import constants, hf_hub_download, hf_hub_url, try_to_load_from_cache
from huggingface_hub.errors import (
    DisabledRepoError,
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    IncompleteSnapshotError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status, httpx

from dflash_tools.errors import SourceError
from dflash_tools.findings import make_finding
from dflash_tools.safetensors_header import (
    SafetensorsHeaderError,
    ShardHeader,
    parse_header,
    read_header_length,
    read_local_header,
)
from dflash_tools.source import (
    CONFIG_NAME,
    INDEX_NAME,
    LoadedCheckpoint,
    add_shard,
    check_index_against_shards,
    is_offline,
    parse_config_text,
    parse_index,
)

if TYPE_CHECKING:
    from huggingface_hub import HfApi, ModelInfo

LIBRARY_NAME = "dflash-tools"

# First ranged request per safetensors file. A draft's header is a few kilobytes (81 tensors
# for the largest DFlash2 draft), so one request almost always carries the whole header; a
# larger header costs exactly one more request for the remainder.
HEADER_PROBE_BYTES = 64 * 1024

# Largest header read over the network (huggingface_hub's own limit for remote headers): a
# corrupt length field must not turn a header read into a download of the weights.
MAX_REMOTE_HEADER_BYTES = 25_000_000

# Ranged requests per file before giving up on a server that keeps sending short bodies.
MAX_RANGE_REQUESTS = 64

# config.json / index fetched without the cache (cache not writable) are read up to this size.
MAX_JSON_BYTES = 64 * 1024 * 1024

# Shards are fetched concurrently, at most this many at a time.
MAX_WORKERS = 8

_COMMIT_HASH = re.compile(r"^[0-9a-f]{40}$")
# At most 20 digits (a 64-bit size): int() refuses 4300+ digits, and a broken proxy may send them.
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d{1,20})-(\d{1,20})/(\d{1,20}|\*)\s*$", re.IGNORECASE)
_UNSATISFIED_RANGE = re.compile(r"^\s*bytes\s+\*/(\d{1,20})\s*$", re.IGNORECASE)

# A body that stops early (connection closed, reset) is resumed with a new range request.
_RESUMABLE = (httpx.RemoteProtocolError, httpx.ReadError)
# Failures that mean "the Hub cannot be reached" rather than "the Hub said no".
_UNREACHABLE = (httpx.TransportError, ConnectionError, TimeoutError)
# Everything huggingface_hub (or the HTTP layer under it) raises for a remote problem.
_HUB_ERRORS = (
    HfHubHTTPError,
    EntryNotFoundError,
    httpx.HTTPError,
    ConnectionError,
    TimeoutError,
)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def load_hub_checkpoint(
    repo_id: str,
    *,
    revision: str | None,
    token: str | None,
    timeout: float | None,
) -> LoadedCheckpoint:
    """Read config.json and every safetensors header of a Hub repo (never the weights).

    `location` is `repo_id@revision`; `commit` is the commit the revision resolved to.
    `bytes_read` counts the bytes received from safetensors files (header ranges). Raises
    SourceError when the repo cannot be found or reached; a repo that exists but is broken
    comes back with findings (DFT001, DFT003, DFT004, DFT005).
    """
    hub = _Hub(repo_id, revision, token, _effective_timeout(timeout))
    if is_offline():
        return _load_from_cache(hub, unreachable=None)
    try:
        info = _model_info(hub)
    except OfflineModeIsEnabled:
        return _load_from_cache(hub, unreachable=None)
    except _HUB_ERRORS as exc:
        if not _is_unreachable(exc):
            raise _to_source_error(exc, hub, "the repo info") from exc
        try:
            return _load_from_cache(hub, unreachable=exc)
        except SourceError:
            raise _to_source_error(exc, hub, "the repo info") from exc
    return _load_online(hub, info)


def load_hub_config(
    repo_id: str,
    *,
    revision: str | None,
    token: str | None,
    timeout: float | None,
) -> tuple[dict[str, Any], str]:
    """The parsed config.json of a (target) model repo, and a `repo@revision` location.

    Here a missing or invalid config is a SourceError: the caller cannot go on without it.
    Multimodal configs are returned as they are (the caller picks `text_config`).
    """
    hub = _Hub(repo_id, revision, token, _effective_timeout(timeout))
    data: bytes | None
    if is_offline():
        data = _cached_config(hub, "HF_HUB_OFFLINE is set")
    else:
        # Resolve the commit first (one request, no retries): hf_hub_download alone would spend
        # ~25 s in its own retry loop before admitting that the Hub is unreachable.
        try:
            info = _model_info(hub, files_metadata=False)
        except OfflineModeIsEnabled:
            data = _cached_config(hub, "HF_HUB_OFFLINE is set")
        except _HUB_ERRORS as exc:
            if not _is_unreachable(exc):
                raise _to_source_error(exc, hub, "the repo info") from exc
            try:
                data = _cached_config(hub, "the Hub is unreachable")
            except SourceError:
                raise _to_source_error(exc, hub, "the repo info") from exc
        else:
            listing = None if info.siblings is None else {s.rfilename for s in info.siblings}
            data = None
            if listing is None or CONFIG_NAME in listing:
                with _hub_errors(hub, CONFIG_NAME):
                    data = _download_small_file(hub, CONFIG_NAME, info.sha)
    if data is None:
        raise SourceError(
            f"{hub.label} has no {CONFIG_NAME}",
            "pass the repo id of the model itself (the one holding config.json), or check --revision",
        )
    name = f"{repo_id}/{CONFIG_NAME}"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{name} is not UTF-8 text: {exc}", "check the repo on the Hub") from None
    config, findings = parse_config_text(text, name)
    if config is None:
        message = findings[0].message if findings else f"{name} cannot be parsed"
        raise SourceError(_one_line(message), "check the repo on the Hub")
    return config, hub.label


def list_hub_models(
    author: str | None,
    search: str | None,
    *,
    token: str | None,
    limit: int = 200,
) -> list[str]:
    """Repo ids of the Hub models matching `author` and `search` (at most `limit`)."""
    filters = [f"author={author}" if author else "", f"search={search}" if search else ""]
    subject = " ".join(part for part in filters if part) or "all models"
    if limit < 1:
        return []
    if is_offline():
        raise SourceError(
            f"listing Hub models ({subject}) needs the network, but HF_HUB_OFFLINE is set",
            "unset HF_HUB_OFFLINE, or pass the repo ids you have cached",
        )
    hub = _Hub(subject, None, token, _effective_timeout(None))
    try:
        models = _api(token).list_models(author=author, search=search, limit=limit, token=token)
        return [model.id for model in models]
    except _HUB_ERRORS as exc:
        raise _to_source_error(exc, hub, "the model list", listing=True) from exc


def is_in_hf_cache(path: Path) -> bool:
    """Whether writing to `path` could touch the Hugging Face Hub cache.

    True when the path (as given or fully resolved) lies under HF_HUB_CACHE, when it lies in a
    cache snapshot (`models--*/snapshots/<commit>/...` with `blobs/` beside `snapshots/`), when it
    is a symlink into such a repo's `blobs/`, or when it is a folder whose direct entries are such
    symlinks (a snapshot copied elsewhere: writing through its links would corrupt the shared blobs).
    Decided by the cache's real layout, never by one folder's name: a plain folder that happens
    to hold a `blobs/` or `snapshots/` folder of its own is not the cache.
    """
    as_given = _absolute(Path(path))
    resolved = Path(os.path.realpath(as_given))
    roots = _cache_roots()
    if any(p.is_relative_to(root) for p in (as_given, resolved) for root in roots):
        return True
    for candidate in (as_given, resolved):
        parts = candidate.parts
        for i, part in enumerate(parts[:-1]):
            if part == "snapshots" and i > 0 and _is_cache_repo_dir(Path(*parts[:i])):
                return True
    if _links_into_blobs(as_given):
        return True
    if as_given.is_dir():
        try:
            return any(_links_into_blobs(entry) for entry in as_given.iterdir())
        except OSError:
            return False
    return False


# --------------------------------------------------------------------------------------------
# Online path
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Hub:
    repo_id: str
    revision: str | None
    token: str | None
    timeout: float

    @property
    def label(self) -> str:
        return f"{self.repo_id}@{self.revision or constants.DEFAULT_REVISION}"

    def headers(self) -> dict[str, str]:
        headers = build_hf_headers(token=self.token, library_name=LIBRARY_NAME, library_version=_library_version())
        # Byte ranges must address the file itself, never a compressed encoding of it.
        headers["Accept-Encoding"] = "identity"
        return headers


@dataclass
class _Fetched:
    """The first bytes of one safetensors file: the 8-byte length and the JSON header."""

    name: str
    prefix: bytes = b""
    file_size: int | None = None
    received: int = 0
    error: SafetensorsHeaderError | None = None
    missing: bool = False


class _IncompleteResponse(Exception):
    """The server kept sending less than asked for; the file itself may be fine."""


def _api(token: str | None) -> HfApi:
    from huggingface_hub import HfApi

    return HfApi(token=token, library_name=LIBRARY_NAME, library_version=_library_version())


def _model_info(hub: _Hub, *, files_metadata: bool = True) -> ModelInfo:
    return _api(hub.token).model_info(
        hub.repo_id, revision=hub.revision, files_metadata=files_metadata, timeout=hub.timeout
    )


def _cached_config(hub: _Hub, why: str) -> bytes | None:
    """The cached config.json of the revision; None when the cache knows the repo has none."""
    entry = try_to_load_from_cache(hub.repo_id, CONFIG_NAME, revision=hub.revision)
    if entry is None:
        raise SourceError(
            f"{hub.label}: {why} and {CONFIG_NAME} is not in the local Hugging Face cache",
            _offline_hint(hub),
        )
    return _read_cached_file(Path(entry), hub) if isinstance(entry, str) else None


def _load_online(hub: _Hub, info: ModelInfo) -> LoadedCheckpoint:
    commit = info.sha if isinstance(info.sha, str) and info.sha else None
    # Everything read after this belongs to the resolved commit, so a push in between cannot
    # mix files of two commits into one report.
    pinned = commit or hub.revision
    listing: dict[str, int | None] | None = None
    if info.siblings is not None:
        listing = {sibling.rfilename: sibling.size for sibling in info.siblings}

    loaded = LoadedCheckpoint(
        source=hub.repo_id,
        kind="hub",
        location=hub.label,
        config=None,
        config_text=None,
        revision=hub.revision,
        commit=commit,
    )
    data: bytes | None = None
    if listing is None or CONFIG_NAME in listing:
        with _hub_errors(hub, CONFIG_NAME):
            data = _download_small_file(hub, CONFIG_NAME, pinned)
    _set_config(loaded, data, hub)
    _read_remote_weights(hub, pinned, listing, loaded)
    return loaded


def _set_config(loaded: LoadedCheckpoint, data: bytes | None, hub: _Hub) -> None:
    if data is None:
        loaded.findings.append(
            make_finding(
                "DFT001",
                f"{CONFIG_NAME} is missing from {hub.label}",
                "a draft checkpoint needs its config.json next to the weights; check the repo and --revision",
                file=CONFIG_NAME,
            )
        )
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        loaded.findings.append(
            make_finding(
                "DFT001",
                f"{CONFIG_NAME} is not UTF-8 text: {exc}",
                "restore config.json",
                file=CONFIG_NAME,
            )
        )
        return
    config, findings = parse_config_text(text, CONFIG_NAME)
    loaded.config = config
    loaded.config_text = text
    loaded.findings.extend(findings)


def _read_remote_weights(
    hub: _Hub, pinned: str | None, listing: dict[str, int | None] | None, loaded: LoadedCheckpoint
) -> None:
    sizes = listing or {}
    index_data: bytes | None = None
    if listing is None or INDEX_NAME in listing:
        with _hub_errors(hub, INDEX_NAME):
            index_data = _download_small_file(hub, INDEX_NAME, pinned)

    if index_data is not None:
        weight_map = parse_index(index_data, loaded)
        if weight_map is None:
            return
        reported: set[str] = set()
        to_fetch: list[str] = []
        for shard_name in sorted(set(weight_map.values())):
            if listing is not None and shard_name not in listing:
                _missing_shard(loaded, shard_name, hub)
                reported.add(shard_name)
            else:
                to_fetch.append(shard_name)
        for fetched in _fetch_headers(hub, pinned, to_fetch, sizes, missing_ok=True):
            if fetched.missing:
                _missing_shard(loaded, fetched.name, hub)
                reported.add(fetched.name)
            else:
                _add_fetched(loaded, fetched)
        check_index_against_shards(loaded, weight_map, reported)
        return

    if listing is None:
        names = ["model.safetensors"]
    else:
        names = sorted(n for n in listing if n.endswith(".safetensors") and "/" not in n)
    fetched_any = False
    for fetched in _fetch_headers(hub, pinned, names, sizes, missing_ok=listing is None):
        if not fetched.missing:
            fetched_any = True
            _add_fetched(loaded, fetched)
    if not fetched_any:
        loaded.weights_inspected = False
        others = sorted(n for n in sizes if n.endswith((".bin", ".pt", ".pth", ".gguf")))
        hint = (
            f"the repo holds {', '.join(others[:3])}: only safetensors headers can be checked"
            if others
            else "tensor shapes were not checked"
        )
        loaded.findings.append(make_finding("DFT005", f"no *.safetensors files at the root of {hub.label}", hint))


def _missing_shard(loaded: LoadedCheckpoint, shard_name: str, hub: _Hub) -> None:
    loaded.findings.append(
        make_finding(
            "DFT004",
            f"{INDEX_NAME} names {shard_name}, which does not exist in {hub.label}",
            "upload the missing shard, or regenerate the index from the shards",
            file=shard_name,
        )
    )


def _add_fetched(loaded: LoadedCheckpoint, fetched: _Fetched) -> None:
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


def _fetch_headers(
    hub: _Hub,
    pinned: str | None,
    names: list[str],
    sizes: dict[str, int | None],
    *,
    missing_ok: bool,
) -> list[_Fetched]:
    """Fetch the headers of `names`, concurrently when there are several; results in order."""

    def one(name: str) -> _Fetched:
        with _hub_errors(hub, name):
            try:
                return _fetch_header(hub, pinned, name, sizes.get(name))
            except RemoteEntryNotFoundError:
                if not missing_ok:
                    raise
                return _Fetched(name=name, missing=True)

    if len(names) <= 1:
        return [one(name) for name in names]
    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(names))) as pool:
        futures = [pool.submit(one, name) for name in names]
        return [future.result() for future in futures]


def _fetch_header(hub: _Hub, pinned: str | None, name: str, listed_size: int | None) -> _Fetched:
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
                return _Fetched(name, bytes(buffer), file_size, received, error=exc)
            needed = 8 + length
        if needed is not None and len(buffer) >= needed:
            return _Fetched(name, bytes(buffer[:needed]), file_size, received)
        if file_size is not None and len(buffer) >= file_size:
            break  # the file really ends here
        if not chunk:
            break  # no progress
    if file_size is not None and len(buffer) >= file_size and len(buffer) < 8:
        try:
            read_header_length(bytes(buffer), name, file_size)
        except SafetensorsHeaderError as exc:
            return _Fetched(name, bytes(buffer), file_size, received, error=exc)
    raise _IncompleteResponse(f"got {len(buffer)} of {needed if needed is not None else 8} header bytes")


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
                raise _IncompleteResponse(
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
        except _RESUMABLE:
            pass  # keep what arrived; the caller asks for the rest
        if finished and response.status_code == 200:
            total = received  # the whole file went by
        return bytes(data[:want]), total, received


def _download_small_file(hub: _Hub, filename: str, commit: str | None) -> bytes | None:
    """A small JSON file of `commit` through the Hub cache; None when the repo does not have it.

    The download names the revision the user asked for (so huggingface_hub records the
    branch -> commit ref and a later offline run finds the file), then checks that the file
    came from `commit`; if the branch moved in between, the file of `commit` is fetched.
    """
    revision = hub.revision
    for attempt in (revision, commit):
        try:
            path = hf_hub_download(
                hub.repo_id,
                filename,
                revision=attempt,
                token=hub.token,
                etag_timeout=hub.timeout,
                library_name=LIBRARY_NAME,
                library_version=_library_version(),
            )
        except RemoteEntryNotFoundError:
            return None
        except (HfHubHTTPError, EntryNotFoundError, ConnectionError, TimeoutError):
            raise
        except OSError:
            # The cache cannot be written (read-only mount, permissions, disk full): fetch the
            # file directly instead, and leave the cache alone.
            return _get_without_cache(hub, filename, commit or revision)
        got = _snapshot_commit(Path(path), filename)
        if commit is None or got is None or got == commit or attempt == commit:
            return _read_cached_file(Path(path), hub)
    raise AssertionError("unreachable")  # pragma: no cover


def _snapshot_commit(path: Path, filename: str) -> str | None:
    """The commit of a `.../snapshots/<commit>/<filename>` cache path."""
    snapshot = path
    for _ in PurePosixPath(filename).parts:
        snapshot = snapshot.parent
    if snapshot.parent.name == "snapshots" and _COMMIT_HASH.match(snapshot.name):
        return snapshot.name
    return None


def _get_without_cache(hub: _Hub, filename: str, revision: str | None) -> bytes | None:
    url = hf_hub_url(hub.repo_id, filename, revision=revision)
    with get_session().stream("GET", url, headers=hub.headers(), timeout=hub.timeout) as response:
        if response.status_code == 404:
            response.read()
        try:
            hf_raise_for_status(response)
        except RemoteEntryNotFoundError:
            return None
        data = bytearray()
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) > MAX_JSON_BYTES:
                raise SourceError(
                    f"{hub.label}: {filename} is larger than {MAX_JSON_BYTES} bytes",
                    "check the repo on the Hub",
                )
        return bytes(data)


def _read_cached_file(path: Path, hub: _Hub) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_JSON_BYTES + 1)[:MAX_JSON_BYTES]
    except OSError as exc:
        raise SourceError(
            f"{hub.label}: cannot read the cached {path.name}: {exc.strerror or exc}",
            "check the permissions of the Hugging Face cache (HF_HUB_CACHE)",
        ) from None


# --------------------------------------------------------------------------------------------
# Offline path: the local Hub cache, read-only
# --------------------------------------------------------------------------------------------


def _load_from_cache(hub: _Hub, *, unreachable: BaseException | None) -> LoadedCheckpoint:
    why = "offline (HF_HUB_OFFLINE)" if unreachable is None else "the Hub is unreachable"
    commit = _cached_commit(hub)
    snapshot = _cached_snapshot(hub, commit)
    data = _cached_config(hub, why)
    loaded = LoadedCheckpoint(
        source=hub.repo_id,
        kind="hub",
        location=hub.label,
        config=None,
        config_text=None,
        revision=hub.revision,
        commit=commit,
    )
    _set_config(loaded, data, hub)
    if unreachable is not None:
        loaded.findings.append(
            make_finding(
                "DFT007",
                f"the Hub could not be reached ({_one_line(str(unreachable), 120)}): {hub.label} was read from the "
                "local cache, which may be older than the Hub",
                "rerun when the Hub is reachable to check the current revision",
            )
        )

    index_entry = try_to_load_from_cache(hub.repo_id, INDEX_NAME, revision=hub.revision)
    if isinstance(index_entry, str):
        weight_map = parse_index(_read_cached_file(Path(index_entry), hub), loaded)
        if weight_map is None:
            return loaded
        shard_names = sorted(set(weight_map.values()))
        missing: list[str] = []
        for shard_name in shard_names:
            path = snapshot / shard_name if snapshot is not None else None
            if path is not None and path.is_file():
                add_shard(loaded, lambda p=path, n=shard_name: read_local_header(p, n))
            else:
                missing.append(shard_name)
        check_index_against_shards(loaded, weight_map, set(missing))
        if missing:
            # Comparing a partial set against the config would report every tensor of the
            # missing shards as missing from the checkpoint (DFT020): a false error, offline.
            loaded.weights_inspected = False
            loaded.findings.append(
                make_finding(
                    "DFT005",
                    f"{why}: {len(missing)} of {len(shard_names)} shards of {hub.label} are not in "
                    f"the local cache, tensor shapes were not checked: {', '.join(missing)}",
                    _weights_hint(hub),
                    file=missing[0],
                )
            )
        return loaded

    files: list[Path] = []
    if snapshot is not None:
        files = sorted(p for p in snapshot.glob("*.safetensors") if p.is_file())
    for path in files:
        add_shard(loaded, lambda p=path: read_local_header(p, p.name))
    if not files:
        loaded.weights_inspected = False
        loaded.findings.append(
            make_finding(
                "DFT005",
                f"{why}: no safetensors weights of {hub.label} are in the local cache, tensor shapes were not checked",
                _weights_hint(hub),
            )
        )
    return loaded


def _repo_cache_dir(repo_id: str) -> Path:
    return Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")


def _cached_commit(hub: _Hub) -> str | None:
    revision = hub.revision or constants.DEFAULT_REVISION
    if _COMMIT_HASH.match(revision):
        return revision
    ref = _repo_cache_dir(hub.repo_id) / "refs" / revision
    try:
        commit = ref.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return commit if _COMMIT_HASH.match(commit) else None


def _cached_snapshot(hub: _Hub, commit: str | None) -> Path | None:
    if commit is None:
        return None
    snapshot = _repo_cache_dir(hub.repo_id) / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@contextmanager
def _hub_errors(hub: _Hub, what: str) -> Iterator[None]:
    """Turn every huggingface_hub / HTTP failure inside into a one-line SourceError."""
    try:
        yield
    except SourceError:
        raise
    except _IncompleteResponse as exc:
        raise SourceError(
            f"{hub.label}: the Hub sent an incomplete response for {what} ({exc})",
            "retry; if it persists, a proxy may be cutting range requests short",
        ) from exc
    except _HUB_ERRORS as exc:
        raise _to_source_error(exc, hub, what) from exc


def _is_unreachable(exc: BaseException) -> bool:
    if isinstance(exc, _UNREACHABLE):
        return True
    return isinstance(exc, HfHubHTTPError) and _status(exc) in (408, 500, 502, 503, 504)


def _status(exc: HfHubHTTPError) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _to_source_error(exc: BaseException, hub: _Hub, what: str, *, listing: bool = False) -> SourceError:
    repo, label, endpoint = hub.repo_id, hub.label, constants.ENDPOINT
    timeout = f"{hub.timeout:g}s"
    network_hint = (
        "check your network, proxy and HF_ENDPOINT, or pass a larger --timeout; HF_HUB_OFFLINE=1 uses cached files only"
    )
    subject = repo if listing else label
    if isinstance(exc, GatedRepoError):
        return SourceError(
            f"{repo} is a gated repo and the Hub refused access to {what}",
            f"request access at {endpoint}/{repo}, then log in with `hf auth login` (or set HF_TOKEN / pass --token)",
        )
    if isinstance(exc, DisabledRepoError):
        return SourceError(f"{repo} has been disabled on the Hub", "use another copy of the checkpoint")
    if isinstance(exc, RepositoryNotFoundError):
        return SourceError(
            f"{repo}: no such model repo on {endpoint} (or it is private and the token in use cannot see it)",
            "check the repo id; for a private repo log in with `hf auth login` or pass --token",
        )
    if isinstance(exc, RevisionNotFoundError):
        return SourceError(
            f"{repo}: revision {hub.revision or constants.DEFAULT_REVISION!r} does not exist",
            "pass an existing branch, tag or commit hash to --revision (default: main)",
        )
    if isinstance(exc, RemoteEntryNotFoundError):
        return SourceError(f"{label}: {what} does not exist in the repo", "check the repo id and --revision")
    if isinstance(exc, IncompleteSnapshotError):
        return SourceError(
            f"{label}: the cached snapshot is incomplete and the Hub cannot be used",
            _offline_hint(hub),
        )
    if isinstance(exc, LocalEntryNotFoundError):
        if is_offline():
            return SourceError(
                f"{label}: HF_HUB_OFFLINE is set and {what} is not in the local Hugging Face cache",
                _offline_hint(hub),
            )
        cause = exc.__cause__
        if isinstance(cause, (httpx.TimeoutException, TimeoutError)):
            message = f"{label}: the Hub did not answer within {timeout} for {what}"
        else:
            message = f"{label}: cannot reach {endpoint} for {what}"
        return SourceError(message + ", and it is not in the local cache", network_hint)
    if isinstance(exc, OfflineModeIsEnabled):
        return SourceError(f"{label}: {what} is needed but HF_HUB_OFFLINE is set", _offline_hint(hub))
    if isinstance(exc, EntryNotFoundError):
        return SourceError(f"{label}: {what} was not found", "check the repo id and --revision")
    if isinstance(exc, HfHubHTTPError):
        return _http_error(exc, subject, what)
    if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
        return SourceError(f"{subject}: the Hub did not answer within {timeout} for {what}", network_hint)
    if isinstance(exc, (httpx.TransportError, ConnectionError)):
        return SourceError(
            f"{subject}: cannot connect to {endpoint} for {what} ({type(exc).__name__})",
            network_hint,
        )
    return SourceError(
        f"{subject}: HTTP error while fetching {what}: {_one_line(str(exc)) or type(exc).__name__}",
        "retry; set HF_DEBUG=1 to see the requests",
    )


def _http_error(exc: HfHubHTTPError, subject: str, what: str) -> SourceError:
    status = _status(exc)
    detail = _one_line(exc.server_message or "")
    suffix = f": {detail}" if detail else ""
    if status == 401:
        return SourceError(
            f"{subject}: the Hub rejected the credentials (HTTP 401) for {what}{suffix}",
            "log in again with `hf auth login`, or check HF_TOKEN / --token",
        )
    if status == 403:
        return SourceError(
            f"{subject}: access to {what} is forbidden (HTTP 403){suffix}",
            "check that your token has read access to this repo",
        )
    if status == 429:
        return SourceError(
            f"{subject}: rate-limited by the Hub (HTTP 429) while fetching {what}",
            "wait a minute and retry; logged-in users get higher limits",
        )
    if status is not None and status >= 500:
        return SourceError(
            f"{subject}: the Hub failed with HTTP {status} for {what}{suffix}",
            "retry later (https://status.huggingface.co)",
        )
    return SourceError(
        f"{subject}: the Hub answered HTTP {status} for {what}{suffix}",
        "retry; set HF_DEBUG=1 to see the requests",
    )


def _offline_hint(hub: _Hub) -> str:
    revision = f" --revision {hub.revision}" if hub.revision else ""
    return f"unset HF_HUB_OFFLINE, or pre-download with `hf download {hub.repo_id}{revision} --include '*.json'`"


def _weights_hint(hub: _Hub) -> str:
    revision = f" --revision {hub.revision}" if hub.revision else ""
    return (
        "run online to read the headers by range request, or download the weights with "
        f"`hf download {hub.repo_id}{revision} --include '*.safetensors'`"
    )


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def _effective_timeout(timeout: float | None) -> float:
    # huggingface_hub's shared client has no timeout of its own: never send a request without one.
    return float(timeout) if timeout is not None else float(constants.HF_HUB_DOWNLOAD_TIMEOUT)


@lru_cache(maxsize=1)
def _library_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(LIBRARY_NAME)
    except PackageNotFoundError:
        pass
    try:
        import dflash_tools

        return str(getattr(dflash_tools, "__version__", "unknown"))
    except ImportError:  # pragma: no cover
        return "unknown"


def _absolute(path: Path) -> Path:
    """Absolute and normalized, but with symlinks left as they are."""
    return Path(os.path.normpath(path.expanduser().absolute()))


def _cache_roots() -> list[Path]:
    roots = [constants.HF_HUB_CACHE]
    env = os.environ.get("HF_HUB_CACHE")
    if env:
        roots.append(env)
    out: list[Path] = []
    for root in roots:
        absolute = _absolute(Path(root))
        out.extend({absolute, Path(os.path.realpath(absolute))})
    return out


# A cached repo folder: `models--org--name` (or datasets--, spaces--) holding blobs/ and snapshots/.
_CACHE_REPO_PREFIXES = ("models--", "datasets--", "spaces--")


def _is_cache_repo_dir(folder: Path) -> bool:
    return (
        folder.name.startswith(_CACHE_REPO_PREFIXES) and (folder / "blobs").is_dir() and (folder / "snapshots").is_dir()
    )


def _links_into_blobs(path: Path) -> bool:
    """A symlink whose target is a blob of a cached repo (`models--*/blobs/<hash>`)."""
    if not path.is_symlink():
        return False
    target = Path(os.path.realpath(path))
    return target.parent.name == "blobs" and _is_cache_repo_dir(target.parent.parent)
