"""The Hub I/O policy: every request that reads a Hub repo goes through `request`.

A request has one deadline, `--timeout` seconds from its start. It bounds everything: the
connection, every read, the whole body, the redirects, the retries and the waits between them.
A body is read up to a cap, never further, and one whose `Content-Length` is over the cap is not
read at all. Failures are classes of their own (`HubIOError`) naming the file and the cause.

Why the requests are sent here rather than through huggingface_hub's `model_info`,
`hf_hub_download` or its shared httpx client:

- httpx's read timeout restarts with every byte: a server that sends one byte a second never
  times out, neither in the headers nor in the body. Here a timer shuts the connection's socket
  down when the deadline passes, whatever the server is doing. That needs a connection owned by
  the request (a kept-alive one may be in use elsewhere), so this client keeps none alive.
- huggingface_hub's retry loop (`http_backoff`) sleeps as long as `Retry-After` says, even an
  hour, retries five times and logs every retry on stderr. Here a wait longer than the deadline
  leaves ends the request at once, and the message names the wait the server asked for.
- `model_info` and `hf_hub_download` read a body whole, whatever its size, and hf_hub_download
  streams it into the cache first; httpx also reads the body of every redirect whole.

What stays huggingface_hub's: the endpoint and the URLs, the headers (token, user agent), the
offline switch, and the error classes of the Hub's own error answers (`hf_raise_for_status`).
DNS resolution is the one step no deadline reaches (the standard library offers no timeout).
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx2
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled
from huggingface_hub.utils import hf_raise_for_status

# Retries after the first attempt, for answers that say "try again" and for broken connections.
MAX_RETRIES = 2
# Waits between attempts without a Retry-After: 0.5 s, then 1 s; never more than BACKOFF_CAP.
BACKOFF_FIRST = 0.5
BACKOFF_CAP = 2.0
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
# An error answer's body is only read for its message: a few kilobytes say everything.
MAX_ERROR_BODY = 64 * 1024


class HubIOError(Exception):
    """A request that ended without a usable answer; `what` names the file or API answer."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what}: {detail}")
        self.what = what
        self.detail = detail


class HubTimeout(HubIOError):
    """The deadline passed (connecting, waiting, or while the body was still arriving)."""

    def __init__(self, what: str, seconds: float, phase: str, received: int = 0) -> None:
        super().__init__(what, f"no complete answer within {seconds:g}s ({phase})")
        self.seconds = seconds
        self.phase = phase
        self.received = received


class HubTooLarge(HubIOError):
    """The body is larger than the cap for what it is (known before, or while, reading it)."""

    def __init__(self, what: str, limit: int, size: int | None) -> None:
        super().__init__(what, f"larger than {_mib(limit)}")
        self.limit = limit
        self.size = size


class HubMalformed(HubIOError):
    """The server answered something the Hub never sends (junk JSON, impossible headers, loops)."""


class HubRateLimited(HubIOError):
    """HTTP 429 (or 503) with a Retry-After longer than the deadline leaves."""

    def __init__(self, what: str, status: int, wait: float, timeout: float) -> None:
        super().__init__(what, f"HTTP {status}, asked to wait {format_seconds(wait)}")
        self.status = status
        self.wait = wait
        self.timeout = timeout


class HubUnreachable(HubIOError):
    """No connection could be made (refused, reset, DNS, TLS), after the retries."""

    def __init__(self, what: str, exc: BaseException) -> None:
        super().__init__(what, type(exc).__name__)
        self.cause = exc


class HubIncomplete(HubIOError):
    """The connection closed before the answer was complete (a Content-Length that lied)."""


