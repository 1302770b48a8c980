"""`dflash-tools plan` against hand computations (docs/plan.md).

The numbers the plan prints are worked out here from the architectures, element by element and
byte by byte, without the plan's own functions: for the bundled vllm-cpu-demo pair (read through
the real reading layer) and for the Qwen3.8-27B preset, whose Hub repos are written into a Hub
cache read offline (`dflash_tools_testing.targets`; the target is a stand-in with the published
dimensions). The real-vLLM tiers (tests/real_vllm/test_plan_commands.py) feed the printed lines
to vLLM itself.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.engine_rules import ENGINE_RULES, latest
from dflash_tools.plan.model import PlanRequest
from dflash_tools.plan.rules import SERVING_RULES
from dflash_tools.reading.local import examples_dir
from dflash_tools.serving.launch import SERVING_SETTINGS, LaunchSettings, settings_argv
from dflash_tools_testing.targets import QWEN38_27B_STAND_IN, write_hub_cache

runner = CliRunner()
GIB = 1024**3
DEMO = ["-t", "example:vllm-cpu-demo/target", "-d", "example:vllm-cpu-demo/zlab-dflash"]
ANCHOR_DEMO = ["-t", "example:vllm-cpu-demo/target", "-d", "example:vllm-cpu-demo/zlab-dflash-anchor-first"]


def plan(*args: str) -> tuple[int, dict[str, Any]]:
    result = runner.invoke(app, ["plan", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def human(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["plan", *args])
    return result.exit_code, result.stdout


def value_of(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, (flag, argv)
    return argv[argv.index(flag) + 1]


def codes(engine_or_plan: dict[str, Any]) -> list[str]:
    return [f["code"] for f in engine_or_plan["findings"]]


# --- the bundled demo, by hand ------------------------------------------------------------------

# vllm-cpu-demo/target: Qwen3, hidden 64, 4 layers, 4 heads and 2 KV heads of 64, MLP 64, vocab 128.
TARGET_ELEMENTS = 4 * (256 * 64 + 2 * 128 * 64 + 64 * 256 + 3 * 64 * 64 + 4 * 64) + 2 * 128 * 64 + 64
# vllm-cpu-demo/zlab-dflash: 2 layers of 1 head and 1 KV head of 64 (7 matrices 64 x 64, 4 norms),
# fc 64 x (2 target layers x 64), hidden_norm and norm.
DRAFT_ELEMENTS = 2 * (7 * 64 * 64 + 4 * 64) + 64 * 128 + 2 * 64


def test_the_demo_plan_is_the_hand_computation() -> None:
    code, document = plan(*DEMO, "--gpu-memory", "1", "--max-model-len", "512", "--engine", "vllm==0.34.0")
    assert code == 0 and document["ok"] and document["schema_version"] == 1
    (result,) = document["plans"]
    # Both configs say float32; vLLM's `auto` serves float32 models in bfloat16 on a GPU: 2 bytes.
    assert result["serving_dtype"] == "bfloat16"
    assert (TARGET_ELEMENTS, DRAFT_ELEMENTS) == (263_232, 66_176)
    weights = TARGET_ELEMENTS * 2 + DRAFT_ELEMENTS * 2
    assert result["weights"]["target"]["per_rank"] + result["weights"]["draft"]["per_rank"] == weights == 658_816
    # KV per token: layers x KV heads x head_dim x 2 (K and V) x 2 bytes.
    target_kv, draft_kv = 4 * 2 * 64 * 2 * 2, 2 * 1 * 64 * 2 * 2
    assert [layout["full_bytes_per_token"] for layout in result["kv"]] == [target_kv, draft_kv] == [2048, 512]
    usable = int(GIB * 0.92)  # vLLM's default utilization
    budget = usable - weights
    memory = result["memory"]
    assert (memory["usable_bytes"], memory["kv_budget_bytes"]) == (usable, budget) == (987_842_478, 987_183_662)
    assert memory["kv_tokens"] == budget // (target_kv + draft_kv) == 385_618
    assert memory["max_sequences"] == budget // ((target_kv + draft_kv) * 512) == 753
    # Token budget: vLLM's defaults below 70 GiB (256 sequences, 2048 tokens) and 7 + 1 queries.
    engine = result["engines"]["vllm==0.34.0"]
    assert engine["token_budget"]["required_max_num_batched_tokens"] == 256 * 8 == 2048
    assert engine["token_budget"]["ok"]
    _, text = human(*DEMO, "--gpu-memory", "1", "--max-model-len", "512", "--engine", "vllm==0.34.0")
    assert "385,618 tokens" in text and "753 requests of 512" in text
    assert "0.92 = 942.08 MiB" in text  # 1 GiB x 0.92 as the human output writes it


def test_the_demo_launch_line_carries_every_setting_it_checked() -> None:
    _, document = plan(*ANCHOR_DEMO, "--gpu-memory", "1", "--engine", "vllm==0.33.0,vllm==0.34.0")
    (result,) = document["plans"]
    target = str((examples_dir() / "vllm-cpu-demo/target").resolve())
    draft = str((examples_dir() / "vllm-cpu-demo/zlab-dflash-anchor-first").resolve())
    for spec, environment in (
        ("vllm==0.33.0", {"DFLASH_TOOLS_REQUIRE_PLUGIN": "1", "VLLM_USE_V2_MODEL_RUNNER": "1"}),
        ("vllm==0.34.0", {"DFLASH_TOOLS_REQUIRE_PLUGIN": "1"}),
    ):
        engine = result["engines"][spec]
        argv = engine["launch"]["argv"]
        assert argv[:3] == ["vllm", "serve", target]
        assert json.loads(argv[4]) == {"method": "dflash", "model": draft, "num_speculative_tokens": 7}
        # max_model_len from the target's max_position_embeddings; vLLM's defaults written out.
        assert argv[5:] == ["--max-model-len", "1024", "--max-num-seqs", "256", "--max-num-batched-tokens", "2048"]
        assert engine["launch"]["environment"] == environment
        # Anchor-first through the plugin: K query positions, 256 x 7 = 1792 <= 2048.
        assert engine["num_query_tokens"] == 7 and engine["token_budget"]["required_max_num_batched_tokens"] == 1792
    assert codes(result["engines"]["vllm==0.33.0"]) == ["DFT076", "DFT085"]


# --- the token budget ---------------------------------------------------------------------------


def test_a_budget_below_max_num_seqs_times_queries_is_flagged_with_the_value_to_use() -> None:
    code, document = plan(
        *DEMO, "--max-num-seqs", "300", "--max-num-batched-tokens", "2000", "--engine", "vllm==0.34.0"
    )
    assert code == 1 and not document["ok"]
    engine = document["plans"][0]["engines"]["vllm==0.34.0"]
    (flag,) = [f for f in engine["findings"] if f["code"] == "DFT080"]
    # 300 sequences x (7 + 1) query positions = 2400 > 2000; at 2000 tokens, 2000 // 8 = 250 at once.
    assert flag["values"]["required"] == 300 * 8 == 2400
    assert flag["values"]["max_num_active_seqs"] == 2000 // 8 == 250
    assert flag["hint"] == "pass --max-num-batched-tokens 2400, or --max-num-seqs 250"
    # The line is printed as asked (it is what fails), and said to fail.
    assert engine["launch"]["argv"][-4:] == ["--max-num-seqs", "300", "--max-num-batched-tokens", "2000"]
    _, text = human(*DEMO, "--max-num-seqs", "300", "--max-num-batched-tokens", "2000", "--engine", "vllm==0.34.0")
    assert "# vllm==0.34.0 (fails: DFT080 above)" in text and text.startswith("FAIL")


def test_an_anchor_first_budget_counts_k_queries() -> None:
    # 300 x 7 = 2100 fits 2100 anchor-first, where the bonus layout would need 2400.
    code, document = plan(
        *ANCHOR_DEMO, "--max-num-seqs", "300", "--max-num-batched-tokens", "2100", "--engine", "vllm==0.34.0"
    )
    assert code == 0
    assert document["plans"][0]["engines"]["vllm==0.34.0"]["token_budget"]["required_max_num_batched_tokens"] == 2100


def test_a_default_budget_that_is_too_small_is_raised_on_the_line() -> None:
    code, document = plan(*DEMO, "--max-num-seqs", "300", "--engine", "vllm==0.34.0")
    assert code == 0
    engine = document["plans"][0]["engines"]["vllm==0.34.0"]
    assert codes(engine) == ["DFT081"]
    assert engine["settings"]["max_num_batched_tokens"]["value"] == 2400
    assert engine["settings"]["max_num_batched_tokens"]["source"] == "raised"
    assert engine["launch"]["argv"][-2:] == ["--max-num-batched-tokens", "2400"]


# --- the Qwen3.8-27B preset, by hand --------------------------------------------------------------


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The presets' repos in a Hub cache, read offline as after a `huggingface-cli download`."""
    cache = write_hub_cache(tmp_path / "hub")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def stand_in_elements(tensor_parallel_size: int) -> int:
    """The Qwen3.8-27B stand-in's elements on one rank: matrices split, vectors on every rank."""
    c = QWEN38_27B_STAND_IN
    hidden, inter, layers, head_dim = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["head_dim"]
    q, kv = c["num_attention_heads"] * head_dim, c["num_key_value_heads"] * head_dim
    matrices = layers * (q * hidden * 2 + kv * hidden * 2 + 3 * inter * hidden) + 2 * c["vocab_size"] * hidden
    vectors = layers * (2 * hidden + 2 * head_dim) + hidden
    return matrices // tensor_parallel_size + vectors


