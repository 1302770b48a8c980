"""`smoke-test --server URL` against a local stand-in vLLM server on 127.0.0.1.

The server answers `/v1/models` (owned_by "vllm", as vLLM's model cards say), `/version`,
`/v1/completions`, `/v1/chat/completions` and `/metrics`, the last as a real Prometheus text
exposition (prometheus_client) of the counters vLLM 0.33.0 registers; each completion advances
them as a speculating server would. SGLang servers: tests/smoke/test_smoke_sglang_server.py;
hostile servers: tests/hostile/test_hostile_smoke_server.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from typer.testing import CliRunner

import dflash_tools_testing as testing
from dflash_tools.cli import app
from dflash_tools.errors import OperationError, SourceError
from dflash_tools.smoke.server import ServerOptions, run_server, served_model

runner = CliRunner()


class FakeVllmServer:
    """K draft positions; every request drafts `steps` times with a fixed acceptance pattern."""

    def __init__(
        self,
        k: int = 7,
        accepted: tuple[int, ...] = (1, 1, 1, 1, 1, 0, 0),
        models: tuple[str, ...] = ("Qwen/Qwen3.8-27B",),
    ) -> None:
        self.k = k
        self.accepted = accepted
        self.models = models
        self.speculating = True
        self.owned_by = "vllm"
        self.version_route = True
        self.requests: list[dict[str, Any]] = []
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.drafts = Counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels, registry=self.registry
        )
        self.draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels, registry=self.registry
        )
        self.accepted_tokens = Counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels, registry=self.registry
        )
        self.per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [*labels, "position"],
            registry=self.registry,
        )
        for position in range(k):
            self.per_pos.labels(models[0], "0", str(position))
        self.drafts.labels(models[0], "0").inc(100)  # traffic before the smoke test
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeVllmServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(body)
        tokens = body["max_tokens"]
        per_step = 1 + sum(self.accepted)
        steps = -(-tokens // per_step)
        model = body["model"]
        self.drafts.labels(model, "0").inc(steps)
        self.draft_tokens.labels(model, "0").inc(steps * self.k)
        self.accepted_tokens.labels(model, "0").inc(steps * sum(self.accepted))
        for position, hit in enumerate(self.accepted):
            self.per_pos.labels(model, "0", str(position)).inc(steps * hit)
        ids = [(len(self.requests) * 31 + i) % 500 for i in range(tokens)]
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "token_ids": ids}
        if "messages" in body:
            choice["message"] = {"role": "assistant", "content": "x" * tokens}
        else:
            choice["text"] = "x" * tokens
        return {"id": "cmpl-1", "choices": [choice], "usage": {"completion_tokens": tokens, "prompt_tokens": 5}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    text = (
                        generate_latest(server.registry) if server.speculating else b"vllm:num_requests_running 0.0\n"
                    )
                    self._send(200, text, CONTENT_TYPE_LATEST)
                elif self.path == "/v1/models":
                    listed = [{"id": m, "object": "model", "owned_by": server.owned_by} for m in server.models]
                    self._send(200, json.dumps({"object": "list", "data": listed}).encode())
                elif self.path == "/version" and server.version_route:
                    self._send(200, b'{"version": "0.34.0"}')
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                if self.path in ("/v1/completions", "/v1/chat/completions"):
                    if body.get("model") not in server.models:
                        self._send(404, b'{"error": "model not found"}')
                        return
                    self._send(200, json.dumps(server._complete(body)).encode())
                else:
                    self._send(404, b'{"error": "not found"}')

        return Handler


@pytest.fixture
def server() -> Iterator[FakeVllmServer]:
    with FakeVllmServer() as running:
        yield running


def test_measures_deltas_around_the_requests(server: FakeVllmServer) -> None:
    result = run_server(ServerOptions(url=server.url, prompts=["a", "b", "c"], max_tokens=24, concurrency=2))
    # 24 tokens at 6 per step: 4 draft steps per request, 5 of 7 positions accepted each time.
    assert result["num_drafts"] == 12  # the 100 drafts from before the test are not counted
    assert result["num_draft_tokens"] == 84
    assert result["num_accepted_tokens"] == 60
    assert result["accepted_per_position"] == [12, 12, 12, 12, 12, 0, 0]
    assert result["mean_acceptance_length"] == pytest.approx(6.0)
    assert result["acceptance_rate_per_position"][:2] == [1.0, 1.0]
    assert result["output_tokens"] == 72
    assert len(result["outputs"]) == 3 and all(len(ids) == 24 for ids in result["outputs"])
    assert result["baseline"] is None and result["engine"] == "vllm-server"
    assert [r["temperature"] for r in server.requests] == [0.0] * 3
    assert all(r["model"] == "Qwen/Qwen3.8-27B" and r["return_token_ids"] for r in server.requests)


def test_chat_requests(server: FakeVllmServer) -> None:
    result = run_server(ServerOptions(url=server.url + "/v1", prompts=["hi"], max_tokens=6, chat=True))
    assert result["num_drafts"] == 1
    request = server.requests[0]
    assert request["messages"] == [{"role": "user", "content": "hi"}]
    assert request["chat_template_kwargs"] == {"enable_thinking": False}


def test_server_without_speculation(server: FakeVllmServer) -> None:
    server.speculating = False
    with pytest.raises(OperationError, match="no speculative-decoding counters") as raised:
        run_server(ServerOptions(url=server.url, prompts=["a"], max_tokens=4))
    assert raised.value.message.startswith(f"the server at {server.url} serves without speculative decoding")
    assert "\n" not in raised.value.message


def test_unreachable_and_ambiguous_servers() -> None:
    with FakeVllmServer(models=("a", "b")) as two:
        with pytest.raises(OperationError, match="lists 2 models"):
            served_model(two.url, None, 5)
        url = two.url
    with pytest.raises(SourceError, match="cannot reach the server"):
        run_server(ServerOptions(url=url, prompts=["a"], max_tokens=4, timeout_s=2))


def test_cli_server_mode_json(server: FakeVllmServer, tmp_path: Path) -> None:
    draft = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash2", testing.TINY_DFLASH2)
    result = runner.invoke(
        app,
        ["smoke-test", "--server", server.url, "-d", str(draft), "--num-prompts", "2", "--max-tokens", "12", "--json"],
    )
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["mode"] == "server" and document["server"] == server.url
    (entry,) = document["drafts"]
    assert entry["dialect"] == "zlab-dflash2"
    (run,) = entry["runs"]
    assert run["serving"] == "server" and run["num_speculative_tokens"] == 7 and run["num_query_tokens"] == 8
    assert run["result"]["mean_acceptance_length"] == pytest.approx(6.0)
    assert run["verdict"]["status"] == "pass"
    assert entry["verdict"]["status"] == "pass"


def test_cli_server_mode_fails_below_the_floor_and_on_wrong_k(tmp_path: Path) -> None:
    with FakeVllmServer(k=5, accepted=(1, 0, 0, 0, 0)) as server:
        result = runner.invoke(app, ["smoke-test", "--server", server.url, "--floor", "3", "--num-prompts", "1"])
        assert result.exit_code == 1
        assert "FAIL" in result.stdout and "below the floor 3.00" in result.stdout
        draft = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", testing.TINY)
        result = runner.invoke(
            app, ["smoke-test", "--server", server.url, "-d", str(draft), "--num-prompts", "1", "--json"]
        )
        assert result.exit_code == 1
        reasons = json.loads(result.stdout)["drafts"][0]["verdict"]["reasons"]
        assert "the engine drafted 5 positions per step, the plan asked for K = 7" in reasons


def test_cli_server_unreachable_is_a_setup_error() -> None:
    with FakeVllmServer() as server:
        url = server.url
    result = runner.invoke(app, ["smoke-test", "--server", url, "--num-prompts", "1"])
    assert result.exit_code == 2
    assert "cannot reach the server" in result.stderr


def test_both_definitions_side_by_side(server: FakeVllmServer) -> None:
    result = run_server(ServerOptions(url=server.url, prompts=["a", "b"], max_tokens=24))
    lengths = result["acceptance_lengths"]
    # 24 tokens at 6 per step: 4 steps per request; vLLM 1 + 20/4 = 6, SGLang 48 tokens / 8 steps = 6.
    assert lengths["vllm"]["name"] == "vLLM mean acceptance length (1 + accepted / drafts)"
    assert lengths["sglang"]["name"] == "SGLang accept length (completion tokens / verify steps)"
    assert lengths["vllm"]["pooled"] == pytest.approx(6.0) == result["mean_acceptance_length"]
    assert lengths["sglang"]["pooled"] == pytest.approx(48 / 8)
    assert lengths["vllm"]["mean_per_request"] is None  # counters are pooled: no per-request values
    assert (
        result["per_position"]["available"] and result["engine_details"]["detected_by"] == "/v1/models: owned_by 'vllm'"
    )


@pytest.mark.parametrize(
    ("owned_by", "version_route", "detected_by"),
    [("vllm", True, "/v1/models: owned_by 'vllm'"), ("a-proxy", True, "/version answers '0.34.0'"),
     ("a-proxy", False, "/metrics has vllm:* metrics")],
)  # fmt: skip
def test_vllm_is_detected_behind_a_proxy(
    server: FakeVllmServer, owned_by: str, version_route: bool, detected_by: str
) -> None:
    server.owned_by, server.version_route = owned_by, version_route
    result = run_server(ServerOptions(url=server.url, prompts=["a"], max_tokens=6))
    assert result["engine"] == "vllm-server" and result["engine_details"]["detected_by"] == detected_by


def test_protocol_sampling_reaches_the_server(server: FakeVllmServer) -> None:
    from dflash_tools.smoke.workloads.protocols import load_protocol

    card = load_protocol("zlab-card")
    result = run_server(ServerOptions(url=server.url, prompts=["w", "a", "b"], max_tokens=12, protocol=card))
    warmup, *measured = server.requests
    assert warmup["max_tokens"] == 12 and len(measured) == 3  # one warm-up, then every prompt, measured
    assert all(r["temperature"] == 1 and r["top_p"] == 0.95 and r["top_k"] == 20 for r in measured)
    assert measured[0]["chat_template_kwargs"]["enable_thinking"] is True
    assert result["protocol"]["name"] == "zlab-card" and result["num_drafts"] == 3 * 2