def _mib(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"


def format_seconds(value: float) -> str:
    if value >= 2 * 86400:
        return f"{value:.0f} s ({value / 86400:.0f} days)"
    if value >= 3600:
        return f"{value:.0f} s ({value / 3600:.1f} h)"
    return f"{value:.0f} s" if value >= 10 else f"{value:g} s"


# --------------------------------------------------------------------------------------------
# Deadline
# --------------------------------------------------------------------------------------------

# httpcore trace steps -> what a timeout message says the request was doing.
_PHASES = (
    ("connect_tcp", "connecting"),
    ("start_tls", "connecting"),
    ("send_request", "sending the request"),
    ("receive_response_headers", "waiting for the answer"),
    ("receive_response_body", "reading the answer"),
)


class Deadline:
    """`seconds` from its first request; while `armed`, its requests' sockets are shut down when it passes.

    The clock starts with the first request, not before: building the HTTP client (its TLS
    context takes a second on a busy machine) is no part of any answer's time.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expires: float | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._fired = False
        self.phase = "connecting"
        self.received = 0  # body bytes of the current answer so far (for the timeout message)

    def start(self) -> None:
        if self.expires is None:
            self.expires = time.monotonic() + self.seconds

    def remaining(self) -> float:
        self.start()
        assert self.expires is not None
        return self.expires - time.monotonic()

    @property
    def expired(self) -> bool:
        return self._fired or self.remaining() <= 0

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's `trace` extension: what the request is doing, and each socket once connected."""
        for step, phase in _PHASES:
            if step in name and name.endswith(".started"):
                self.phase = phase
        if not name.endswith(".complete"):
            return
        stream = info.get("return_value")
        get_extra_info = getattr(stream, "get_extra_info", None)
        sock = get_extra_info("socket") if callable(get_extra_info) else None
        if isinstance(sock, socket.socket):
            with self._lock:
                self._sockets.append(sock)
                fired = self._fired
            if fired:
                self._shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self._fired = True
            sockets = list(self._sockets)
        for sock in sockets:
            self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        # shutdown() wakes a recv() blocked in another thread; close() would not.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        timer = threading.Timer(max(self.remaining(), 0.0), self._fire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            with self._lock:
                self._sockets.clear()

    def timeouts(self, per_step: float) -> httpx2.Timeout:
        step = max(min(per_step, self.remaining()), 0.001)
        return httpx2.Timeout(step)


# --------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------

_CLIENT: httpx2.Client | None = None
_CLIENT_LOCK = threading.Lock()


def _client() -> httpx2.Client:
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None:
            # Like huggingface_hub's default client (proxies and certificates from the
            # environment), but no kept-alive connections (see the module docstring) and
            # redirects followed here, where their bodies are not read.
            _CLIENT = httpx2.Client(
                follow_redirects=False,
                timeout=None,
                limits=httpx2.Limits(max_keepalive_connections=0),
                trust_env=True,
            )
        return _CLIENT


def _reset_client() -> None:
    global _CLIENT
    _CLIENT = None  # a forked child must not share the parent's sockets


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_client)


# --------------------------------------------------------------------------------------------
# One request
# --------------------------------------------------------------------------------------------


@dataclass
class Answer:
    """A response read within its bounds. `complete`: the body ended on its own (not cut, not broken)."""

    status: int
    headers: httpx2.Headers
    body: bytes
    complete: bool
    url: str
    received: int  # body bytes that arrived, including any skipped by the caller


def request(
    url: str,
    *,
    what: str,
    headers: dict[str, str],
    deadline: Deadline,
    limit: int,
    params: dict[str, str] | None = None,
    cut: bool = False,
    accept: frozenset[int] = frozenset(),
    skip: int = 0,
) -> Answer:
    """GET `url` within `deadline`, reading at most `limit` body bytes.

    Over the limit: `HubTooLarge`, or with `cut` the first `limit` bytes (a ranged read that only
    needs a prefix). `skip` drops that many bytes of a 200 answer first: a server that ignored
    `Range` sends the file from byte 0.
    A 4xx/5xx answer not in `accept` raises huggingface_hub's error for it (`hf_raise_for_status`)
    once the retries are spent. Everything else that goes wrong is a `HubIOError`.
    """
    from dflash_tools.reading.checkpoint import is_offline

    if is_offline():
        raise OfflineModeIsEnabled(f"Cannot reach {url}: offline mode is enabled (HF_HUB_OFFLINE)")
    _client()  # built before the clock starts
    deadline.start()
    backoff = BACKOFF_FIRST
    attempt = 0
    refused: Answer | None = None  # the last "try again" answer: the cause, should a retry time out
    while True:
        attempt += 1
        try:
            answer = _attempt(url, what, headers, deadline, limit, params, cut, skip)
        except (HubUnreachable, HubIncomplete, HubTimeout):
            if refused is not None:
                return _checked(refused, accept, what)
            if attempt > MAX_RETRIES or backoff >= deadline.remaining():
                raise
            wait = backoff
        else:
            if answer.status not in RETRY_STATUSES or answer.status in accept or attempt > MAX_RETRIES:
                return _checked(answer, accept, what)
            refused = answer
            asked = retry_after(answer.headers)
            wait = asked if asked is not None else backoff
            if wait >= deadline.remaining():
                if asked is not None:
                    raise HubRateLimited(what, answer.status, asked, deadline.seconds)
                return _checked(answer, accept, what)
        time.sleep(wait)
        backoff = min(backoff * 2, BACKOFF_CAP)


def _checked(answer: Answer, accept: frozenset[int], what: str) -> Answer:
    """Raise huggingface_hub's error for an error answer (its class says RepoNotFound, Gated, ...)."""
    if answer.status >= 400 and answer.status not in accept:
        body = answer.body
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            body = b""  # huggingface_hub reads an error body as JSON text and fails on other bytes
        response = httpx2.Response(
            answer.status, headers=answer.headers, content=body, request=httpx2.Request("GET", answer.url)
        )
        try:
            hf_raise_for_status(response)
        except HfHubHTTPError:
            raise
        except Exception as exc:  # its parsing of an error answer broke: the answer is the problem
            raise HubMalformed(what, f"HTTP {answer.status} with an error answer that cannot be read ({exc})") from None
    return answer


