"""`smoke-test --server URL` against SGLang: the stand-in SGLang 0.5.23 server (tests/sglang_server.py).

SGLang cannot run here, so the stand-in follows the released wheel's routes and answers (the
SGLang source tier checks its bodies against the wheel's own models). Its scripted engine makes
every number known in advance (`simulate`), so both definitions of the acceptance length are
checked against what the server actually did.
"""

from __future__ import annotations

import json
from statistics import mean
from typing import Any

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.errors import OperationError, SourceError
from dflash_tools.smoke.server import ServerOptions, run_server
from tests.sglang_server import FakeSglangServer, Outcome, accepted_per_position, simulate

runner = CliRunner()
PATTERNS = [(15,), (0,), (3, 7)]


def expected(outcomes: list[Outcome]) -> dict[str, float]:
    """Both definitions, pooled and per request, from what the stand-in's engine did."""
    steps = sum(o.verify_ct for o in outcomes)
    return {
        "sglang_pooled": sum(o.completion_tokens for o in outcomes) / steps,
        "sglang_mean": mean(o.spec_accept_length for o in outcomes),
        "vllm_pooled": 1 + sum(o.correct_drafts for o in outcomes) / steps,
        "vllm_mean": mean(o.vllm_mean_acceptance_length for o in outcomes),
    }


def test_both_definitions_within_005_of_what_the_server_did() -> None:
    with FakeSglangServer(accept_pattern=lambda i: PATTERNS[i % 3], natural_length=50) as server:
        result = run_server(ServerOptions(url=server.url, prompts=["a", "b", "c"], max_tokens=200))
        served = server.outcomes
    assert served == [
        simulate(200, p, 16, natural_length=50, first_token=o.output_ids[0])
        for p, o in zip(PATTERNS, served, strict=True)
    ]
    want = expected(served)
    lengths = result["acceptance_lengths"]
    assert result["engine"] == "sglang-server"
    assert lengths["sglang"]["name"] == "SGLang accept length (completion tokens / verify steps)"
    assert lengths["vllm"]["name"] == "vLLM mean acceptance length (1 + accepted / drafts)"
    assert abs(lengths["sglang"]["pooled"] - want["sglang_pooled"]) < 0.05
    assert abs(lengths["sglang"]["mean_per_request"] - want["sglang_mean"]) < 0.05
    assert abs(lengths["vllm"]["pooled"] - want["vllm_pooled"]) < 0.05
    assert abs(lengths["vllm"]["mean_per_request"] - want["vllm_mean"]) < 0.05
    # The two definitions differ here by more than the tolerance: each is really the one it names.
    assert abs(want["sglang_mean"] - want["vllm_mean"]) > 0.05
    # The floor's number is vLLM's definition, pooled; the counters are SGLang's own, summed.
    assert result["mean_acceptance_length"] == pytest.approx(want["vllm_pooled"])
    assert result["num_drafts"] == sum(o.verify_ct for o in served)
    assert result["num_accepted_tokens"] == sum(o.correct_drafts for o in served)
    assert result["num_draft_tokens"] == 15 * result["num_drafts"]
    assert result["output_tokens"] == sum(o.completion_tokens for o in served) == 150
    assert result["outputs"] == [list(o.output_ids) for o in served]


def test_per_position_from_the_histogram() -> None:
    with FakeSglangServer(accept_pattern=lambda i: PATTERNS[i % 3]) as server:
        result = run_server(ServerOptions(url=server.url, prompts=["a", "b", "c"], max_tokens=120))
        served = server.outcomes
    total = [0] * 16
    for outcome in served:
        for accepted, steps in enumerate(outcome.histogram):
            total[accepted] += steps
    assert result["accepted_per_position"] == accepted_per_position(total, 15)
    assert result["acceptance_rate_per_position"][0] == pytest.approx(
        result["accepted_per_position"][0] / result["num_drafts"]
    )
    assert result["per_position"]["available"] is True


