"""The HTTP side of `smoke-test --server`: one bounded client per measured server.

Every request goes through the shared policy (`dflash_tools.reading.http`): a deadline that
shuts the socket down when it passes, capped bodies, redirects that never carry the API key to
another origin, and failure classes. This module adds what a measured server needs:

- two clocks. `--timeout` (`timeout_s`) bounds the connection, every read of a body once its
  headers arrived, and each small request whole (`/v1/models`, `/metrics`, `/server_info`);
  `--run-timeout` (`run_timeout_s`) bounds the whole measurement, generation requests included
  (a completion of 2,048 tokens may take minutes before its first byte, so only the run's clock
  can bound the wait for its headers);
- JSON read within limits of size, value count and nesting (`reading.json_hazards.loads_bounded`);
- one-line errors with the exit class of what went wrong: the server cannot be reached, does not
  answer in time, is not HTTP or refuses the key: `SourceError` (exit 2); it answers, but with an
  error status or an answer that cannot be used: `OperationError` (exit 1); the URL itself cannot
  be used: `UsageError` (exit 2);
- `abort()`: when one of several concurrent requests fails, the others end at once;
- secrets kept out of sight: the API key and the value of every cookie a server tried to set
  (none is ever stored or sent back: `reading.http` has no cookie jar) are replaced by *** in every
  message (`redact`; a server may echo them in an error body) and, through `smoke.server`, in the
  result document.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from dflash_tools.errors import DflashToolsError, OperationError, SourceError, UsageError
from dflash_tools.reading.http import (
    Deadline,
    HttpIncomplete,
    HttpIOError,
    HttpMalformed,
    HttpTimeout,
    HttpTooLarge,
    HttpUnreachable,
    exchange,
    redact,
)
from dflash_tools.reading.json_hazards import JsonRefused, loads_bounded

# Caps on what a server may send for each kind of request (bytes; JSON values).
SMALL_ANSWER_BYTES = 1024 * 1024  # /version, /model_info
LIST_ANSWER_BYTES = 4 * 1024 * 1024  # /v1/models, /server_info
METRICS_BYTES = 32 * 1024 * 1024  # a Prometheus page with every histogram of a large deployment
SMALL_ANSWER_VALUES = 200_000
# A completion carries its text, its token ids and a few hundred values of metadata.
COMPLETION_BASE_BYTES = 4 * 1024 * 1024
COMPLETION_BYTES_PER_TOKEN = 256
COMPLETION_BASE_VALUES = 20_000
COMPLETION_VALUES_PER_TOKEN = 8

KEY_HINT = "pass the server's key with --api-key (or DFLASH_TOOLS_API_KEY)"


def one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def base_url(url: str) -> str:
    """The server's root, from what a user passes: `http://host:8000`, `.../v1` or `.../v1/`."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def check_url(url: str) -> str:
    """The server's root; a `UsageError` for a URL no request should be built from."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise UsageError(
            f"--server {url!r}: the URL holds a space or a control character", "pass the server's address alone"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--server {url!r}: not an http(s) URL", "pass e.g. http://127.0.0.1:8000")
    if parts.username is not None or parts.password is not None:
        raise UsageError(
            f"--server {parts.scheme}://...@{parts.hostname}: the URL holds credentials",
            "pass the key with --api-key instead; a URL's credentials end up in logs and process lists",
        )
    if parts.query or parts.fragment:
        raise UsageError(f"--server {url!r}: the URL holds a query or fragment", "pass the server's address alone")
    try:
        parts.port  # noqa: B018 (a port out of range raises here)
    except ValueError:
        raise UsageError(f"--server {url!r}: the port is not a number from 0 to 65535", "fix the URL") from None
    return base_url(url)


@dataclass
class Reply:
    status: int
    body: bytes
    url: str


class RunClock:
    """The run's wall clock (`--run-timeout`), started when the measurement starts."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expires = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.expires - time.monotonic()


