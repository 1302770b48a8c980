"""One bounded HTTP policy for every server the tool talks to: the Hub and the servers it measures.

A request has one deadline (`Deadline`), started with its first byte sent. It bounds everything:
the connection, every read, the whole body, the redirects (and, in the Hub's `request`, the
retries and the waits between them). A body is read up to a cap, never further, and one whose
`Content-Length` is over the cap is not read at all. Failures are classes of their own
(`HttpIOError`) naming what was asked for and the cause, so every caller can turn them into a
one-line error.

Why the requests are sent this way rather than through httpx's defaults or urllib:

- httpx's read timeout restarts with every byte, so a server that sends one byte a second never
  times out, in the headers or in the body; urllib is the same per `recv`. Here a timer shuts the
  connection's socket down when the deadline passes, whatever the server is doing. That needs a
  connection owned by the request (a kept-alive one may be in use elsewhere), so this client keeps
  none alive.
- The response head is capped by the HTTP parser (httpcore2 allows 100 KiB for the status line
  and all headers together, `http11.HTTP11Connection.MAX_INCOMPLETE_EVENT_SIZE`): a header line
  that never ends, or a hundred thousand headers, is a malformed answer, not a hang.
- A redirect is followed here, where its body is not read; one to another origin (scheme, host
  or port) never carries the `Authorization` header, one that is not http(s) is refused, and
  there are at most MAX_REDIRECTS.
- Bodies are asked for as `identity`: a compressed body could expand past any cap before the first
  check, so one sent compressed anyway is a malformed answer.
- There is no cookie jar: a cookie a server sets is never stored, so it never follows a redirect to
  another origin (a jar keys cookies by host, not port); `exchange` hands the values it saw to its
  caller, which redacts them (`redact`) from what it shows, as it does the API key.

DNS resolution is the one step no deadline reaches (the standard library offers no timeout).
"""

from __future__ import annotations

import contextlib
import email.utils
import http.cookiejar
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx2

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
# An error answer's body is only read for its message: a few kilobytes say everything.
MAX_ERROR_BODY = 64 * 1024


