"""The Hub I/O policy: every request that reads a Hub repo goes through `request`.

A request has one deadline, `--timeout` seconds from its start. It bounds everything: the
connection, every read, the whole body, the redirects, the retries and the waits between them.
A body is read up to a cap, never further, and one whose `Content-Length` is over the cap is not
read at all. Failures are classes of their own (`HttpIOError`) naming the file and the cause.
The deadline, the caps, the redirects and the failure classes are the policy every server gets
(`dflash_tools.reading.http`); what is the Hub's own is here: the retries, the offline switch,
and the Hub's error answers.

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

import time

import httpx2
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled
from huggingface_hub.utils import hf_raise_for_status

from dflash_tools.reading.http import (
    BoundedResponse,
    Deadline,
    HttpIncomplete,
    HttpMalformed,
    HttpRateLimited,
    HttpTimeout,
    HttpUnreachable,
    client,
    exchange,
    format_seconds,
    retry_after,
)

__all__ = [
    "BoundedResponse",
    "Deadline",
    "format_seconds",
    "request",
    "retry_after",
]

# Retries after the first attempt, for answers that say "try again" and for broken connections.
MAX_RETRIES = 2
# Waits between attempts without a Retry-After: 0.5 s, then 1 s; never more than BACKOFF_CAP.
BACKOFF_FIRST = 0.5
BACKOFF_CAP = 2.0
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


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
) -> BoundedResponse:
    """GET `url` within `deadline`, reading at most `limit` body bytes.

    Over the limit: `HttpTooLarge`, or with `cut` the first `limit` bytes (a ranged read that only
    needs a prefix). `skip` drops that many bytes of a 200 answer first: a server that ignored
    `Range` sends the file from byte 0.
    A 4xx/5xx answer not in `accept` raises huggingface_hub's error for it (`hf_raise_for_status`)
    once the retries are spent. Everything else that goes wrong is a `HttpIOError`.
    """
    from dflash_tools.reading.checkpoint import is_offline

    if is_offline():
        raise OfflineModeIsEnabled(f"Cannot reach {url}: offline mode is enabled (HF_HUB_OFFLINE)")
    client()  # built before the clock starts
    deadline.start()
    backoff = BACKOFF_FIRST
    attempt = 0
    refused: BoundedResponse | None = None  # the last "try again" answer: the cause, should a retry time out
    while True:
        attempt += 1
        try:
            answer = exchange(
                url, what=what, headers=headers, deadline=deadline, limit=limit, params=params, cut=cut, skip=skip
            )
        except (HttpUnreachable, HttpIncomplete, HttpTimeout):
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
                    raise HttpRateLimited(what, answer.status, asked, deadline.seconds)
                return _checked(answer, accept, what)
        time.sleep(wait)
        backoff = min(backoff * 2, BACKOFF_CAP)


def _checked(answer: BoundedResponse, accept: frozenset[int], what: str) -> BoundedResponse:
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
            raise HttpMalformed(
                what, f"HTTP {answer.status} with an error answer that cannot be read ({exc})"
            ) from None
    return answer
