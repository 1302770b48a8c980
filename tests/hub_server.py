"""A small stand-in for the Hugging Face Hub, served over real HTTP on 127.0.0.1.

It answers the endpoints huggingface_hub calls when `dflash_tools.reading.hub` reads a repo:

- `GET /api/models/{repo}` and `/api/models/{repo}/revision/{rev}` (model_info, with
  `?blobs=true` sizes),
- `GET /api/models?author=&search=&limit=` (list_models),
- `HEAD` / `GET /{repo}/resolve/{rev}/{path}` with `Range` support and the headers
  `hf_hub_download` insists on (`X-Repo-Commit`, `ETag`, `Content-Length`, `Content-Range`),

with the Hub's error headers (`X-Error-Code: RepoNotFound / RevisionNotFound / EntryNotFound /
GatedRepo`). Switches on the server inject faults: gated repos, slow responses, truncated or
short range responses, servers that ignore `Range`; and hostile ones (tests/hostile/hub_cases.py):
answers dripped a byte at a time, stalled bodies, lying Content-Lengths, junk in place of the
answer, redirects, rate limits with Retry-After, huge generated bodies. Every loop that sends is
bounded (by its size, its delay, or the client hanging up). Every response body byte sent for a
file is counted per (repo, file), so tests can prove that only header ranges were served.

Usage::

    with HubServer() as hub:
        hub.add_repo("org/draft", {"config.json": b"{}", "model.safetensors": data})
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from dflash_tools.reading.safetensors_header import encode_header

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def safetensors_bytes(tensors: list[tuple[str, str, tuple[int, ...]]], metadata: dict[str, str] | None = None) -> bytes:
    """A real safetensors file: 8-byte header length, JSON header, zero-filled data."""
    prefix, offsets = encode_header(tensors, metadata)
    data_size = offsets[-1][1] if offsets else 0
    return prefix + bytes(data_size)


def header_size(data: bytes) -> int:
    """8 + the header length of a safetensors file (the bytes a header read needs)."""
    return 8 + int.from_bytes(data[:8], "little")


def _git_sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


@dataclass
class Commit:
    sha: str
    files: dict[str, bytes]


@dataclass
class Repo:
    repo_id: str
    commits: dict[str, Commit] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)  # branch / tag -> commit sha
    gated: bool = False

    def resolve(self, revision: str) -> Commit | None:
        sha = self.refs.get(revision, revision)
        return self.commits.get(sha)


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    query: dict[str, list[str]]
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names


class HubServer:
    """The fake Hub. Mutate the fault switches between calls; they apply to the next request."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self.served: Counter[tuple[str, str]] = Counter()
        # Fault switches.
        self.slow: dict[str, float] = {}  # path substring -> seconds to wait before answering
        self.truncate_ranges_to: int | None = None  # send this many body bytes, then hang up
        self.short_ranges: int | None = None  # honest 206 bodies of at most this many bytes
        self.ignore_range = False  # answer 200 with the whole file
        self.gate_api = False  # gated repos also refuse /api/models (the Hub does not)
        # path substring -> (HTTP status, error message): answered instead of the real response
        # (rate limits, server errors, hostile error text).
        self.fail: dict[str, tuple[int, str]] = {}
        self.content_range: str | None = None  # sent instead of the true Content-Range (a broken proxy)
        # Hostile switches, each keyed by a substring of the request path (the first that matches).
        self.fail_times: dict[str, int] = {}  # `fail` applies this many times, then the real answer
        self.fail_headers: dict[str, dict[str, str]] = {}  # extra headers on a `fail` answer (Retry-After)
        self.fail_body: dict[str, bytes] = {}  # the body of a `fail` answer, in place of its JSON
        self.drip: dict[str, float] = {}  # the whole answer one byte at a time, this many seconds apart
        self.stall_body: dict[str, float] = {}  # status and headers, then this long before the body
        self.lie_length: dict[str, int] = {}  # claim this Content-Length, send the real body, hang up
        self.replace_body: dict[str, bytes] = {}  # answer 200 with these bytes instead of the real body
        self.extra_headers: dict[str, dict[str, str]] = {}  # headers added to the real answer
        self.redirect: dict[str, str] = {}  # answer 302 with this Location
        self.raw: dict[str, bytes] = {}  # send these bytes as the whole answer (not HTTP), hang up
        # A 200 body of N generated bytes (`fill` repeated), with or without a Content-Length.
        self.huge: dict[str, tuple[int, bytes, bool]] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- repo setup ---------------------------------------------------------------------------

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes],
        *,
        revision: str = "main",
        gated: bool = False,
    ) -> str:
        """Add (or extend) a repo with one commit holding `files`; returns the commit sha."""
        repo = self.repos.setdefault(repo_id, Repo(repo_id))
        repo.gated = repo.gated or gated
        sha = _git_sha(f"{repo_id}:{revision}:{len(repo.commits)}:{sorted(files)}")
        repo.commits[sha] = Commit(sha, dict(files))
        repo.refs[revision] = sha
        return sha

    def bytes_served(self, repo_id: str, filename: str) -> int:
        with self._lock:
            return self.served[(repo_id, filename)]

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    def clear_log(self) -> None:
        with self._lock:
            self.requests.clear()
            self.served.clear()

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> HubServer:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False
        httpd.hub = self  # type: ignore[attr-defined]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-hub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- bookkeeping used by the handler ------------------------------------------------------

    def _log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _count(self, repo_id: str, filename: str, n: int) -> None:
        with self._lock:
            self.served[(repo_id, filename)] += n

    def _take_failure(self, fragment: str) -> bool:
        """Whether `fail[fragment]` applies to this request (`fail_times` counts them down)."""
        with self._lock:
            left = self.fail_times.get(fragment)
            if left is None:
                return True
            if left <= 0:
                return False
            self.fail_times[fragment] = left - 1
            return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: simple and close-delimited
    server_version = "FakeHub/1.0"

    @property
    def hub(self) -> HubServer:
        return self.server.hub  # type: ignore[attr-defined,no-any-return]

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_GET(self) -> None:
        self._handle(send_body=True)

    def do_HEAD(self) -> None:
        self._handle(send_body=False)

    # -- dispatch -----------------------------------------------------------------------------

    def _handle(self, *, send_body: bool) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        self.hub._log(
            Request(
                self.command,
                path,
                self.headers.get("Range"),
                query,
                {k.lower(): v for k, v in self.headers.items()},
            )
        )
        for fragment, delay in list(self.hub.slow.items()):
            if fragment in self.path:
                time.sleep(delay)
        for fragment, (status, message) in list(self.hub.fail.items()):
            if fragment in self.path and self.hub._take_failure(fragment):
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._error(status, None, message, send_body, **self.hub.fail_headers.get(fragment, {}))
                return
        if self._hostile(send_body):
            return
        if any(fragment in self.path for fragment in self.hub.drip):
            # Build the real answer in memory, then send it a byte at a time.
            real, self.wfile = self.wfile, io.BytesIO()
            try:
                self._dispatch(parts, path, query, send_body)
                answer = self.wfile.getvalue()
            finally:
                self.wfile = real
            delay = next(d for f, d in self.hub.drip.items() if f in self.path)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for index in range(len(answer)):
                    real.write(answer[index : index + 1])
                    real.flush()
                    time.sleep(delay)
            return
        self._dispatch(parts, path, query, send_body)

    def _hostile(self, send_body: bool) -> bool:
        """Answer with a hostile switch that matches the path; False when none does."""
        hub, path = self.hub, self.path
        try:
            for fragment, data in hub.raw.items():
                if fragment in path:
                    self.wfile.write(data)
                    return True
            for fragment, location in hub.redirect.items():
                if fragment in path:
                    self.send_response(302)
                    self.send_header("Location", location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return True
            for fragment, (size, fill, with_length) in hub.huge.items():
                if fragment in path:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    if with_length:
                        self.send_header("Content-Length", str(size))
                    self.end_headers()
                    block = (fill * (64 * 1024 // len(fill) + 1))[: 64 * 1024]
                    sent = 0
                    while send_body and sent < size:
                        piece = block[: min(len(block), size - sent)]
                        self.wfile.write(piece)
                        sent += len(piece)
                        hub._count("huge", fragment, len(piece))
                    return True
        except (BrokenPipeError, ConnectionResetError):
            return True  # the client hung up: what a bounded reader does
        return False

    def _dispatch(self, parts: Any, path: str, query: dict[str, list[str]], send_body: bool) -> None:
        try:
            if path == "/api/models":
                self._list_models(query, send_body)
            elif path.startswith("/api/models/"):
                self._model_info(parts.path[len("/api/models/") :], query, send_body)
            elif "/resolve/" in parts.path:
                self._resolve(parts.path, send_body)
            else:
                self._error(404, None, "not found", send_body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout, or it had enough bytes)

    def _json(self, status: int, payload: Any, send_body: bool, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        body = self._switch(self.hub.replace_body if status == 200 else self.hub.fail_body, body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(self._switch(self.hub.lie_length, len(body))))
        for key, value in {**(headers or {}), **self._switch(self.hub.extra_headers, {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if send_body:
            self._stall()
            self.wfile.write(body)

    def _switch(self, table: dict[str, Any], default: Any) -> Any:
        return next((value for fragment, value in table.items() if fragment in self.path), default)

    def _stall(self) -> None:
        self.wfile.flush()
        time.sleep(self._switch(self.hub.stall_body, 0.0))

    def _error(self, status: int, code: str | None, message: str, send_body: bool, **extra: str) -> None:
        # HTTP headers are latin-1: hostile (non-latin-1) text goes there escaped, and exact in the body.
        headers = {"X-Error-Message": message.encode("latin-1", "backslashreplace").decode("latin-1"), **extra}
        if code:
            headers["X-Error-Code"] = code
        self._json(status, {"error": message}, send_body, headers)

    # -- /api/models ----------------------------------------------------------------------------

    def _list_models(self, query: dict[str, list[str]], send_body: bool) -> None:
        author = query.get("author", [None])[0]
        search = (query.get("search", [""])[0] or "").lower()
        limit = int(query.get("limit", ["1000"])[0])
        ids = [
            repo_id
            for repo_id in sorted(self.hub.repos)
            if (author is None or repo_id.split("/")[0] == author) and search in repo_id.lower()
        ]
        self._json(200, [{"id": i, "modelId": i} for i in ids[:limit]], send_body)

    def _model_info(self, raw_rest: str, query: dict[str, list[str]], send_body: bool) -> None:
        segments = raw_rest.split("/")
        repo_id = unquote("/".join(segments[:2]))
        revision = "main"
        if len(segments) >= 4 and segments[2] == "revision":
            revision = unquote("/".join(segments[3:]))
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found", send_body)
            return
        if repo.gated and self.hub.gate_api:
            self._error(403, "GatedRepo", "Access to this model is restricted", send_body)
            return
        commit = repo.resolve(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", "Invalid rev id: " + revision, send_body)
            return
        with_sizes = query.get("blobs", [""])[0].lower() == "true"
        siblings = []
        for name, data in sorted(commit.files.items()):
            sibling: dict[str, Any] = {"rfilename": name}
            if with_sizes:
                sibling["size"] = len(data)
                sibling["blobId"] = hashlib.sha1(data).hexdigest()
                if name.endswith(".safetensors"):
                    sibling["lfs"] = {
                        "size": len(data),
                        "sha256": hashlib.sha256(data).hexdigest(),
                        "pointerSize": 134,
                    }
            siblings.append(sibling)
        payload = {
            "_id": commit.sha[:24],
            "id": repo_id,
            "modelId": repo_id,
            "author": repo_id.split("/")[0],
            "sha": commit.sha,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "tags": [],
            "siblings": siblings,
        }
        self._json(200, payload, send_body)

    # -- /{repo}/resolve/{rev}/{file} -----------------------------------------------------------

    def _resolve(self, raw_path: str, send_body: bool) -> None:
        head, _, tail = raw_path.lstrip("/").partition("/resolve/")
        repo_id = unquote(head)
        revision_raw, _, file_raw = tail.partition("/")
        revision, filename = unquote(revision_raw), unquote(file_raw)
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found", send_body)
            return
        if repo.gated:
            self._error(403, "GatedRepo", "Access to model is restricted", send_body)
            return
        commit = repo.resolve(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", "Invalid rev id: " + revision, send_body)
            return
        data = commit.files.get(filename)
        if data is None:
            self._error(404, "EntryNotFound", "Entry not found", send_body, **{"X-Repo-Commit": commit.sha})
            return
        common = {
            "X-Repo-Commit": commit.sha,
            "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        range_header = self.headers.get("Range")
        if range_header is None or self.hub.ignore_range or not send_body:
            self._send_file(200, data, 0, len(data), common, repo_id, filename, send_body, partial=False)
            return
        match = _RANGE.match(range_header.strip())
        if match is None:
            self._error(400, None, "bad range", send_body)
            return
        first_s, last_s = match.groups()
        size = len(data)
        if first_s == "":  # suffix range: the last N bytes
            first, last = max(0, size - int(last_s)), size - 1
        else:
            first = int(first_s)
            last = min(int(last_s), size - 1) if last_s else size - 1
        if first >= size or first > last:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.send_header("X-Repo-Commit", commit.sha)
            self.end_headers()
            return
        if self.hub.short_ranges is not None:
            last = min(last, first + self.hub.short_ranges - 1)
        self._send_file(206, data, first, last + 1, common, repo_id, filename, send_body, partial=True)

    def _send_file(
        self,
        status: int,
        data: bytes,
        start: int,
        end: int,
        headers: dict[str, str],
        repo_id: str,
        filename: str,
        send_body: bool,
        *,
        partial: bool,
    ) -> None:
        replaced = self._switch(self.hub.replace_body, None)
        if replaced is not None:
            data, start, end, status, partial = replaced, 0, len(replaced), 200, False
        self.send_response(status)
        for key, value in {**headers, **self._switch(self.hub.extra_headers, {})}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(self._switch(self.hub.lie_length, end - start)))
        if partial:
            self.send_header("Content-Range", self.hub.content_range or f"bytes {start}-{end - 1}/{len(data)}")
        self.end_headers()
        if not send_body:
            return
        self._stall()
        body = data[start:end]
        if partial and self.hub.truncate_ranges_to is not None:
            body = body[: self.hub.truncate_ranges_to]  # then hang up: Content-Length lied
        step = 64 * 1024
        for offset in range(0, len(body), step):
            piece = body[offset : offset + step]
            # Counted before the write: the client may be done before this thread runs again.
            self.hub._count(repo_id, filename, len(piece))
            self.wfile.write(piece)
        self.wfile.flush()


def point_huggingface_hub_at(monkeypatch: Any, tmp_path: Path, url: str) -> None:
    """Send every huggingface_hub request to `url`, with an empty cache and no saved token.

    huggingface_hub reads its settings once at import, so the constants are patched as well as
    the environment (for child processes).
    """
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-stored-tokens"))
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
