"""The stand-in SGLang server (tests/sglang_server.py) against SGLang 0.5.23's own models and rules.

The default suite measures SGLang servers through the stand-in, so the stand-in must answer as
0.5.23 answers. Here every body it sends is checked with the released wheel's own code:

- the OpenAI routes' answers by a pydantic round trip through the wheel's models
  (sglang/srt/entrypoints/openai/protocol.py): validated, dumped the way the server writes them
  (`model_dump_json(by_alias=True)`, sglang/srt/utils/json_response.py), and required to equal the
  body, so a missing key and an extra one both fail;
- the native routes' answers (`/generate`, `/model_info`, `/server_info`, `/v1/models` cards) and
  `/generate` requests by the wheel's msgspec codecs (sglang/api/v1/api_types.py, `from_json_value`);
- what `/generate` accepts in `sampling_params`, and its 400 text, against the wheel's codec;
- every API-key decision against the wheel's `decide_request_auth` (sglang/srt/utils/auth.py);
- `/metrics` against prometheus_client's multiprocess output of the names, documentation strings,
  label names and modes that sglang/srt/observability/metrics_collector.py declares;
- the requests dflash-tools sends to SGLang (`smoke.server.sglang.sglang_payload`) against the
  wheel's request models.

Only those three wheel files are executed, each from a copy taken out of the wheel, with bare
package objects standing in for `sglang`, `sglang.srt`, ... so that nothing else of SGLang runs
(`import sglang` pulls in torch). protocol.py needs msgspec and openai==2.8.0 (the wheel's pin),
which `.ci/tier-sglang.sh` installs into a throwaway folder named by DFLASH_TOOLS_SGLANG_DEPS.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import types
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from dflash_tools.smoke.server import ServerOptions
from dflash_tools.smoke.server.sglang import sglang_payload
from dflash_tools.smoke.workloads.protocols import load_protocol
from tests import sglang_server as standin
from tests.engine_sources import Sources
from tests.sglang_server import FakeSglangServer

pytestmark = pytest.mark.real_sglang

WHEEL_FILES = (
    "sglang/srt/entrypoints/openai/protocol.py",
    "sglang/api/v1/api_types.py",
    "sglang/srt/utils/auth.py",
)
PACKAGES = (
    "sglang",
    "sglang.srt",
    "sglang.srt.entrypoints",
    "sglang.srt.entrypoints.openai",
    "sglang.srt.utils",
    "sglang.api",
    "sglang.api.v1",
)
COLLECTOR = "sglang/srt/observability/metrics_collector.py"


class Wheel(types.SimpleNamespace):
    protocol: Any
    api_types: Any
    auth: Any


@pytest.fixture(scope="module")
def wheel(sglang: Sources, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wheel]:
    deps = os.environ.get("DFLASH_TOOLS_SGLANG_DEPS")
    if deps:
        sys.path.insert(0, deps)
    try:
        import msgspec  # noqa: F401
        import openai  # noqa: F401
    except ImportError as exc:
        pytest.fail(
            f"{exc.name} is not importable: the wheel's protocol.py needs msgspec and openai==2.8.0; "
            ".ci/tier-sglang.sh installs them into DFLASH_TOOLS_SGLANG_DEPS"
        )
    root = tmp_path_factory.mktemp("sglang-wheel")
    for name in WHEEL_FILES:
        text = sglang.read(name)
        assert text is not None, f"{name} is not in the wheel"
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    saved = {name: sys.modules.get(name) for name in (*PACKAGES, "sglang.utils")}
    for dotted in PACKAGES:
        package = types.ModuleType(dotted)
        package.__path__ = [str(root.joinpath(*dotted.split(".")))]
        sys.modules[dotted] = package
    utils = types.ModuleType("sglang.utils")

    def convert_json_schema_to_str(schema: Any) -> str:  # what protocol.py imports of sglang/utils.py
        return schema if isinstance(schema, str) else json.dumps(schema)

    utils.convert_json_schema_to_str = convert_json_schema_to_str  # type: ignore[attr-defined]
    sys.modules["sglang.utils"] = utils
    try:
        yield Wheel(
            protocol=importlib.import_module("sglang.srt.entrypoints.openai.protocol"),
            api_types=importlib.import_module("sglang.api.v1.api_types"),
            auth=importlib.import_module("sglang.srt.utils.auth"),
        )
    finally:
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[name]
        sys.modules.update({k: v for k, v in saved.items() if v is not None})
        if deps:
            sys.path.remove(deps)


def call(
    url: str, body: Any = None, api_key: str | None = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    return status, json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw


def round_trip(model: Any, document: dict[str, Any]) -> Any:
    """The wheel's model accepts the body, and writes it back exactly."""
    parsed = model.model_validate(document)
    assert json.loads(parsed.model_dump_json(by_alias=True)) == document, model.__name__
    return parsed


