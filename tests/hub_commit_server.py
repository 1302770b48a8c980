"""A stand-in for the Hugging Face Hub's write endpoints, served over real HTTP on 127.0.0.1.

It answers what `HfApi.upload_folder` / `create_commit` / `create_repo` call, so uploads are
tested through huggingface_hub's own code with no network:

- `POST /api/repos/create` (create_repo),
- `POST /api/models/{repo}/preupload/{revision}`: every file is a "regular" git blob (sent
  base64 inside the commit), so neither LFS nor Xet transfers are involved,
- `POST /api/models/{repo}/discussions` and `GET .../discussions/{num}` (pull requests),
- `POST /api/models/{repo}/commit/{revision}` (ndjson payload, `?create_pr=1`),
- `GET /api/models/{repo}[/revision/{rev}]` (repo_info after an empty commit).

Every commit is recorded with its revision and decoded files, for the test to compare.

    with HubCommitServer() as hub:
        hub.add_repo("me/draft")
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class RecordedCommit:
    repo_id: str
    revision: str
    summary: str
    description: str
    files: dict[str, bytes]
    deleted: list[str]
    create_pr: bool
    oid: str


@dataclass
class PullRequest:
    num: int
    title: str
    description: str


@dataclass
class _Repo:
    repo_id: str
    pulls: list[PullRequest] = field(default_factory=list)
    head: str = "0" * 40


class HubCommitServer:
    def __init__(self) -> None:
        self.repos: dict[str, _Repo] = {}
        self.commits: list[RecordedCommit] = []
        self.created: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def add_repo(self, repo_id: str) -> None:
        self.repos.setdefault(repo_id, _Repo(repo_id))

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> HubCommitServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.hub = self  # type: ignore[attr-defined]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> HubCommitServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    @property
    def hub(self) -> HubCommitServer:
        return self.server.hub  # type: ignore[attr-defined, no-any-return]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _not_found(self, message: str) -> None:
        self._json(404, {"error": message}, {"X-Error-Code": "RepoNotFound", "X-Error-Message": message})

    def _repo(self, repo_id: str) -> _Repo | None:
        with self.hub._lock:
            return self.hub.repos.get(repo_id)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        with self.hub._lock:
            self.hub.requests.append(("GET", path))
        if path.startswith("/api/models/") and "/discussions/" in path:
            head, _, num = path[len("/api/models/") :].rpartition("/discussions/")
            repo = self._repo(head)
            if repo is None or not num.isdigit() or int(num) > len(repo.pulls):
                return self._not_found("no such discussion")
            pull = repo.pulls[int(num) - 1]
            return self._json(200, _discussion(repo.repo_id, pull))
        if path.startswith("/api/models/"):
            repo_id = path[len("/api/models/") :].split("/revision/")[0]
            repo = self._repo(repo_id)
            if repo is None:
                return self._not_found("Repository not found")
            return self._json(
                200, {"id": repo_id, "modelId": repo_id, "sha": repo.head, "siblings": [], "private": False}
            )
        self._not_found("unknown endpoint")

    def do_POST(self) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        body = self._body()
        with self.hub._lock:
            self.hub.requests.append(("POST", path))
        if path == "/api/repos/create":
            payload = json.loads(body or b"{}")
            name = payload.get("name", "")
            repo_id = f"{payload['organization']}/{name}" if payload.get("organization") else name
            with self.hub._lock:
                exists = repo_id in self.hub.repos
                self.hub.repos.setdefault(repo_id, _Repo(repo_id))
                self.hub.created.append(repo_id)
            if exists:
                return self._json(
                    409, {"error": "You already created this model repo", "url": f"{self.hub.url}/{repo_id}"}
                )
            return self._json(200, {"url": f"{self.hub.url}/{repo_id}", "name": repo_id, "id": repo_id})
        if not path.startswith("/api/models/"):
            return self._not_found("unknown endpoint")
        rest = path[len("/api/models/") :]
        for marker in ("/preupload/", "/commit/", "/discussions"):
            if marker in rest:
                repo_id, _, tail = rest.partition(marker)
                break
        else:
            return self._not_found("unknown endpoint")
        repo = self._repo(repo_id)
        if repo is None:
            return self._not_found("Repository not found")
        if marker == "/preupload/":
            files = json.loads(body).get("files", [])
            return self._json(
                200,
                {
                    "files": [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None} for f in files
                    ]
                },
            )
        if marker == "/discussions":
            payload = json.loads(body)
            with self.hub._lock:
                pull = PullRequest(len(repo.pulls) + 1, payload.get("title", ""), payload.get("description", ""))
                repo.pulls.append(pull)
            return self._json(200, {"num": pull.num, "url": f"{self.hub.url}/{repo_id}/discussions/{pull.num}"})
        return self._commit(repo, tail, body, "1" in query.get("create_pr", []))

    def _commit(self, repo: _Repo, revision: str, body: bytes, create_pr: bool) -> None:
        summary, description = "", ""
        files: dict[str, bytes] = {}
        deleted: list[str] = []
        for line in body.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            value = item["value"]
            if item["key"] == "header":
                summary, description = value.get("summary", ""), value.get("description", "")
            elif item["key"] == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif item["key"] in ("deletedFile", "deletedFolder"):
                deleted.append(value["path"])
            else:
                return self._json(400, {"error": f"unsupported commit entry {item['key']}"})
        oid = hashlib.sha1(body).hexdigest()
        pr_url = None
        with self.hub._lock:
            if create_pr:
                pull = PullRequest(len(repo.pulls) + 1, summary, description)
                repo.pulls.append(pull)
                pr_url = f"{self.hub.url}/{repo.repo_id}/discussions/{pull.num}"
            if not revision.startswith("refs/pr/") and not create_pr:
                repo.head = oid
            self.hub.commits.append(
                RecordedCommit(repo.repo_id, revision, summary, description, files, deleted, create_pr, oid)
            )
        self._json(
            200,
            {"commitUrl": f"{self.hub.url}/{repo.repo_id}/commit/{oid}", "commitOid": oid, "pullRequestUrl": pr_url},
        )


def _discussion(repo_id: str, pull: PullRequest) -> dict[str, Any]:
    return {
        "num": pull.num,
        "title": pull.title,
        "status": "draft",
        "isPullRequest": True,
        "createdAt": "2026-01-01T00:00:00.000Z",
        "author": {"name": "tester"},
        "repo": {"name": repo_id, "type": "model"},
        "events": [],
        "changes": {"base": "refs/heads/main"},
        "filesWithConflicts": [],
        "diff": "",
    }