class ServerClient:
    """Requests to one server within the run's clock; failures become one-line errors."""

    def __init__(self, url: str, *, api_key: str | None, timeout_s: float, run_timeout_s: float) -> None:
        self.base = check_url(url)
        self.api_key = api_key
        # What is never shown: the key, and every cookie value a server tried to set.
        self.cookies_seen: set[str] = set()
        self.timeout_s = timeout_s
        self.clock = RunClock(run_timeout_s)
        self._active: set[Deadline] = set()
        self._lock = threading.Lock()
        self._aborted = False

    # ---- requests ---------------------------------------------------------------------------

    def _headers(self, json_body: bool) -> dict[str, str]:
        headers = {"Accept": "application/json, text/plain", "Accept-Encoding": "identity"}
        if json_body:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            # SGLang and vLLM both read `Authorization: Bearer KEY` (sglang srt/utils/auth.py;
            # vllm entrypoints/serve/middleware/authenticate.py).
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def request(
        self, path: str, *, limit: int, payload: Any = None, generation: bool = False, accept_errors: bool = False
    ) -> Reply:
        """GET (or POST `payload` as JSON) `path`, within --timeout, or the run's clock when `generation`.

        With `accept_errors`, an HTTP error status is returned rather than raised (a probe).
        """
        endpoint = f"{self.base}{path}"
        remaining = self.clock.remaining()
        if remaining <= 0 or self._aborted:
            raise self._run_timeout(endpoint, "before the request was sent")
        seconds = remaining if generation else min(self.timeout_s, remaining)
        deadline = Deadline(seconds)
        content = None if payload is None else json.dumps(payload).encode("utf-8")
        with self._lock:
            self._active.add(deadline)
        try:
            answer = exchange(
                endpoint,
                what=path,
                headers=self._headers(content is not None),
                deadline=deadline,
                limit=limit,
                method="GET" if content is None else "POST",
                content=content,
                connect_timeout=self.timeout_s,
                stall_timeout=self.timeout_s,
                cookies_seen=self.cookies_seen,
            )
        except HttpIOError as exc:
            raise self._error(endpoint, exc, seconds) from None
        finally:
            with self._lock:
                self._active.discard(deadline)
        if answer.status >= 400 and not accept_errors:
            raise self.status_error(endpoint, answer.status, answer.body)
        return Reply(answer.status, answer.body, answer.url)

    def get_json(self, path: str, *, limit: int = LIST_ANSWER_BYTES, values: int = SMALL_ANSWER_VALUES) -> Any:
        return self.parse_json(self.request(path, limit=limit), values=values)

    def post_json(self, path: str, payload: dict[str, Any], *, max_tokens: int) -> Any:
        limit = COMPLETION_BASE_BYTES + COMPLETION_BYTES_PER_TOKEN * max_tokens
        reply = self.request(path, limit=limit, payload=payload, generation=True)
        return self.parse_json(reply, values=COMPLETION_BASE_VALUES + COMPLETION_VALUES_PER_TOKEN * max_tokens)

    def probe_json(self, path: str, *, limit: int = SMALL_ANSWER_BYTES) -> tuple[int, Any]:
        """(status, the JSON body or None) of a GET that may fail: engine detection."""
        reply = self.request(path, limit=limit, accept_errors=True)
        if reply.status != 200:
            return reply.status, None
        try:
            return reply.status, loads_bounded(reply.body, max_values=SMALL_ANSWER_VALUES)
        except JsonRefused:
            return reply.status, None

    def parse_json(self, reply: Reply, *, values: int) -> Any:
        try:
            return loads_bounded(reply.body, max_values=values)
        except JsonRefused as exc:
            raise OperationError(
                f"{reply.url}: the answer is {exc}", "is this an OpenAI-compatible vLLM or SGLang server?"
            ) from None

    def text(self, path: str, *, limit: int = METRICS_BYTES) -> str | None:
        """A text page (`/metrics`), or None when the server has no such page (404)."""
        reply = self.request(path, limit=limit, accept_errors=True)
        if reply.status == 404:
            return None
        if reply.status >= 400:
            raise self.status_error(f"{self.base}{path}", reply.status, reply.body)
        return reply.body.decode("utf-8", errors="replace")

    # ---- concurrency ------------------------------------------------------------------------

    def abort(self) -> None:
        """End every request in flight (another one failed); later requests are refused."""
        with self._lock:
            self._aborted = True
            active = list(self._active)
        for deadline in active:
            deadline.abort()

    # ---- secrets ----------------------------------------------------------------------------

    @property
    def secrets(self) -> frozenset[str]:
        found = set(self.cookies_seen)
        if self.api_key and len(self.api_key) >= 4:
            found.add(self.api_key)
        return frozenset(found)

    def redact(self, text: str) -> str:
        """`text` without the API key or a cookie value (each replaced by ***)."""
        return redact(text, self.secrets)

    # ---- errors -----------------------------------------------------------------------------

    def _run_timeout(self, endpoint: str, phase: str) -> OperationError:
        return OperationError(
            f"{endpoint}: the measurement did not finish within --run-timeout {self.clock.seconds:g}s ({phase})",
            "pass a larger --run-timeout, fewer prompts or fewer --max-tokens",
        )

    def _error(self, endpoint: str, exc: HttpIOError, seconds: float) -> DflashToolsError:
        if self._aborted:
            return OperationError(f"{endpoint}: stopped, another request failed", "see the first error")
        if isinstance(exc, HttpTimeout):
            if self.clock.remaining() <= 0.05:
                return self._run_timeout(endpoint, exc.phase)
            arrived = f", {exc.received} bytes had arrived" if exc.received else ""
            return SourceError(
                f"{endpoint}: the server sent no complete answer within {exc.seconds:g}s ({exc.phase}{arrived})",
                "is the server overloaded or stuck? pass a larger --timeout to wait longer",
            )
        if isinstance(exc, HttpUnreachable):
            cause = one_line(self.redact(str(exc.cause))) or type(exc.cause).__name__
            return SourceError(
                f"{endpoint}: cannot reach the server ({cause})",
                "is the server (`vllm serve`, `python -m sglang.launch_server`) running at that address?",
            )
        if isinstance(exc, HttpIncomplete):
            return SourceError(
                f"{endpoint}: the server sent an incomplete answer ({one_line(self.redact(exc.detail))})",
                "retry; if it persists, check the server log or a proxy in between",
            )
        if isinstance(exc, HttpTooLarge):
            size = f" ({exc.size:,} bytes announced)" if exc.size else ""
            return OperationError(
                f"{endpoint}: the answer is {exc.detail}{size}: not read",
                "no vLLM or SGLang answer is that large: is a proxy answering?",
            )
        if isinstance(exc, HttpMalformed):
            return SourceError(
                f"{endpoint}: the server sent a malformed answer: {one_line(self.redact(exc.detail))}",
                "is this the address of a vLLM or SGLang server?",
            )
        return SourceError(f"{endpoint}: {one_line(self.redact(str(exc)))}", "check the server's address")

    def status_error(self, endpoint: str, status: int, body: bytes) -> DflashToolsError:
        # Redacted before it is cut: a key cut in half would no longer match.
        detail = one_line(self.redact(body[:8000].decode("utf-8", errors="replace")))
        suffix = f": {detail}" if detail else ""
        if status in (401, 403):
            refused = "refused the API key" if self.api_key else "needs an API key"
            return SourceError(f"{endpoint}: the server {refused} (HTTP {status}){suffix}", KEY_HINT)
        return OperationError(f"{endpoint}: HTTP {status}{suffix}", "check the server log")