def test_sampling_params_and_the_400_for_others_are_the_wheels(wheel: Wheel) -> None:
    assert tuple(wheel.api_types._FIELDS_SamplingParams) == standin.SAMPLING_PARAMS_FIELDS
    with pytest.raises(wheel.api_types.JsonContractError) as raised:
        wheel.api_types.SamplingParams.from_json_value({"max_new_tokens": 4, "seed": 1})
    with FakeSglangServer(warmup=False) as server:
        status, body = call(f"{server.url}/generate", {"text": "x", "sampling_params": {"seed": 1}})
    assert status == 400 and body == {"error": str(raised.value)}


def test_api_key_decisions_are_the_wheels(wheel: Wheel) -> None:
    compared = 0
    for api_key, admin_key in ((None, None), ("sk-1", None), (None, "adm"), ("sk-1", "adm")):
        server = FakeSglangServer(api_key=api_key, admin_api_key=admin_key, warmup=False)
        try:
            for method in ("GET", "POST", "OPTIONS"):
                for path in ("/health", "/health_generate", "/ready", "/metrics", "/v1/models", "/generate",
                             "/server_info", "/model_info", "/nope"):  # fmt: skip
                    for header in (None, "Bearer sk-1", "bearer sk-1", "Bearer adm", "Basic sk-1", "Bearersk-1",
                                   "Bearer  sk-1"):  # fmt: skip
                        want = wheel.auth.decide_request_auth(
                            method=method,
                            path=path,
                            authorization_header=header,
                            api_key=api_key,
                            admin_api_key=admin_key,
                            auth_level=wheel.auth.AuthLevel.NORMAL,
                        )
                        allowed, status = server._authorized(method, path, header)
                        assert allowed == want.allowed, (method, path, header, api_key, admin_key)
                        assert allowed or status == want.error_status_code
                        compared += 1
        finally:
            server._server.server_close()
    assert compared == 756


def test_openai_answers_round_trip_through_the_wheels_models(wheel: Wheel) -> None:
    protocol = wheel.protocol
    with FakeSglangServer(api_key="sk-t", accept_pattern=(5,)) as server:
        base, key = server.url, "sk-t"
        models = call(f"{base}/v1/models", api_key=key)[1]
        round_trip(protocol.ModelList, models)
        round_trip(protocol.ModelCard, call(f"{base}/v1/models/{server.served_model_name}", api_key=key)[1])
        request = {"model": "m", "prompt": "Hello", "max_tokens": 40, "temperature": 0.0, "seed": 0,
                   "return_token_ids": True, "return_spec_tokens_details": True}  # fmt: skip
        assert protocol.CompletionRequest.model_validate(request).return_spec_tokens_details
        document = call(f"{base}/v1/completions", request, key)[1]
        round_trip(protocol.CompletionResponse, document)
        round_trip(protocol.SpecTokensDetails, document["sglext"]["spec_tokens_details"])
        document = call(f"{base}/v1/completions", {**request, "return_spec_tokens_details": False}, key)[1]
        assert "sglext" not in round_trip(protocol.CompletionResponse, document).model_dump(exclude_none=True)
        chat = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 100,
                "chat_template_kwargs": {"enable_thinking": False}, "return_meta_info": True,
                "return_spec_tokens_details": True, "return_token_ids": True}  # fmt: skip
        document = call(f"{base}/v1/chat/completions", chat, key)[1]
        round_trip(protocol.ChatCompletionResponse, document)
        assert document["choices"][0]["meta_info"]["spec_verify_ct"] == 17  # 100 tokens at 6 per step
        plain = {**chat, "return_meta_info": False, "return_spec_tokens_details": False}
        round_trip(protocol.ChatCompletionResponse, call(f"{base}/v1/chat/completions", plain, key)[1])
        status, error = call(f"{base}/v1/chat/completions", {**chat, "stream": True}, key)
        assert status == 400
        round_trip(protocol.ErrorResponse, error)
        round_trip(protocol.ErrorResponse, call(f"{base}/v1/completions", {"prompt": "", "max_tokens": 4}, key)[1])
    with FakeSglangServer(speculative=False) as server:
        document = call(f"{server.url}/v1/chat/completions", chat)[1]
        round_trip(protocol.ChatCompletionResponse, document)
        assert "sglext" not in document


