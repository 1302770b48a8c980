"""The serving plan's vLLM launch lines, parsed by the real vLLM of this tier (docs/plan.md).

`dflash-tools plan --engine vllm==VERSION --json` (in this process) plans the bundled demos and the presets (their
Hub repos written as a Hugging Face cache and read offline, as vLLM reads them too:
`dflash_tools_testing.targets`); one child process (`launch_parse.py`) feeds every printed line,
its `NAME=value` environment included, to vLLM's own parser and config builder. The config must
be the one the plan intended: method dflash, the draft, K, the query positions per request
(`num_lookahead_tokens`: K + 1 bonus, K anchor-first through the plugin), max_model_len,
max_num_seqs, max_num_batched_tokens, the parallelism, and for a budget the plan flags the number
of requests it says vLLM will run at once (`max_num_active_seqs`). The release's defaults in the
engine table are compared with what this vLLM computes for the same GPU sizes.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.reading.local import examples_dir
from dflash_tools_testing.targets import write_hub_cache
from tests.real_vllm.conftest import VLLM_VERSION

pytestmark = pytest.mark.real_vllm

SPEC = f"vllm=={VLLM_VERSION}"
RULES = ENGINE_RULES[SPEC]
CHILD = Path(__file__).parent / "launch_parse.py"

# name -> the plan's options; each runs with --engine SPEC --json.
PLANS: dict[str, list[str]] = {
    "demo": [
        *("-t", "example:vllm-cpu-demo/target", "--gpu-memory", "16"),
        *("-d", "example:vllm-cpu-demo/zlab-dflash", "-d", "example:vllm-cpu-demo/zlab-dflash-anchor-first"),
    ],
    "demo-dflash2": [
        *("-t", "example:engine-demo/target", "--gpu-memory", "16"),
        *("-d", "example:engine-demo/zlab-dflash2", "-d", "example:engine-demo/zlab-dflash2-anchor-first"),
    ],
    "qwen3.8-80gb": ["--preset", "qwen3.8-27b-dflash2", "--gpu-memory", "80"],
    "qwen3.8-24gb-tp4": ["--preset", "qwen3.8-27b-dflash2", "--gpu-memory", "24", "--tensor-parallel-size", "4"],
    "qwen3.8-dcp": [
        *("--preset", "qwen3.8-27b-dflash2", "--gpu-memory", "141"),
        *("--tensor-parallel-size", "8", "--decode-context-parallel-size", "2"),
    ],
    # 1024 x 8 (bonus) and 1024 x 7 (anchor-first) > 4096: flagged, and vLLM runs fewer at once.
    "qwen3.8-budget": [
        *("--preset", "qwen3.8-27b-dflash2", "--gpu-memory", "80"),
        *("--max-num-seqs", "1024", "--max-num-batched-tokens", "4096"),
    ],
    # K 16 bonus: 256 x 17 > vLLM's 2048 below 70 GiB, so the line carries the raised value.
    "qwen3-8b": ["--preset", "qwen3-8b-dflash-b16", "--gpu-memory", "24", "--max-num-seqs", "256"],
}
FLAGGED = {"qwen3.8-budget"}
GPU_SIZES = [
    (24.0, "NVIDIA GeForce RTX 4090"),
    (79.2, "NVIDIA H100 80GB HBM3"),
    (79.2, "NVIDIA A100-SXM4-80GB"),
    (139.8, "NVIDIA H200"),
    (178.4, "NVIDIA B200"),
]


def _environment(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH_TOOLS_", "VLLM_", "HF_"))}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache), HF_HOME=str(cache.parent), VLLM_TARGET_DEVICE="cpu")
    # The tier runs this checkout: the child processes import it, not whatever the venv points at.
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    return env


def run_plans(cache: Path) -> dict[str, Any]:
    """`dflash-tools plan ... --json` for every entry of PLANS, in this process (typer's runner),
    reading the Hub cache offline."""
    from huggingface_hub import constants
    from typer.testing import CliRunner

    from dflash_tools.cli import app

    plans: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "HF_HUB_CACHE", str(cache))
        patch.setattr(constants, "HF_HUB_OFFLINE", True)
        for name, options in PLANS.items():
            result = CliRunner().invoke(app, ["plan", *options, "--engine", SPEC, "--json"])
            document = json.loads(result.stdout)
            assert result.exit_code == (1 if name in FLAGGED else 0), (name, result.output[-2000:])
            plans[name] = document
    return plans


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every plan's JSON, and what the child made of every vLLM line they print."""
    root = tmp_path_factory.mktemp("plan-commands")
    cache = write_hub_cache(root / "hf" / "hub")
    plans = run_plans(cache)
    cases = {}
    for name, document in plans.items():
        for index, plan in enumerate(document["plans"]):
            launch = plan["engines"][SPEC]["launch"]
            cases[f"{name}/{index}"] = plan["engines"][SPEC]["launch_command"]
            # The same line on the V1 model runner: what the line's runner choice guards against.
            forced = {**launch["environment"], "VLLM_USE_V2_MODEL_RUNNER": "0"}
            cases[f"{name}/{index}/v1"] = " ".join(
                [*(f"{key}={shlex.quote(value)}" for key, value in sorted(forced.items())), shlex.join(launch["argv"])]
            )
    (root / "cases.json").write_text(json.dumps({"cases": cases, "gpu_sizes": GPU_SIZES}), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(CHILD), str(root / "cases.json")],
        capture_output=True,
        text=True,
        env=_environment(cache),
        cwd=root,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return {"plans": plans, "parsed": json.loads(done.stdout.strip().splitlines()[-1])}


def _launch_name(source: str) -> str:
    """What the plan should name on the line: a bundled example's folder, else the repo id."""
    if source.startswith("example:"):
        return str((examples_dir() / source.removeprefix("example:")).resolve())
    return source


def _same_model(found: str, named: str) -> bool:
    """vLLM offline swaps a target's repo id for the snapshot folder it found in the cache."""
    snapshots = f"/models--{named.replace('/', '--')}/snapshots/"
    return found == named or snapshots in found


def _cases(
    planned: dict[str, Any], suffix: str = ""
) -> list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]]:
    out = []
    for name, document in planned["plans"].items():
        for index, plan in enumerate(document["plans"]):
            out.append((name, plan, plan["engines"][SPEC], planned["parsed"]["cases"][f"{name}/{index}{suffix}"]))
    return out