class NoHistogramServer(FakeSglangServer):
    """An SGLang that reports no histogram (an older release, or a proxy that keeps some keys)."""

    def _meta_info(self, rid: str, outcome: Outcome, prompt_tokens: int) -> dict[str, Any]:
        meta = super()._meta_info(rid, outcome, prompt_tokens)
        meta.pop("spec_correct_drafts_histogram", None)
        return meta


def test_per_position_not_available_is_said() -> None:
    with NoHistogramServer() as server:
        result = run_server(ServerOptions(url=server.url, prompts=["a"], max_tokens=64))
    assert result["accepted_per_position"] == [] and result["acceptance_rate_per_position"] == []
    assert result["per_position"] == {
        "available": False,
        "source": "spec_correct_drafts_histogram of each answer (drafts accepted per verify step)",
        "note": "per-position acceptance: not available (the server reports no spec_correct_drafts_histogram)",
    }
    assert result["mean_acceptance_length"] == pytest.approx(6.0)  # the lengths do not need it


def test_chat_prompts_read_choices_meta_info() -> None:
    with FakeSglangServer() as server:
        result = run_server(ServerOptions(url=server.url, prompts=["hi"], max_tokens=64, chat=True))
        ((path, body),) = [(p, b) for p, b in server.requests]
        served = server.outcomes[-1]
    assert path == "/v1/chat/completions"
    assert body["return_meta_info"] is True and body["return_spec_tokens_details"] is True
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["temperature"] == 0
    assert result["outputs"] == [list(served.output_ids)]  # choices[0].response_token_ids
    assert result["acceptance_lengths"]["sglang"]["pooled"] == pytest.approx(64 / 11)


def test_raw_prompts_go_to_generate() -> None:
    with FakeSglangServer() as server:
        run_server(ServerOptions(url=server.url, prompts=["plain text"], max_tokens=16))
        run_server(ServerOptions(url=server.url, prompts=[[1, 2, 3]], max_tokens=16))
        requests = server.requests
    # /generate refuses unknown sampling keys with HTTP 400: a run that succeeds sent none.
    assert [p for p, _ in requests] == ["/generate", "/generate"]
    assert requests[0][1] == {"text": "plain text", "sampling_params": {"max_new_tokens": 16, "temperature": 0.0}}
    assert requests[1][1]["input_ids"] == [1, 2, 3]


def test_sglang_is_detected_behind_a_proxy() -> None:
    class Proxied(FakeSglangServer):
        def model_card(self) -> dict[str, Any]:
            return {**super().model_card(), "owned_by": "my-router"}

    with Proxied() as server:
        result = run_server(ServerOptions(url=server.url, prompts=["a"], max_tokens=16))
    assert result["engine_details"]["detected_by"] == "/model_info answers SGLang's model info"


def test_api_key_as_sglang_takes_it_and_never_shown() -> None:
    with FakeSglangServer(api_key="sk-secret-1") as server:
        with pytest.raises(SourceError, match=r"needs an API key \(HTTP 401\)"):
            run_server(ServerOptions(url=server.url, prompts=["a"], max_tokens=16))
        with pytest.raises(SourceError, match=r"refused the API key \(HTTP 401\)"):
            run_server(ServerOptions(url=server.url, prompts=["a"], max_tokens=16, api_key="wrong"))
        result = run_server(ServerOptions(url=server.url, prompts=["a"], max_tokens=16, api_key="sk-secret-1"))
    # /server_info echoes the launch arguments, the key among them: nothing of it but the named fields is kept.
    assert "sk-secret-1" not in json.dumps(result)
    assert result["engine_details"]["speculative_algorithm"] == "DFLASH"


