"""config.json and the shard index from a Hub repo: through the Hub cache when it is writable, else read directly."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from huggingface_hub import hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
)
from huggingface_hub.utils import get_session, hf_raise_for_status

from dflash_tools.draft.findings import make_finding
from dflash_tools.errors import SourceError
from dflash_tools.reading.checkpoint import (
    CONFIG_NAME,
    LoadedCheckpoint,
    parse_config_text,
)
from dflash_tools.reading.hub.session import LIBRARY_NAME, HubRepo, library_version

# config.json / index fetched without the cache (cache not writable) are read up to this size.
MAX_JSON_BYTES = 64 * 1024 * 1024
COMMIT_HASH = re.compile(r"^[0-9a-f]{40}$")


def hub_checkpoint(hub: HubRepo, commit: str | None, config_data: bytes | None) -> LoadedCheckpoint:
    """The checkpoint of `hub` at `commit`, its config read from `config_data` (None: missing, a finding)."""
    loaded = LoadedCheckpoint(
        source=hub.repo_id,
        kind="hub",
        location=hub.label,
        config=None,
        config_text=None,
        revision=hub.revision,
        commit=commit,
    )
    set_config(loaded, config_data, hub)
    return loaded


def set_config(loaded: LoadedCheckpoint, data: bytes | None, hub: HubRepo) -> None:
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


def download_small_file(hub: HubRepo, filename: str, commit: str | None) -> bytes | None:
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
                library_version=library_version(),
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
            return read_cached_file(Path(path), hub)
    raise AssertionError("unreachable")  # pragma: no cover


def _snapshot_commit(path: Path, filename: str) -> str | None:
    """The commit of a `.../snapshots/<commit>/<filename>` cache path."""
    snapshot = path
    for _ in PurePosixPath(filename).parts:
        snapshot = snapshot.parent
    if snapshot.parent.name == "snapshots" and COMMIT_HASH.match(snapshot.name):
        return snapshot.name
    return None


def _get_without_cache(hub: HubRepo, filename: str, revision: str | None) -> bytes | None:
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


def read_cached_file(path: Path, hub: HubRepo) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_JSON_BYTES + 1)[:MAX_JSON_BYTES]
    except OSError as exc:
        raise SourceError(
            f"{hub.label}: cannot read the cached {path.name}: {exc.strerror or exc}",
            "check the permissions of the Hugging Face cache (HF_HUB_CACHE)",
        ) from None