def test_every_plan_prints_a_line_for_every_draft(planned: dict[str, Any]) -> None:
    # 2 + 2 demo drafts, 2 per Qwen3.8-27B plan (four plans), 1 for Qwen3-8B.
    assert len(_cases(planned)) == 13
    assert planned["parsed"]["vllm_version"].split("+")[0] == VLLM_VERSION
    for name, _plan, engine, _parsed in _cases(planned):
        assert engine["serves"] and engine["launch_command"], name


def test_vllm_builds_the_speculative_config_the_plan_intended(planned: dict[str, Any]) -> None:
    for name, plan, engine, parsed in _cases(planned):
        assert "error" not in parsed, (name, engine["launch_command"], parsed["error"])
        geometry = plan["geometry"]
        k = geometry["num_speculative_tokens"]
        anchor_first = geometry["layout"] == "anchor-first"
        speculative = parsed["speculative"]
        assert speculative["method"] == "dflash", name
        assert speculative["model"] == _launch_name(plan["draft"]["source"]), name
        assert _same_model(parsed["model"], _launch_name(plan["target"]["source"])), name
        assert speculative["num_speculative_tokens"] == k == engine["num_speculative_tokens"], name
        # The draft pass's query positions: the plugin makes vLLM size anchor-first drafts K.
        assert parsed["num_lookahead_tokens"] == (k if anchor_first else k + 1) == engine["num_query_tokens"], name
        # The environment the line carries is the one the plan said it needs.
        assert parsed["environment"] == engine["launch"]["environment"], name
        assert ("DFLASH_TOOLS_REQUIRE_PLUGIN" in parsed["environment"]) is anchor_first, name


def test_vllm_schedules_with_the_settings_the_plan_checked(planned: dict[str, Any]) -> None:
    for name, plan, engine, parsed in _cases(planned):
        settings = {key: value["value"] for key, value in engine["settings"].items()}
        request = plan["request"]
        assert parsed["max_model_len"] == plan["max_model_len"]["value"] == settings["max_model_len"], name
        assert parsed["max_num_seqs"] == settings["max_num_seqs"], name
        assert parsed["max_num_batched_tokens"] == settings["max_num_batched_tokens"], name
        assert parsed["tensor_parallel_size"] == request["tensor_parallel_size"], name
        assert parsed["speculative"]["draft_tensor_parallel_size"] == request["tensor_parallel_size"], name
        assert parsed["decode_context_parallel_size"] == request["decode_context_parallel_size"], name
        if "gpu_memory_utilization" in settings:
            assert parsed["gpu_memory_utilization"] == settings["gpu_memory_utilization"], name
        budget = engine["token_budget"]
        assert budget["required_max_num_batched_tokens"] == settings["max_num_seqs"] * parsed["num_lookahead_tokens"]
        if name in FLAGGED:
            (flag,) = [f for f in engine["findings"] if f["code"] == "DFT080"]
            # The plan's number of requests at once is the one vLLM lowers max_num_active_seqs to.
            assert parsed["max_num_active_seqs"] == flag["values"]["max_num_active_seqs"], name
            assert parsed["max_num_active_seqs"] < settings["max_num_seqs"], name
        else:
            assert budget["ok"], name
            active = parsed["max_num_active_seqs"]
            assert active is None or active >= settings["max_num_seqs"], (name, active)