class HttpIOError(Exception):
    """A request that ended without a usable answer; `what` names the file or API answer."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what}: {detail}")
        self.what = what
        self.detail = detail


class HttpTimeout(HttpIOError):
    """The deadline passed (connecting, waiting, or while the body was still arriving)."""

    def __init__(self, what: str, seconds: float, phase: str, received: int = 0) -> None:
        super().__init__(what, f"no complete answer within {seconds:g}s ({phase})")
        self.seconds = seconds
        self.phase = phase
        self.received = received


class HttpTooLarge(HttpIOError):
    """The body is larger than the cap for what it is (known before, or while, reading it)."""

    def __init__(self, what: str, limit: int, size: int | None) -> None:
        super().__init__(what, f"larger than {mib(limit)}")
        self.limit = limit
        self.size = size


class HttpMalformed(HttpIOError):
    """The server answered something no server of its kind sends (junk, impossible headers, loops)."""


class HttpRateLimited(HttpIOError):
    """HTTP 429 (or 503) with a Retry-After longer than the deadline leaves."""

    def __init__(self, what: str, status: int, wait: float, timeout: float) -> None:
        super().__init__(what, f"HTTP {status}, asked to wait {format_seconds(wait)}")
        self.status = status
        self.wait = wait
        self.timeout = timeout


class HttpUnreachable(HttpIOError):
    """No connection could be made (refused, reset, DNS, TLS)."""

    def __init__(self, what: str, exc: BaseException) -> None:
        super().__init__(what, type(exc).__name__)
        self.cause = exc


class HttpIncomplete(HttpIOError):
    """The connection closed before the answer was complete (a Content-Length that lied)."""


def mib(limit: int) -> str:
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
    context takes a second on a busy machine) is no part of any answer's time. `abort()` ends
    the request at once from another thread (a run whose other request failed).
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

    def abort(self) -> None:
        self._fire()

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

    def timeouts(self, per_step: float, connect: float | None = None) -> httpx2.Timeout:
        step = max(min(per_step, self.remaining()), 0.001)
        return httpx2.Timeout(step, connect=max(min(connect, step), 0.001) if connect is not None else step)


# --------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------

_CLIENT: httpx2.Client | None = None
_CLIENT_LOCK = threading.Lock()


def client() -> httpx2.Client:
    """The one client: proxies and certificates from the environment (as huggingface_hub's
    default client), no kept-alive connections (see the module docstring), redirects followed
    in `exchange`, where their bodies are not read."""
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None:
            _CLIENT = httpx2.Client(
                follow_redirects=False,
                timeout=None,
                limits=httpx2.Limits(max_keepalive_connections=0),
                trust_env=True,
                # No cookie jar (the module docstring): a policy that stores and sends none.
                cookies=http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
            )
        return _CLIENT


def _reset_client() -> None:
    global _CLIENT
    _CLIENT = None  # a forked child must not share the parent's sockets


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_client)


# --------------------------------------------------------------------------------------------
# One exchange
# --------------------------------------------------------------------------------------------


@dataclass
class BoundedResponse:
    """A response read within its bounds. `complete`: the body ended on its own (not cut, not broken)."""

    status: int
    headers: httpx2.Headers
    body: bytes
    complete: bool
    url: str
    received: int  # body bytes that arrived, including any skipped by the caller


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port if parts.port is not None else {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


def exchange(
    url: str,
    *,
    what: str,
    headers: dict[str, str],
    deadline: Deadline,
    limit: int,
    method: str = "GET",
    content: bytes | None = None,
    params: dict[str, str] | None = None,
    cut: bool = False,
    skip: int = 0,
    connect_timeout: float | None = None,
    stall_timeout: float | None = None,
    cookies_seen: set[str] | None = None,
) -> BoundedResponse:
    """One request to `url` (redirects followed) within `deadline`, reading at most `limit` body bytes.

    Over the limit: `HttpTooLarge`, or with `cut` the first `limit` bytes (a ranged read that
    only needs a prefix). `skip` drops that many bytes of a 200 answer first: a server that
    ignored `Range` sends the file from byte 0. `connect_timeout` bounds the connection alone and
    `stall_timeout` every read of the body once the headers arrived (a server that answers slowly
    but then sends nothing); the deadline bounds everything. Any status is returned (an error
    answer's body is cut at MAX_ERROR_BODY); every failure is an `HttpIOError`. `cookies_seen`
    collects the value of every cookie a response (a redirect's too) tried to set, to redact.
    """
    client()  # built before the clock starts
    deadline.start()
    deadline.phase, deadline.received = "connecting", 0
    try:
        with deadline.armed():
            current, send_method, send_content = url, method, content
            send_headers = dict(headers)
            for _ in range(MAX_REDIRECTS + 1):
                if deadline.expired:
                    raise HttpTimeout(what, deadline.seconds, deadline.phase, deadline.received)
                request = client().build_request(
                    send_method,
                    current,
                    headers=send_headers,
                    content=send_content,
                    params=params if current == url else None,
                    timeout=deadline.timeouts(deadline.seconds, connect_timeout),
                    extensions={"trace": deadline.trace},
                )
                response = client().send(request, stream=True)
                if cookies_seen is not None:
                    cookies_seen.update(cookie_values(response.headers))
                try:
                    location = response.headers.get("Location")
                    if response.status_code in REDIRECT_STATUSES and location:
                        target = urljoin(str(response.url), location)
                        if urlsplit(target).scheme not in ("http", "https"):
                            raise HttpMalformed(what, f"a redirect to a URL that is not http(s): {target[:200]!r}")
                        if origin(target) != origin(current):
                            # As httpx and browsers do: credentials never leave the origin they were sent to.
                            send_headers = {k: v for k, v in send_headers.items() if k.lower() != "authorization"}
                        if response.status_code in (301, 302, 303) and send_method != "GET":
                            # RFC 9110 15.4: these turn a POST into a GET without its body (as httpx does).
                            send_method, send_content = "GET", None
                            send_headers = {k: v for k, v in send_headers.items() if k.lower() != "content-type"}
                        current = target
                        continue
                    deadline.phase = "reading the answer"
                    if stall_timeout is not None:
                        _limit_reads(response, min(stall_timeout, max(deadline.remaining(), 0.001)))
                    return _read(response, what, limit, cut, skip, deadline)
                finally:
                    response.close()
            raise HttpMalformed(what, f"more than {MAX_REDIRECTS} redirects")
    except HttpIOError:
        raise
    except (httpx2.HTTPError, httpx2.InvalidURL, OSError) as exc:
        if deadline.expired:
            raise HttpTimeout(what, deadline.seconds, deadline.phase, deadline.received) from exc
        if isinstance(exc, httpx2.TimeoutException):
            # A bound shorter than the deadline: the connection, or a body that stopped arriving.
            seconds = {"connecting": connect_timeout, "reading the answer": stall_timeout}.get(deadline.phase)
            raise HttpTimeout(what, seconds or deadline.seconds, deadline.phase, deadline.received) from exc
        if isinstance(exc, httpx2.UnsupportedProtocol | httpx2.LocalProtocolError | httpx2.InvalidURL):
            raise HttpMalformed(what, f"{type(exc).__name__}: {exc}") from exc
        if isinstance(exc, httpx2.RemoteProtocolError | httpx2.ReadError) and deadline.phase == "reading the answer":
            raise HttpIncomplete(
                what, f"the connection closed after {deadline.received} bytes, before the answer was complete"
            ) from exc
        if isinstance(exc, httpx2.RemoteProtocolError) and "disconnected" not in str(exc).lower():
            raise HttpMalformed(what, f"not an HTTP answer ({exc})") from exc
        raise HttpUnreachable(what, exc) from exc


def _limit_reads(response: httpx2.Response, seconds: float) -> None:
    """Bound each further read of this response's body by `seconds`.

    httpcore2 looks the read timeout up in the request's `timeout` extension at every read
    (`_sync/http11.py`, `_receive_response_body`), so changing it now applies to the body only.
    """
    timeouts = response.request.extensions.get("timeout")
    if isinstance(timeouts, dict):
        timeouts["read"] = seconds


def _read(
    response: httpx2.Response, what: str, limit: int, cut: bool, skip: int, deadline: Deadline
) -> BoundedResponse:
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
        raise HttpMalformed(what, f"a {encoding[:40]!r}-encoded body although identity was asked")
    declared = headers.get("Content-Length")
    if declared is not None and not cut and not skip:
        size = int(declared) if declared.strip().isdigit() and len(declared.strip()) <= 20 else None
        if size is None:
            raise HttpMalformed(what, f"Content-Length {declared[:40]!r} is not a number")
        if size > limit:
            raise HttpTooLarge(what, limit, size)
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
                raise HttpTooLarge(what, limit, None)
        else:
            complete = True
    except (httpx2.RemoteProtocolError, httpx2.ReadError):
        if not cut or deadline.expired:
            raise
        # A ranged read keeps what arrived; its caller asks for the rest.
    return BoundedResponse(status, headers, bytes(data[:limit]), complete, str(response.url), received)


def cookie_values(headers: httpx2.Headers) -> set[str]:
    """The values of the cookies `Set-Cookie` headers carry (the part after `name=`, before `;`)."""
    values = set()
    for header in headers.get_list("set-cookie")[:100]:
        value = header.split(";", 1)[0].partition("=")[2].strip().strip('"')
        if len(value) >= 4:  # shorter values are no secret, and would blank out ordinary words
            values.add(value[:4096])
    return values


REDACTED = "***"


def redact(text: str, secrets: set[str] | frozenset[str]) -> str:
    """`text` with every secret (an API key, a cookie value) replaced by ***: a server may echo
    them in an error body, and a message goes to terminals and CI logs."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    return text


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
