"""The engine demo's checkpoints and the engine package's import hygiene (no torch needed).

The bundled pair is trained (tests/reference_engine/test_trained_demos.py checks it against its
manifest); the planted pair, written where a test runs, is checked here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dflash_tools.inspect import inspect_checkpoint
from dflash_tools_testing.demos import checkpoints as demo_checkpoints
from dflash_tools_testing.demos import engine_demo as demo


def test_the_planted_demo_is_deterministic(tmp_path: Path) -> None:
    first, second = demo.write_planted_demo(tmp_path / "a"), demo.write_planted_demo(tmp_path / "b")
    assert sorted(first) == sorted(second) == sorted(["target", *demo.DEMO_DRAFTS])
    for name, folder in first.items():
        for file in sorted(folder.iterdir()):
            assert file.read_bytes() == (second[name] / file.name).read_bytes(), f"{name}/{file.name}"


def test_engine_import_does_not_import_torch() -> None:
    code = "import sys, dflash_tools.reference_engine, dflash_tools_testing.demos.engine_demo; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_pattern_is_a_permutation_with_the_documented_cycles() -> None:
    successor = demo.successor_table()
    assert sorted(successor) == list(range(demo.PATTERN.vocab_size))
    lengths = [len(c) for c in demo.cycles()]
    assert lengths[:4] == [1, 1, 1, 1] and max(lengths) == demo.PATTERN.max_cycle
    assert demo.cycle_length(7) == 8 and demo.cycle_length(35) == 3
    assert demo.pattern_continuation(7, 9) == [8, 9, 10, 11, 4, 5, 6, 7, 8]


def test_pattern_head_prefers_the_successor_by_alpha() -> None:
    embed, head = demo.pattern_embeddings()
    hidden = embed / np.sqrt((embed**2).mean(axis=1, keepdims=True))  # RMSNorm, weight 1
    logits = hidden @ head.T
    tokens = [t for t in range(demo.PATTERN.vocab_size) if t != demo.PATTERN.mask_token_id]
    assert (logits[tokens].argmax(axis=1) == demo.successor_table()[tokens]).all()
    top2 = np.sort(logits[tokens], axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0]).min() > demo.PATTERN.alpha / 2


@pytest.mark.parametrize("name", sorted(demo.DEMO_DRAFTS))
@pytest.mark.parametrize("pair", ["bundled", "planted"])
def test_demo_drafts_inspect_clean_against_their_target(tmp_path: Path, name: str, pair: str) -> None:
    folder = demo.bundled_demo_dir() if pair == "bundled" else demo.write_planted_demo(tmp_path)["target"].parent
    report = inspect_checkpoint(str(folder / name), target=str(folder / "target"))
    errors = [f for f in report.findings if f.severity.value == "error"]
    assert errors == []
    assert report.geometry is not None and report.geometry.max_speculative_tokens == 7
    assert report.geometry.sample_from_anchor is demo.DEMO_DRAFTS[name][2]


def test_demo_prompts_are_the_ends_of_the_default_prompts() -> None:
    prompts = demo.demo_prompts(3, 10)
    assert [len(p) for p in prompts] == [10, 10, 10]
    assert "".join(map(chr, prompts[0])) == "p by step."
    assert all(0 <= t < demo.PATTERN.eos_token_id for p in prompts for t in p)


def test_bf16_rounding_is_nearest_even() -> None:
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.0e-3], dtype=np.float32)
    raw = np.frombuffer(demo_checkpoints.to_bf16_bytes(values), dtype="<u2").astype(np.uint32) << 16
    back = raw.view(np.float32)
    assert back[0] == 1.0 and back[1] == 1.0 and back[2] == 1.015625 and back[3] == -2.5
    assert abs(back[4] - 3.0e-3) < 3.0e-3 / 128