def test_the_raised_budget_and_the_pinned_draft_dcp(planned: dict[str, Any]) -> None:
    (qwen3_8b,) = planned["plans"]["qwen3-8b"]["plans"]
    engine = qwen3_8b["engines"][SPEC]
    assert engine["settings"]["max_num_batched_tokens"] == {
        "value": 256 * 17,
        "source": "raised",
        "note": engine["settings"]["max_num_batched_tokens"]["note"],
    }
    assert [f["code"] for f in engine["findings"] if f["code"] == "DFT081"] == ["DFT081"]
    for index, plan in enumerate(planned["plans"]["qwen3.8-dcp"]["plans"]):
        parsed = planned["parsed"]["cases"][f"qwen3.8-dcp/{index}"]
        pinned = RULES.flag("draft-dcp") is not None  # 0.34.0 has the key; 0.33.0 runs such drafts at 1 itself
        assert ("draft_decode_context_parallel_size" in plan["engines"][SPEC]["launch_command"]) is pinned
        if pinned:
            assert parsed["speculative"]["draft_decode_context_parallel_size"] == 1


def test_every_flag_of_the_table_is_one_vllm_serve_parses(planned: dict[str, Any]) -> None:
    flags = {flag.name for flag in RULES.launch if flag.name.startswith("--")}
    assert len(flags) >= 9
    assert flags <= set(planned["parsed"]["flags"]), sorted(flags - set(planned["parsed"]["flags"]))


def test_the_tables_defaults_are_this_vllms(planned: dict[str, Any]) -> None:
    for found in planned["parsed"]["batch_defaults"]:
        memory = 0.0 if "a100" in found["device"].lower() else found["gpu_memory_gib"]  # the table's note
        for setting in ("max_num_seqs", "max_num_batched_tokens"):
            default = RULES.serving_default(setting, memory)
            assert default is not None and default.value == found[setting], (found, setting)
    utilization = RULES.serving_default("gpu_memory_utilization")
    assert utilization is not None and utilization.value == planned["parsed"]["gpu_memory_utilization"]


def test_the_runner_the_line_selects_is_the_one_vllm_needs(planned: dict[str, Any]) -> None:
    """Each line again with VLLM_USE_V2_MODEL_RUNNER=0: 0.34.0 has no V1 runner and refuses every
    one; 0.33.0's V1 runner refuses DFlash2 and (with the plugin) anchor-first drafts, exactly the
    lines on which the plan sets VLLM_USE_V2_MODEL_RUNNER=1, and serves the others."""
    refused = 0
    for name, plan, engine, on_v1 in _cases(planned, "/v1"):
        selects_v2 = engine["launch"]["environment"].get("VLLM_USE_V2_MODEL_RUNNER") == "1"
        error = on_v1.get("error", "")
        if not RULES.has_v1_runner:
            assert "Model Runner V1 has been removed" in error, (name, error)
            assert not selects_v2, name  # nothing to select on a release with one runner
            refused += 1
        elif selects_v2:
            assert "Model Runner V1" in error or "V1 DFlashProposer" in error, (name, error)
            refused += 1
        else:
            assert not error, (name, error)
            assert plan["draft"]["algorithm"] == "dflash" and plan["geometry"]["layout"] == "bonus-anchor", name
    assert refused >= 11  # every line but the bonus DFlash1 demo's and the Qwen3-8B preset's


def test_engine_vllm_plans_for_the_release_installed_here() -> None:
    from typer.testing import CliRunner

    from dflash_tools.cli import app

    result = CliRunner().invoke(app, ["plan", *PLANS["demo"][:4], "-d", "example:vllm-cpu-demo/zlab-dflash"]
                                + ["--engine", "vllm", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]
    assert list(json.loads(result.stdout)["plans"][0]["engines"]) == [SPEC]
