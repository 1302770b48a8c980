"""Hub failures as one-line SourceErrors that name the file and the cause, with a next step.

Each failure says what the server did: an HTTP status (401, 403, 404, 429, 5xx) for a named
file, an answer that did not arrive within --timeout, one larger than its cap, one that is not
what the Hub sends ("the server sent a malformed answer"), or no connection at all.

`HubSourceError.absence` tells `reading.source` whether the failure leaves open that
`owner/name` was meant as a local path: "missing" (the Hub says there is no such repo) or
"unreachable" (the Hub could not be asked about it at all). Once the repo info has arrived the
repo exists, and nothing that goes wrong afterwards is reported as "no Hub repo of that name".
"""

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

from dflash_tools.errors import SourceError
from dflash_tools.reading.checkpoint import is_offline
from dflash_tools.reading.http import (
    HttpIncomplete,
    HttpIOError,
    HttpMalformed,
    HttpRateLimited,
    HttpTimeout,
    HttpTooLarge,
    HttpUnreachable,
    format_seconds,
)
from dflash_tools.reading.hub.session import HubRepo

# Everything a Hub request can raise for a remote problem.
HUB_ERRORS = (HfHubHTTPError, EntryNotFoundError, HttpIOError, OfflineModeIsEnabled, ConnectionError, TimeoutError)

NETWORK_HINT = (
    "check your network, proxy and HF_ENDPOINT, or pass a larger --timeout; HF_HUB_OFFLINE=1 uses cached files only"
)
MALFORMED_HINT = "check HF_ENDPOINT (a proxy or mirror may be answering in the Hub's place), then retry"


class HubSourceError(SourceError):
    """A SourceError from the Hub; `absence`: "missing" or "unreachable" when the repo may not exist."""

    def __init__(self, message: str, hint: str = "", *, absence: str = "") -> None:
        super().__init__(message, hint)
        self.absence = absence


@contextmanager
def hub_errors(hub: HubRepo, what: str) -> Iterator[None]:
    """Turn every Hub failure inside into a one-line SourceError about an existing repo."""
    try:
        yield
    except SourceError:
        raise
    except HUB_ERRORS as exc:
        raise to_source_error(exc, hub, what, repo_known=True) from exc


def is_unreachable(exc: BaseException) -> bool:
    """The Hub could not be asked (no connection, no answer in time, a server error): the cache may help."""
    if isinstance(exc, HttpUnreachable | HttpTimeout | ConnectionError | TimeoutError):
        return True
    return isinstance(exc, HfHubHTTPError) and status_of(exc) in (408, 500, 502, 503, 504)