def test_server_without_speculation_is_named_in_one_line() -> None:
    with FakeSglangServer(speculative=False) as server:
        with pytest.raises(OperationError) as raised:
            run_server(ServerOptions(url=server.url, prompts=["a"], max_tokens=16))
        url = server.url
    assert raised.value.message == (
        f"the server at {url} serves without speculative decoding (/server_info: speculative_algorithm is null)"
    )


def test_without_server_info_the_answers_say_it() -> None:
    class Hidden(FakeSglangServer):  # behind a proxy that only passes the OpenAI and native routes
        def _handler(self) -> Any:
            handler = super()._handler()
            serve_get = handler.do_GET

            def do_get(request: Any) -> None:
                if request.path.startswith(("/server_info", "/get_server_info")):
                    request._json(404, {"detail": "Not Found"})
                else:
                    serve_get(request)

            handler.do_GET = do_get  # type: ignore[method-assign]
            return handler

    with Hidden(speculative=False) as server:
        with pytest.raises(OperationError) as raised:
            run_server(ServerOptions(url=server.url, prompts=["a", "b"], max_tokens=16))
        url = server.url
    assert raised.value.message == (
        f"the server at {url} serves without speculative decoding (no answer carried speculative-decoding "
        "statistics: no spec_* keys in meta_info)"
    )


def test_one_token_answers_reach_no_verify_step() -> None:
    with FakeSglangServer() as server, pytest.raises(OperationError, match="no answer carried speculative-decoding"):
        run_server(ServerOptions(url=server.url, prompts=["a"], max_tokens=1))


def test_metrics_cross_check_and_concurrency() -> None:
    with FakeSglangServer(enable_metrics=True, accept_pattern=(3,)) as server:
        result = run_server(ServerOptions(url=server.url, prompts=list("abcdef"), max_tokens=40, concurrency=3))
        served = server.outcomes
    check = result["engine_details"]["metrics_cross_check"]
    assert check["spec_verify_calls"] == sum(o.verify_ct for o in served) == result["num_drafts"]
    assert check["sglang_accept_length"] == pytest.approx(result["acceptance_lengths"]["sglang"]["pooled"])
    assert len(result["outputs"]) == 6


def test_cli_verdict_fails_an_accept_length_of_105() -> None:
    # 19 steps that accept nothing, then one that accepts one draft: vLLM's 1 + 3/60 = 1.05.
    with FakeSglangServer(accept_pattern=(0,) * 19 + (1,)) as server:
        result = runner.invoke(
            app, ["smoke-test", "--server", server.url, "--num-prompts", "2", "--max-tokens", "64", "--json"]
        )
    assert result.exit_code == 1, result.stderr
    document = json.loads(result.stdout)
    (run,) = document["drafts"][0]["runs"]
    assert run["result"]["engine"] == "sglang-server"
    assert run["result"]["mean_acceptance_length"] == pytest.approx(1.05)
    assert run["result"]["acceptance_lengths"]["sglang"]["pooled"] == pytest.approx(128 / 120)
    assert run["verdict"]["status"] == "fail"
    assert "mean acceptance length 1.05 is below the floor 1.20" in run["verdict"]["reasons"]


def test_cli_passes_a_healthy_sglang_server() -> None:
    with FakeSglangServer() as server:
        result = runner.invoke(
            app, ["smoke-test", "--server", server.url, "--num-prompts", "2", "--max-tokens", "64", "--json"]
        )
    assert result.exit_code == 0, result.stdout + result.stderr
    (run,) = json.loads(result.stdout)["drafts"][0]["runs"]
    assert run["verdict"]["status"] == "pass" and run["result"]["mean_acceptance_length"] == pytest.approx(6.0)


def test_cli_names_a_server_without_speculation_in_one_json_document() -> None:
    with FakeSglangServer(speculative=False) as server:
        result = runner.invoke(app, ["smoke-test", "--server", server.url, "--num-prompts", "1", "--json"])
    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "operation" and "serves without speculative decoding" in error["message"]
    assert "\n" not in error["message"]
