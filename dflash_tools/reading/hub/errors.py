"""Hub failures as one-line SourceErrors with a next step (offline, auth, gated, missing, unreachable)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from huggingface_hub import constants
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
from huggingface_hub.utils import httpx

from dflash_tools.errors import SourceError
from dflash_tools.reading.checkpoint import is_offline
from dflash_tools.reading.hub.session import HubRepo

# A body that stops early (connection closed, reset) is resumed with a new range request.
RESUMABLE = (httpx.RemoteProtocolError, httpx.ReadError)
# Failures that mean "the Hub cannot be reached" rather than "the Hub said no".
UNREACHABLE = (httpx.TransportError, ConnectionError, TimeoutError)
# Everything huggingface_hub (or the HTTP layer under it) raises for a remote problem.
HUB_ERRORS = (
    HfHubHTTPError,
    EntryNotFoundError,
    httpx.HTTPError,
    ConnectionError,
    TimeoutError,
)


class IncompleteResponse(Exception):
    """The server kept sending less than asked for; the file itself may be fine."""


@contextmanager
def hub_errors(hub: HubRepo, what: str) -> Iterator[None]:
    """Turn every huggingface_hub / HTTP failure inside into a one-line SourceError."""
    try:
        yield
    except SourceError:
        raise
    except IncompleteResponse as exc:
        raise SourceError(
            f"{hub.label}: the Hub sent an incomplete response for {what} ({exc})",
            "retry; if it persists, a proxy may be cutting range requests short",
        ) from exc
    except HUB_ERRORS as exc:
        raise to_source_error(exc, hub, what) from exc


def is_unreachable(exc: BaseException) -> bool:
    if isinstance(exc, UNREACHABLE):
        return True
    return isinstance(exc, HfHubHTTPError) and _status(exc) in (408, 500, 502, 503, 504)


def _status(exc: HfHubHTTPError) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def to_source_error(exc: BaseException, hub: HubRepo, what: str, *, listing: bool = False) -> SourceError:
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
            offline_hint(hub),
        )
    if isinstance(exc, LocalEntryNotFoundError):
        if is_offline():
            return SourceError(
                f"{label}: HF_HUB_OFFLINE is set and {what} is not in the local Hugging Face cache",
                offline_hint(hub),
            )
        cause = exc.__cause__
        if isinstance(cause, (httpx.TimeoutException, TimeoutError)):
            message = f"{label}: the Hub did not answer within {timeout} for {what}"
        else:
            message = f"{label}: cannot reach {endpoint} for {what}"
        return SourceError(message + ", and it is not in the local cache", network_hint)
    if isinstance(exc, OfflineModeIsEnabled):
        return SourceError(f"{label}: {what} is needed but HF_HUB_OFFLINE is set", offline_hint(hub))
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
        f"{subject}: HTTP error while fetching {what}: {one_line(str(exc)) or type(exc).__name__}",
        "retry; set HF_DEBUG=1 to see the requests",
    )


def _http_error(exc: HfHubHTTPError, subject: str, what: str) -> SourceError:
    status = _status(exc)
    detail = one_line(exc.server_message or "")
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


def offline_hint(hub: HubRepo) -> str:
    revision = f" --revision {hub.revision}" if hub.revision else ""
    return f"unset HF_HUB_OFFLINE, or pre-download with `hf download {hub.repo_id}{revision} --include '*.json'`"


def weights_hint(hub: HubRepo) -> str:
    revision = f" --revision {hub.revision}" if hub.revision else ""
    return (
        "run online to read the headers by range request, or download the weights with "
        f"`hf download {hub.repo_id}{revision} --include '*.safetensors'`"
    )


def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