def _attempt(
    url: str,
    what: str,
    headers: dict[str, str],
    deadline: Deadline,
    limit: int,
    params: dict[str, str] | None,
    cut: bool,
    skip: int,
) -> Answer:
    deadline.phase, deadline.received = "connecting", 0
    try:
        with deadline.armed():
            current = url
            send_headers = dict(headers)
            for _ in range(MAX_REDIRECTS + 1):
                if deadline.expired:
                    raise HubTimeout(what, deadline.seconds, deadline.phase, deadline.received)
                request = _client().build_request(
                    "GET",
                    current,
                    headers=send_headers,
                    params=params if current == url else None,
                    timeout=deadline.timeouts(deadline.seconds),
                    extensions={"trace": deadline.trace},
                )
                response = _client().send(request, stream=True)
                try:
                    location = response.headers.get("Location")
                    if response.status_code in REDIRECT_STATUSES and location:
                        target = urljoin(str(response.url), location)
                        if urlsplit(target).scheme not in ("http", "https"):
                            raise HubMalformed(what, f"a redirect to a URL that is not http(s): {target[:200]!r}")
                        if _origin(target) != _origin(current):
                            # As httpx and huggingface_hub do: credentials never leave the host they were sent to.
                            send_headers = {k: v for k, v in send_headers.items() if k.lower() != "authorization"}
                        current = target
                        continue
                    deadline.phase = "reading the answer"
                    return _read(response, what, limit, cut, skip, deadline)
                finally:
                    response.close()
            raise HubMalformed(what, f"more than {MAX_REDIRECTS} redirects")
    except HubIOError:
        raise
    except (httpx2.HTTPError, httpx2.InvalidURL, OSError) as exc:
        if deadline.expired or isinstance(exc, httpx2.TimeoutException):
            raise HubTimeout(what, deadline.seconds, deadline.phase, deadline.received) from exc
        if isinstance(exc, httpx2.UnsupportedProtocol | httpx2.LocalProtocolError | httpx2.InvalidURL):
            raise HubMalformed(what, f"{type(exc).__name__}: {exc}") from exc
        if isinstance(exc, httpx2.RemoteProtocolError | httpx2.ReadError) and deadline.phase == "reading the answer":
            raise HubIncomplete(
                what, f"the connection closed after {deadline.received} bytes, before the answer was complete"
            ) from exc
        if isinstance(exc, httpx2.RemoteProtocolError) and "disconnected" not in str(exc).lower():
            raise HubMalformed(what, f"not an HTTP answer ({exc})") from exc
        raise HubUnreachable(what, exc) from exc


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def _read(response: httpx2.Response, what: str, limit: int, cut: bool, skip: int, deadline: Deadline) -> Answer:
    status = response.status_code
    headers = response.headers
    if status != 200:
        skip = 0
    if status >= 400:
        limit, cut = MAX_ERROR_BODY, True
    encoding = headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        # We ask for identity: byte ranges and size caps are about the file's own bytes, and a
        # compressed body could expand past any cap before the first check.
        raise HubMalformed(what, f"a {encoding[:40]!r}-encoded body although identity was asked")
    declared = headers.get("Content-Length")
    if declared is not None and not cut and not skip:
        size = int(declared) if declared.strip().isdigit() and len(declared.strip()) <= 20 else None
        if size is None:
            raise HubMalformed(what, f"Content-Length {declared[:40]!r} is not a number")
        if size > limit:
            raise HubTooLarge(what, limit, size)
    data = bytearray()
    received = 0
    complete = False
    try:
        for chunk in response.iter_raw():
            received += len(chunk)
            deadline.received = received
            if skip:
                dropped = min(skip, len(chunk))
                chunk = chunk[dropped:]
                skip -= dropped
            data += chunk
            if cut and len(data) >= limit:
                break
            if len(data) > limit:
                raise HubTooLarge(what, limit, None)
        else:
            complete = True
    except (httpx2.RemoteProtocolError, httpx2.ReadError):
        if not cut or deadline.expired:
            raise
        # A ranged read keeps what arrived; its caller asks for the rest.
    return Answer(status, headers, bytes(data[:limit]), complete, str(response.url), received)


def retry_after(headers: httpx2.Headers) -> float | None:
    """Seconds a `Retry-After` header asks for (a number, or an HTTP date); None if absent or junk."""
    value = (headers.get("Retry-After") or "").strip()
    if not value or len(value) > 64:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(when.timestamp() - time.time(), 0.0)
