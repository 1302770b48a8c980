"""A hostile server for `smoke-test --server`, on raw sockets on 127.0.0.1.

Raw sockets, not http.server: a hostile answer is bytes the standard library would never send
(a header line of 200 KB, 100,000 headers, a Content-Length that lies, a status line that is not
HTTP, a body that stops half way, an answer that never starts). Each route is a function that
gets the connection and the parsed request and writes whatever it likes.

By default it behaves as a healthy speculating vLLM server: `/v1/models` (owned_by "vllm"),
`/version`, `/metrics` with the four `vllm:spec_decode_*` counters advancing with each
completion (K = 4, every step accepts 3), `/v1/completions` and `/v1/chat/completions`. A case
replaces the routes it is about (tests/hostile/smoke_cases.py).

Every wait is bounded: by its own length, by `stop()`, or by MAX_HOLD_SECONDS.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_HOLD_SECONDS = 30.0
K = 4
ACCEPTED_PER_STEP = 3  # positions 0..2 of 4 accepted every step: vLLM's AL 4.0


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


Handler = Callable[["Connection", Request], None]


class Connection:
    """One accepted connection; handlers write to it."""

    def __init__(self, sock: socket.socket, server: HostileServer) -> None:
        self.sock = sock
        self.server = server

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False  # the client hung up: what a bounded client does

    def hold(self, seconds: float = MAX_HOLD_SECONDS) -> None:
        """Keep the connection open, sending nothing, until `seconds`, stop() or the client leaves."""
        end = time.monotonic() + min(seconds, MAX_HOLD_SECONDS)
        self.sock.settimeout(0.05)
        while time.monotonic() < end and not self.server.stopping.is_set():
            try:
                if self.sock.recv(1) == b"":
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    def respond(
        self, status: int, body: bytes, content_type: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        head = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        head.append("Connection: close")
        self.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)

    def json(self, document: Any, status: int = 200) -> None:
        self.respond(status, json.dumps(document).encode())


def _read_request(sock: socket.socket) -> Request | None:
    sock.settimeout(5.0)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk or len(data) > 1024 * 1024:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = (lines[0].split(" ") + ["", ""])[:3]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Request(method, path, headers, rest[:length])


@dataclass
class Counters:
    drafts: int = 100  # traffic before the smoke test
    draft_tokens: int = 400
    accepted: int = 300
    per_position: list[int] = field(default_factory=lambda: [100, 100, 100, 0])


class HostileServer:
    """Routes by exact path; `routes[path] = handler` replaces one."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.counters = Counters()
        self.stopping = threading.Event()
        self.routes: dict[str, Handler] = {
            "/v1/models": lambda c, r: c.json({"object": "list", "data": [{"id": "m", "owned_by": "vllm"}]}),
            "/version": lambda c, r: c.json({"version": "0.34.0"}),
            "/metrics": lambda c, r: c.respond(200, self.metrics_text().encode(), "text/plain; version=0.0.4"),
            "/v1/completions": lambda c, r: c.json(self.completion(r)),
            "/v1/chat/completions": lambda c, r: c.json(self.completion(r)),
        }
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        # A blocked accept() is not woken by close(): it times out to look at `stopping`. Set here,
        # not in the acceptor thread: a server stopped before that thread runs has closed the
        # socket, and settimeout() on it raised "Bad file descriptor" in the thread.
        self._sock.settimeout(0.05)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self) -> HostileServer:
        self._acceptor.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        self._acceptor.join(timeout=5)
        for thread in list(self._threads):
            thread.join(timeout=5)

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                sock, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(None)
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            try:
                request = _read_request(sock)
            except (OSError, ValueError):
                return
            if request is None:
                return
            with self._lock:
                self.requests.append(request)
            handler = self.routes.get(request.path.split("?")[0])
            connection = Connection(sock, self)
            if handler is None:
                connection.json({"detail": "Not Found"}, 404)
                return
            with contextlib.suppress(OSError):
                handler(connection, request)

    # ---- the healthy server ------------------------------------------------------------------

    def metrics_text(self) -> str:
        c = self.counters
        lines = [
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {c.drafts}',
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {c.draft_tokens}',
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {c.accepted}',
        ]
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{i}"}} {n}'
            for i, n in enumerate(c.per_position)
        ]
        return "\n".join(lines) + "\n"

    def completion(self, request: Request, token_ids: Any = None) -> dict[str, Any]:
        body = request.json() or {}
        tokens = int(body.get("max_tokens", 16))
        steps = -(-tokens // (1 + ACCEPTED_PER_STEP))
        with self._lock:
            c = self.counters
            c.drafts += steps
            c.draft_tokens += steps * K
            c.accepted += steps * ACCEPTED_PER_STEP
            c.per_position = [n + (steps if i < ACCEPTED_PER_STEP else 0) for i, n in enumerate(c.per_position)]
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        choice["token_ids"] = list(range(tokens)) if token_ids is None else token_ids
        if "messages" in body:
            choice["message"] = {"role": "assistant", "content": "x"}
        else:
            choice["text"] = "x"
        return {"id": "cmpl-1", "choices": [choice], "usage": {"completion_tokens": tokens, "prompt_tokens": 3}}
