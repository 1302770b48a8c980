"""A reference acceptance length judges the run (`smoke.workloads.reference_al`), and the diagnosis knows what
the draft was measured with (`smoke.diagnosis`): issue 34, "smoke-test says why".

The issue's case: a copy of the engine-demo DFlash2 draft that reads target layers [0, 1] reached
mean acceptance length 3.02 against 5.54 for the same weights with their own taps, and passed the
fixed floor of 1.2. And the demo pair, on prompts other than the bundled ones, was diagnosed as
wrong taps, pairing, mask or layout. Plans are real (`resolve_plan` on the bundled demo drafts and
copies of them); the results are contract documents with the acceptance each case leaves (the
real runs of the same drafts are tests/smoke/test_trained_demo_ab.py's).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.cli.smoke_test_run import render
from dflash_tools.draft.target import load_target
from dflash_tools.plan.presets import DraftEntry, resolve_prompts_path
from dflash_tools.smoke import report
from dflash_tools.smoke.options import SmokeOptions
from dflash_tools.smoke.plan import resolve_plan
from dflash_tools.smoke.workloads.reference_al import MARGIN
from dflash_tools_testing.demos import bundle as bundles
from tests.smoke.test_smoke_diagnosis_timing import outcome

TARGET = "example:engine-demo/target"
DEMO = "example:engine-demo/zlab-dflash2"
# What the bundle's manifest records for this draft (dflash_tools/examples/engine-demo/manifest.json).
DEMO_AL = 5.59
RATES = {
    "healthy": [0.80, 0.74, 0.66, 0.63, 0.63, 0.54, 0.54],  # the README run of the demo draft: 5.54
    "wrong taps": [0.71, 0.52, 0.33, 0.17, 0.14, 0.08, 0.05],  # its copy with taps [0, 1]: 3.02
    "other prompts": [0.16, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0],  # the demo draft on code-style prompts
}


def judged(draft: str, rates: list[float], *, prompts: str = "gsm8k-style.jsonl", **options: Any) -> dict[str, Any]:
    path = resolve_prompts_path(prompts)
    smoke = SmokeOptions(
        target=TARGET,
        drafts=[DraftEntry(draft)],
        prompts=["p"],
        prompts_source=str(path),
        engine="torch",
        device="cpu",
        prefix_caching_check=False,
        **options,
    )
    plan = resolve_plan(smoke, None, load_target(TARGET))
    run = plan.drafts[0].runs[0]
    return report.build_document(plan, {run.slug: outcome(rates)}, mode="offline", work_dir=None)["drafts"][0]


@pytest.fixture
def wrong_taps(tmp_path: Path) -> str:
    return str(bundles.wrong_tap_copy(bundles.BUNDLES["engine-demo"].folder / "zlab-dflash2", tmp_path / "wrong"))


def test_the_same_weights_reading_other_taps_fail_against_their_reference(wrong_taps: str) -> None:
    draft = judged(wrong_taps, RATES["wrong taps"])
    assert draft["reference"]["mean_acceptance_length"] == DEMO_AL and draft["reference"]["comparable"]
    assert draft["reference"]["sibling"] == DEMO and draft["reference"]["floor"] == round(DEMO_AL * MARGIN, 2)
    verdict = draft["verdict"]
    assert verdict["status"] == "fail"
    assert verdict["reasons"] == [
        f"mean acceptance length 3.00 is 54% of the {DEMO_AL:.2f} that {DEMO}'s weights reached, below its floor "
        f"{DEMO_AL * MARGIN:.2f} (75%)"
    ]
    found = verdict["diagnosis"]
    assert found["kind"] == "reference"
    assert "falls behind from position 1" in found["evidence"]
    assert found["likely"][0].startswith(f"the config: these are the weights of {DEMO}")
    assert "dflash_config.target_layer_ids [0, 1] (measured with [1, 2])" in found["likely"][0]


def test_the_draft_itself_passes_its_reference() -> None:
    draft = judged(DEMO, RATES["healthy"])
    assert draft["verdict"]["status"] == "pass" and draft["reference"]["sibling"] == DEMO


def test_other_prompts_are_named_first_and_the_reference_only_warns() -> None:
    verdict = judged(DEMO, RATES["other prompts"], prompts="code-style.jsonl")["verdict"]
    assert verdict["status"] == "fail"  # position 0 below 0.30, the sanity floor
    assert verdict["reasons"] == ["position-0 acceptance 0.16 is below 0.30"]
    assert any("not measured like this run, so not a failure" in warning for warning in verdict["warnings"])
    likely = verdict["diagnosis"]["likely"]
    assert likely[0].startswith("the prompts: this run's (code-style.jsonl) are not the ones it was measured on")
    # The very weights and config the reference was measured with: taps, mask and layout are settled.
    assert not any("target_layer_ids" in cause or "mask token" in cause or "layout" in cause for cause in likely)


def test_a_reference_al_from_the_command_line(tmp_path: Path) -> None:
    # Other weights (one byte of the last tensor changed): no bundled draft's, so no reference.
    other = bundles.wrong_tap_copy(bundles.BUNDLES["engine-demo"].folder / "zlab-dflash2", tmp_path / "other", (1, 2))
    weights = other / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert judged(str(other), RATES["wrong taps"])["reference"] is None  # nothing known of it: the floor alone
    draft = judged(str(other), RATES["wrong taps"], reference_al=5.5)
    assert draft["reference"]["source"] == "argument" and draft["verdict"]["status"] == "fail"
    assert draft["verdict"]["reasons"][0].startswith("mean acceptance length 3.00 is 55% of the reference 5.50")


def test_reference_al_is_an_option_and_a_bad_value_a_usage_error() -> None:
    result = CliRunner().invoke(
        app, ["smoke-test", "-t", TARGET, "-d", DEMO, "--runtime", "torch", "--dry-run", "--reference-al", "0.5"]
    )
    assert result.exit_code == 2 and "--reference-al 0.5" in result.stderr


def test_the_reasons_are_printed_under_the_results(wrong_taps: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that fails with its mean above the printed floor says why beside its figures, and the
    first verdict line gives a short reason at once."""
    document = {
        "mode": "offline",
        "engine": "torch",
        "target": {"source": TARGET},
        "prompts": {"count": 1, "max_tokens": 16, "source": "gsm8k-style.jsonl"},
        "work_dir": None,
        "baseline": None,
        "drafts": [judged(DEMO, RATES["other prompts"], prompts="code-style.jsonl")],
    }
    monkeypatch.setenv("COLUMNS", "80")
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buffer)
    render(document, no_color=True)
    lines = buffer.getvalue().splitlines()
    assert lines[0] == f"FAIL {DEMO}: position-0 acceptance 0.16 is below 0.30"
    assert f"  fails {DEMO}: position-0 acceptance 0.16 is below" in lines
    assert "  floor (mean / position 0) 1.20 / 0.30 · reference 5.59 (a note below 4.19)" in lines
    assert all(len(line) <= 80 for line in lines)