def status_of(exc: HfHubHTTPError) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def to_source_error(
    exc: BaseException, hub: HubRepo, what: str, *, listing: bool = False, repo_known: bool = False
) -> HubSourceError:
    """The one-line error for `exc`, raised while fetching `what` (a file name, or "the repo info").

    `repo_known`: the repo info already arrived, so the repo exists whatever the server says now.
    """
    repo, label, endpoint = hub.repo_id, hub.label, constants.ENDPOINT
    subject = repo if listing else label

    def error(message: str, hint: str, *, absence: str = "") -> HubSourceError:
        return HubSourceError(message, hint, absence="" if repo_known else absence)

    if isinstance(exc, HttpTimeout):
        arrived = f", {exc.received} bytes had arrived" if exc.received else ""
        return error(
            f"{subject}: the Hub did not answer within {exc.seconds:g}s for {what} ({exc.phase}{arrived})",
            NETWORK_HINT,
            absence="unreachable",
        )
    if isinstance(exc, HttpTooLarge):
        size = f" ({exc.size:,} bytes)" if exc.size else ""
        return error(
            f"{subject}: {what} on the Hub is {exc.detail}{size}: not read", "check the repo on the Hub and HF_ENDPOINT"
        )
    if isinstance(exc, HttpRateLimited):
        return error(
            f"{subject}: rate-limited by the Hub (HTTP {exc.status}) for {what}: the server asked to wait "
            f"{format_seconds(exc.wait)}, longer than --timeout {exc.timeout:g}s allows",
            "retry after that wait; logged-in users get higher limits (`hf auth login`)",
        )
    if isinstance(exc, HttpMalformed):
        return error(
            f"{subject}: the server sent a malformed answer for {what}: {one_line(exc.detail)}", MALFORMED_HINT
        )
    if isinstance(exc, HttpIncomplete):
        return error(
            f"{subject}: the Hub sent an incomplete response for {what} ({one_line(exc.detail)})",
            "retry; if it persists, a proxy may be cutting responses short",
        )
    if isinstance(exc, HttpUnreachable) and "disconnected" in str(exc.cause).lower():
        return error(
            f"{subject}: the server at {endpoint} closed the connection without answering for {what}",
            NETWORK_HINT,
            absence="unreachable",
        )
    if isinstance(exc, HttpUnreachable):
        return error(
            f"{subject}: cannot connect to {endpoint} for {what} ({type(exc.cause).__name__})",
            NETWORK_HINT,
            absence="unreachable",
        )
    if isinstance(exc, GatedRepoError):
        return error(
            f"{repo} is a gated repo and the Hub refused access to {what}",
            f"request access at {endpoint}/{repo}, then log in with `hf auth login` (or set HF_TOKEN / pass --token)",
        )
    if isinstance(exc, DisabledRepoError):
        return error(f"{repo} has been disabled on the Hub", "use another copy of the checkpoint")
    if isinstance(exc, RepositoryNotFoundError):
        if repo_known:
            return _http_error(exc, subject, what)
        return error(
            f"{repo}: no such model repo on {endpoint} (or it is private and the token in use cannot see it)",
            "check the repo id; for a private repo log in with `hf auth login` or pass --token",
            absence="missing",
        )
    if isinstance(exc, RevisionNotFoundError):
        if repo_known:
            return _http_error(exc, subject, what)
        return error(
            f"{repo}: revision {hub.revision or constants.DEFAULT_REVISION!r} does not exist",
            "pass an existing branch, tag or commit hash to --revision (default: main)",
        )
    if isinstance(exc, RemoteEntryNotFoundError):
        return error(f"{label}: {what} does not exist in the repo", "check the repo id and --revision")
    if isinstance(exc, IncompleteSnapshotError):
        return error(f"{label}: the cached snapshot is incomplete and the Hub cannot be used", offline_hint(hub))
    if isinstance(exc, LocalEntryNotFoundError | OfflineModeIsEnabled):
        if is_offline():
            return error(
                f"{label}: HF_HUB_OFFLINE is set and {what} is not in the local Hugging Face cache",
                offline_hint(hub),
                absence="unreachable",
            )
        return error(f"{label}: cannot reach {endpoint} for {what}, and it is not in the local cache", NETWORK_HINT)
    if isinstance(exc, EntryNotFoundError):
        return error(f"{label}: {what} was not found", "check the repo id and --revision")
    if isinstance(exc, HfHubHTTPError):
        return _http_error(exc, subject, what)
    if isinstance(exc, TimeoutError):
        return error(
            f"{subject}: the Hub did not answer within {hub.timeout:g}s for {what}", NETWORK_HINT, absence="unreachable"
        )
    if isinstance(exc, ConnectionError):
        return error(
            f"{subject}: cannot connect to {endpoint} for {what} ({type(exc).__name__})",
            NETWORK_HINT,
            absence="unreachable",
        )
    return error(
        f"{subject}: the Hub request for {what} failed: {one_line(str(exc)) or type(exc).__name__}",
        "retry; set HF_DEBUG=1 to see the requests",
    )


def _http_error(exc: HfHubHTTPError, subject: str, what: str) -> HubSourceError:
    status = status_of(exc)
    detail = one_line(exc.server_message or "", 200)
    suffix = f": {detail}" if detail else ""
    if status == 401:
        return HubSourceError(
            f"{subject}: the Hub rejected the credentials (HTTP 401) for {what}{suffix}",
            "log in again with `hf auth login`, or check HF_TOKEN / --token",
        )
    if status == 403:
        return HubSourceError(
            f"{subject}: access to {what} is forbidden (HTTP 403){suffix}",
            "check that your token has read access to this repo",
        )
    if status == 429:
        return HubSourceError(
            f"{subject}: rate-limited by the Hub (HTTP 429) while fetching {what}",
            "wait a minute and retry; logged-in users get higher limits",
        )
    if status is not None and status >= 500:
        return HubSourceError(
            f"{subject}: the Hub failed with HTTP {status} for {what}{suffix}",
            "retry later (https://status.huggingface.co)",
        )
    return HubSourceError(
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