# z-lab/Qwen3.8-27B-DFlash2: 1,924,404,480 parameters, 62,720 of them in vectors (per layer two
# norms of 5120 and q/k norms of 128, then hidden_norm and norm).
DRAFT_PARAMETERS, DRAFT_VECTORS = 1_924_404_480, 5 * (2 * 5120 + 2 * 128) + 2 * 5120


@pytest.mark.parametrize(
    ("gpu_gib", "tensor_parallel_size", "fits"),
    [(80, 1, True), (80, 2, True), (24, 1, False), (24, 2, False)],
)
def test_the_qwen38_preset_is_the_hand_computation(
    offline_hub: Path, gpu_gib: int, tensor_parallel_size: int, fits: bool
) -> None:
    code, document = plan(
        "--preset", "qwen3.8-27b-dflash2", "--gpu-memory", str(gpu_gib),
        "--tensor-parallel-size", str(tensor_parallel_size), "--engine", "vllm==0.34.0",
    )  # fmt: skip
    assert code == (0 if fits else 1)
    assert [p["draft"]["source"] for p in document["plans"]] == [
        "z-lab/Qwen3.8-27B-DFlash2",
        "DaoCloud/Qwen3.8-27B-DFlash2-Exp",
    ]
    tp = tensor_parallel_size
    target_bytes = stand_in_elements(tp) * 2
    draft_bytes = ((DRAFT_PARAMETERS - DRAFT_VECTORS) // tp + DRAFT_VECTORS) * 2
    assert stand_in_elements(1) == 24_353_870_848
    usable = int(gpu_gib * GIB * 0.85)  # the preset's gpu_memory_utilization
    # KV per token on a rank: 64 layers x (4 / tp) KV heads x 256 x 2 x 2 bytes; the draft's 5
    # sliding layers x (8 / tp) x 128 x 2 x 2 for the window less one plus the tokens of a step in
    # flight (vLLM's default max_num_batched_tokens: 8192 from 70 GiB, else 2048), at most 4096.
    target_kv, draft_kv = 64 * (4 // tp) * 256 * 2 * 2, 5 * (8 // tp) * 128 * 2 * 2
    in_flight = 8192 if gpu_gib >= 70 else 2048
    per_request = target_kv * 4096 + draft_kv * min(2048 - 1 + in_flight, 4096)
    for result in document["plans"]:
        memory = result["memory"]
        assert result["weights"]["target"]["per_rank"] == target_bytes
        assert result["weights"]["draft"]["per_rank"] == draft_bytes
        assert memory["usable_bytes"] == usable and memory["weights_bytes"] == target_bytes + draft_bytes
        assert memory["sequence_bytes"] == per_request
        assert memory["fits"] is fits
        if fits:
            budget = usable - target_bytes - draft_bytes
            assert memory["kv_tokens"] == budget * 4096 // per_request
            assert memory["max_sequences"] == budget // per_request
        else:
            # Refused with the numbers: the weights on one rank against what 0.85 of the GPU leaves.
            (refusal,) = [f for f in result["findings"] if f["code"] == "DFT082"]
            assert f"the weights alone ({(target_bytes + draft_bytes) / GIB:.2f} GiB per rank)" in refusal["message"]
            assert f"{gpu_gib:.2f} GiB x gpu_memory_utilization 0.85 = {usable / GIB:.2f} GiB" in refusal["message"]
            assert refusal["hint"].startswith("--tensor-parallel-size 4 fits")
    if (gpu_gib, tp) == (80, 1):
        assert (target_bytes + draft_bytes, per_request) == (52_556_550_656, 1_157_627_904)
        assert document["plans"][0]["memory"]["kv_tokens"] == 72_385


def test_the_qwen38_preset_human_output_has_the_numbers(offline_hub: Path) -> None:
    code, text = human("--preset", "qwen3.8-27b-dflash2", "--gpu-memory", "24", "--engine", "vllm==0.34.0")
    assert code == 1 and text.startswith("FAIL")
    weights = (stand_in_elements(1) * 2 + DRAFT_PARAMETERS * 2) / GIB
    assert f"the weights alone ({weights:.2f} GiB per rank)" in text
    assert "24.00 GiB × 0.85 = 20.40 GiB" in text


def test_a_preset_line_names_the_hub_repos(offline_hub: Path) -> None:
    _, document = plan("--preset", "qwen3.8-27b-dflash2", "--gpu-memory", "80", "--engine", "vllm==0.34.0,sglang")
    bonus, anchor = document["plans"]
    line = bonus["engines"]["vllm==0.34.0"]["launch_command"]
    assert line.startswith("vllm serve Qwen/Qwen3.8-27B --speculative-config ")
    assert '"model": "z-lab/Qwen3.8-27B-DFlash2"' in line and "--gpu-memory-utilization 0.85" in line
    assert bonus["engines"]["vllm==0.34.0"]["settings"]["max_num_seqs"] == {"value": 16, "source": "preset", "note": ""}
    # The request is resolved once, each value with where it comes from (`plan_request`).
    from_preset = ["target", "drafts", "num_speculative_tokens", "max_num_seqs", "max_model_len"]
    from_preset += ["gpu_memory_utilization", "dtype"]
    assert bonus["request"]["sources"] == dict.fromkeys(from_preset, "preset")
    assert bonus["request"]["from_preset"] == ["max_model_len", "max_num_seqs", "dtype", "gpu_memory_utilization"]
    _, given = plan("--preset", "qwen3.8-27b-dflash2", "-k", "6", "--max-num-seqs", "8", "--engine", "vllm==0.34.0")
    sources = given["plans"][0]["request"]["sources"]
    assert (sources["num_speculative_tokens"], sources["max_num_seqs"], sources["dtype"]) == (
        "given",
        "given",
        "preset",
    )
    assert given["plans"][0]["engines"]["vllm==0.34.0"]["settings"]["max_num_seqs"]["source"] == "given"
    sglang = bonus["engines"]["sglang"]["launch"]["argv"]
    assert sglang[-8:] == ["--speculative-num-draft-tokens", "8"] + [
        *("--context-length", "4096", "--max-running-requests", "16", "--dtype", "bfloat16")
    ]
    # SGLang's DFLASH is bonus-only: no line for the anchor-first draft, which fails the plan for
    # SGLang only (the verdict policy of `serving.verdict`, the same as `inspect --engine`); asked for
    # the vLLM releases alone, the same preset holds.
    assert anchor["engines"]["sglang"]["launch"] is None and "DFT071" in codes(anchor["engines"]["sglang"])
    assert bonus["ok"] and not anchor["ok"] and not document["ok"] and document["exit_code"] == 1
    assert [spec for spec, engine in anchor["engines"].items() if not engine["ok"]] == ["sglang"]
    code, vllm_only = plan("--preset", "qwen3.8-27b-dflash2", "--engine", "vllm==0.33.0,vllm==0.34.0")
    assert code == 0 and vllm_only["ok"] and vllm_only["exit_code"] == 0


# --- parallelism and engine rules ----------------------------------------------------------------


def test_tensor_parallel_sizes_that_do_not_split_the_heads(offline_hub: Path) -> None:
    code, document = plan("--preset", "qwen3.8-27b-dflash2", "--tensor-parallel-size", "3", "--engine", "vllm==0.34.0")
    assert code == 1
    problems = [f["message"] for f in document["plans"][0]["findings"] if f["code"] == "DFT083"]
    # The target's 24 heads split by 3, its 4 KV heads do not; the draft's 32 and 8 do not either;
    # and 248320 rows (a multiple of 64 already) do not split in 3.
    vocab = "vocab_size 248320, padded to 248320 rows (a multiple of 64), does not split across 3 ranks"
    assert problems == [
        "target: 4 KV heads do not divide by tensor parallel size 3",
        f"target: {vocab}",
        "draft: 32 attention heads do not divide by tensor parallel size 3",
        "draft: 8 KV heads do not divide by tensor parallel size 3",
        f"draft: {vocab}",
    ]


def test_decode_context_parallelism_rules(offline_hub: Path) -> None:
    # TP 4 with 4 KV heads: vLLM needs TP above the KV heads for DCP with a GQA target.
    code, document = plan(
        "--preset", "qwen3.8-27b-dflash2", "--tensor-parallel-size", "4", "--decode-context-parallel-size", "2"
    )
    assert code == 1
    for spec in ("vllm==0.33.0", "vllm==0.34.0"):
        assert "DFT083" in codes(document["plans"][0]["engines"][spec])
    # TP 8, DCP 2: allowed; 0.34.0 pins the sliding-window draft's own DCP to 1, 0.33.0 does it itself.
    code, document = plan(
        "--preset", "qwen3.8-27b-dflash2", "--tensor-parallel-size", "8", "--decode-context-parallel-size", "2"
    )
    assert document["plans"][0]["ok"]  # the z-lab draft; SGLang cannot serve DaoCloud's (test above)
    engines = document["plans"][0]["engines"]
    speculative_34 = json.loads(engines["vllm==0.34.0"]["launch"]["argv"][4])
    assert speculative_34["draft_decode_context_parallel_size"] == 1 and "DFT084" in codes(engines["vllm==0.34.0"])
    assert "draft_decode_context_parallel_size" not in engines["vllm==0.33.0"]["launch"]["argv"][4]
    assert value_of(engines["vllm==0.34.0"]["launch"]["argv"], "--decode-context-parallel-size") == "2"
    assert value_of(engines["vllm==0.34.0"]["launch"]["argv"], "--tensor-parallel-size") == "8"
    assert value_of(engines["sglang"]["launch"]["argv"], "--tp-size") == "8"
    assert value_of(engines["sglang"]["launch"]["argv"], "--dcp-size") == "2"


def test_sglang_alone_cannot_serve_an_anchor_first_draft() -> None:
    code, document = plan(*ANCHOR_DEMO, "--engine", "sglang")
    assert code == 1 and not document["ok"]
    code, document = plan(*DEMO, "--engine", "sglang")
    assert code == 0
    assert codes(document["plans"][0]["engines"]["sglang"]) == ["DFT086"]  # no --max-num-seqs: its 48
    code, document = plan(*DEMO, "--engine", "sglang", "--max-num-seqs", "64")
    assert codes(document["plans"][0]["engines"]["sglang"]) == []
    assert document["plans"][0]["engines"]["sglang"]["launch"]["argv"][-2:] == ["--max-running-requests", "64"]


def test_every_serving_rule_of_every_table_is_implemented_once() -> None:
    names = {rule.name for rules in ENGINE_RULES.values() for rule in rules.serving_rules}
    assert names == set(SERVING_RULES)


def test_the_tables_defaults_by_gpu_memory() -> None:
    rules = ENGINE_RULES["vllm==0.34.0"]

    def pick(setting: str, memory: float | None) -> int | float:
        default = rules.serving_default(setting, memory)
        assert default is not None
        return default.value

    picked = {
        memory: (pick("max_num_seqs", memory), pick("max_num_batched_tokens", memory))
        for memory in (None, 24, 69.9, 70, 80, 159.9, 160)
    }
    assert picked == {
        None: (256, 2048), 24: (256, 2048), 69.9: (256, 2048), 70: (1024, 8192),
        80: (1024, 8192), 159.9: (1024, 8192), 160: (1024, 16384),
    }  # fmt: skip
    sglang = ENGINE_RULES["sglang==0.5.23"]
    assert sglang.serving_default("max_running_requests", path="DFLASH").value == 48  # type: ignore[union-attr]


def test_settings_take_each_engines_flag_and_skip_what_it_has_none_for() -> None:
    settings = LaunchSettings(
        target_revision="abc123", max_model_len=4096, max_num_seqs=16, max_num_batched_tokens=8192,
        tensor_parallel_size=2, gpu_memory_utilization=0.85,
    )  # fmt: skip
    assert settings_argv(ENGINE_RULES["vllm==0.33.0"], settings) == [
        *("--revision", "abc123", "--max-model-len", "4096", "--max-num-seqs", "16"),
        *("--max-num-batched-tokens", "8192", "--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.85"),
    ]
    # SGLang: no per-step token budget, and its memory fraction is not vLLM's utilization.
    assert settings_argv(ENGINE_RULES["sglang==0.5.23"], settings) == [
        *("--revision", "abc123", "--context-length", "4096", "--max-running-requests", "16", "--tp-size", "2"),
    ]


def test_every_serving_setting_is_one_row_of_the_registry() -> None:
    """`SERVING_SETTINGS` names every setting a launch line carries, the request has each, and
    every vLLM table has a flag for each role (SGLang skips what it has none for, above)."""
    names = {setting.name for setting in SERVING_SETTINGS}
    assert names == {f.name for f in dataclasses.fields(LaunchSettings)} - {"draft_decode_context_parallel_size"}
    assert names <= {f.name for f in dataclasses.fields(PlanRequest)}
    for rules in ENGINE_RULES.values():
        if rules.engine == "vllm":
            assert [s.role for s in SERVING_SETTINGS if rules.flag(s.role) is None] == [], rules.spec
    typed = LaunchSettings.from_values({"max_num_seqs": 16.0, "gpu_memory_utilization": "0.5", "other": 1})
    assert (typed.max_num_seqs, typed.gpu_memory_utilization, typed.dtype) == (16, 0.5, None)


# --- usage --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-d", "example:zlab-dflash"], "no target given"),
        (["-t", "example:vllm-cpu-demo/target"], "no draft given"),
        ([*DEMO, "--engine", "trtllm"], "--engine trtllm: unknown engine"),
        ([*DEMO, "--dtype", "int3"], "unknown dtype 'int3'"),
        (["-t", "example:tiny-target", "-d", "example:zlab-dflash"], "max_position_embeddings"),
    ],
)
def test_usage_errors_exit_2_with_one_json_document(args: list[str], message: str) -> None:
    code, document = plan(*args)
    assert code == 2 and document["ok"] is False and document["command"] == "plan"
    assert message in document["error"]["message"]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="a vLLM is installed here")
def test_engine_vllm_names_the_installed_release_and_there_is_none() -> None:
    code, document = plan(*DEMO, "--engine", "vllm")
    assert code == 2 and "--engine vllm: no vLLM installed here" in document["error"]["message"]
    newest = latest("vllm")
    assert newest is not None and document["error"]["hint"] == f"name a release: --engine {newest.spec}"