def test_native_answers_decode_with_the_wheels_codecs(wheel: Wheel) -> None:
    api = wheel.api_types
    with FakeSglangServer(enable_metrics=True) as server:
        for route in ("/model_info", "/get_model_info"):
            api.GetModelInfoResponse.from_json_value(call(f"{server.url}{route}")[1])
        info = api.GetServerInfoResponse.from_json_value(call(f"{server.url}/server_info")[1])
        assert info.version == "0.5.23"
        api.ModelCard.from_json_value(call(f"{server.url}/v1/models")[1]["data"][0])
        payload = {"text": "What is 2 + 2?", "sampling_params": {"max_new_tokens": 64, "temperature": 0}}
        api.GenerateRequest.from_json_value(payload)
        answer = api.GenerateResponse.from_json_value(call(f"{server.url}/generate", payload)[1])
        assert answer.meta_info.completion_tokens == 64
        batch = call(f"{server.url}/generate", {"text": ["a", "b"], "sampling_params": {"max_new_tokens": 8}})[1]
        for item in batch:
            api.GenerateResponse.from_json_value(item)
    with FakeSglangServer(speculative=False) as server:
        document = call(f"{server.url}/generate", {"text": "x", "sampling_params": {"max_new_tokens": 32}})[1]
        api.GenerateResponse.from_json_value(document)
        assert not any(key.startswith("spec_") for key in document["meta_info"])


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("protocol_name", ["greedy", "zlab-card"])
def test_what_dflash_tools_sends_is_what_the_wheel_accepts(wheel: Wheel, chat: bool, protocol_name: str) -> None:
    protocol = load_protocol(protocol_name)
    if not chat:  # the same sampling on raw prompts: /generate, with its own names for the seed and the cap
        protocol = dataclasses.replace(protocol, chat=False, chat_template_kwargs={})
    options = ServerOptions(url="http://127.0.0.1:1", prompts=["p"], max_tokens=32, protocol=protocol)
    for prompt in ["p"] if chat else ["p", [1, 2, 3]]:
        path, payload = sglang_payload(options, "m", prompt, 32)
        if chat:
            assert path == "/v1/chat/completions"
            parsed = wheel.protocol.ChatCompletionRequest.model_validate(payload)
            assert parsed.return_meta_info and parsed.return_spec_tokens_details and parsed.return_token_ids
        else:
            assert path == "/generate"
            wheel.api_types.GenerateRequest.from_json_value(payload)  # refuses unknown sampling keys


def test_metrics_are_prometheus_client_multiprocess_output(sglang: Sources) -> None:
    collector = sglang.read(COLLECTOR)
    assert collector is not None
    declared: dict[str, dict[str, Any]] = {}
    for match in re.finditer(
        r'(Gauge|Counter)\(\s*name="(sglang:[a-z_]+)",\s*documentation=((?:"[^"]*"\s*)+|\(\s*(?:"[^"]*"\s*)+\)),'
        r"\s*labelnames=([^\n]+),\s*(?:multiprocess_mode=\"(\w+)\")?",
        collector,
    ):
        kind, name, doc, labelnames, mode = match.groups()
        declared.setdefault(
            name,
            {"kind": kind, "doc": "".join(re.findall(r'"([^"]*)"', doc)), "extra": re.findall(r'"(\w+)"\]', labelnames),
             "mode": mode},
        )  # fmt: skip
    with FakeSglangServer(enable_metrics=True, accept_pattern=(5,)) as server:
        payload = {"text": "x", "sampling_params": {"max_new_tokens": 64}}
        for _ in range(7):  # past 40 decode batches: the spec gauges carry a window's values
            call(f"{server.url}/generate", payload)
        status, text = call(f"{server.url}/metrics")
    assert status == 200
    from prometheus_client.parser import text_string_to_metric_families

    script = [
        "from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, multiprocess",
        "m = {}",
    ]
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            spec = declared.get(sample.name)
            assert spec is not None, f"{sample.name} is not declared in {COLLECTOR}"
            base = ["model_name", "engine_type"] + (
                ["tp_rank", "pp_rank", "moe_ep_rank"] if spec["kind"] == "Gauge" else []
            )
            names = base + spec["extra"]
            assert sorted(names) == sorted(sample.labels), sample.name
            mode = f", multiprocess_mode={spec['mode']!r}" if spec["mode"] else ""
            script.append(
                f"m.setdefault({sample.name!r}, {spec['kind']}(name={sample.name!r}, documentation={spec['doc']!r}, "
                f"labelnames={names!r}{mode}))"
            )
            method = "set" if spec["kind"] == "Gauge" else "inc"
            script.append(f"m[{sample.name!r}].labels(**{sample.labels!r}).{method}({sample.value!r})")
    script += [
        "r = CollectorRegistry()",
        "multiprocess.MultiProcessCollector(r)",
        "print(generate_latest(r).decode(), end='')",
    ]
    with tempfile.TemporaryDirectory() as folder:
        reference = subprocess.run(
            [sys.executable, "-c", "\n".join(script)],
            env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": folder},
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    def blocks(exposition: str) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        current = None
        for line in exposition.splitlines():
            if line.startswith("# HELP "):
                current = line.split()[2]
            if current is not None:
                found.setdefault(current, []).append(line)
        return {name: sorted(lines) for name, lines in found.items()}

    assert blocks(text.decode()) == blocks(reference)
    assert any(line.endswith(" 6.0") for line in blocks(reference)["sglang:spec_accept_length"])
