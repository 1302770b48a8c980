"""The planted vllm-cpu-demo pair's DFlash2 drafts (`vllm_cpu_demo.write_dflash2_draft`), which the
V2 tier runs through vLLM's DFlash2Speculator: what they declare, and the construction they rely on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dflash_tools.inspect import inspect_checkpoint
from dflash_tools_testing.demos import vllm_cpu_demo as demo
from tests.torch_extra import require_torch_extra

LAYOUTS = {"bonus-anchor": False, "anchor-first": True}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_dflash2_drafts_inspect_clean(tmp_path: Path, layout: str) -> None:
    sample_from_anchor = LAYOUTS[layout]
    report = inspect_checkpoint(str(demo.write_dflash2_draft(tmp_path / layout, sample_from_anchor=sample_from_anchor)))
    assert report.description is not None and report.geometry is not None
    assert report.description.algorithm.value == "dflash2"
    assert report.geometry.sample_from_anchor is sample_from_anchor
    assert report.geometry.num_speculative_tokens == 7
    assert report.geometry.num_query_tokens == (7 if sample_from_anchor else 8)
    assert not [f for f in report.findings if f.severity.value == "error"], report.findings


def test_first_layer_gives_anchor_rows_a_previous_row_tap_and_mask_rows_none() -> None:
    """The first layer's attention-output tap 1 is `anchor_tap_gain` on a token's embedding and 0
    on the mask token's; every other dynamic coefficient stays at noise level."""
    spec, extras = demo.SPEC, demo.DFLASH2
    tensors = demo.dflash2_draft_tensors(True)
    embed, _ = demo.embeddings_and_head()
    projection = tensors["layers.0.attention_conv.kernel_projection.weight"]
    taps, groups = extras.conv_kernel_size, spec.hidden_size // extras.conv_group_size
    coefficients = (embed @ projection.T).reshape(spec.vocab_size, 2, taps, groups)
    tokens = [t for t in range(spec.vocab_size) if t != spec.mask_token_id]
    np.testing.assert_allclose(coefficients[tokens, 1, 1], extras.anchor_tap_gain, atol=1e-9)
    np.testing.assert_allclose(coefficients[spec.mask_token_id, 1, 1], 0.0, atol=1e-9)
    assert np.abs(coefficients[:, 0]).max() < 0.5 and np.abs(coefficients[:, 1, 0]).max() < 0.5


def test_reference_engine_accepts_dflash2_drafts_in_their_own_layout(tmp_path: Path) -> None:
    require_torch_extra()
    from dflash_tools.reference_engine import run_request

    target = demo.write_planted_demo(tmp_path / "planted")["target"]
    for layout, sample_from_anchor in LAYOUTS.items():
        draft = demo.write_dflash2_draft(tmp_path / layout, sample_from_anchor=sample_from_anchor)
        result = run_request(
            {
                "schema_version": 1, "engine": "torch", "target": str(target),
                "draft": str(draft), "algorithm": "dflash2", "num_speculative_tokens": 7,
                "block_size": 7 if sample_from_anchor else 8, "sample_from_anchor": sample_from_anchor,
                "num_query_tokens": 7 if sample_from_anchor else 8, "prompts": [],
                "prompt_token_ids": [[3, 4, 5, 6, 7, 8, 0, 1, 2, 3, 4, 5]], "max_tokens": 24, "baseline": True,
                "seed": 0, "dtype": "float32", "device": "cpu", "env": {},
                "engine_args": {"warmup": False, "target_impl": "builtin"},
                "revision": None,
            }
        )  # fmt: skip
        assert result["ok"], result["error"]
        assert result["token_identical"] is True
        # The prompt already walks a cycle: every draft of every step is accepted.
        assert result["accepted_per_position"] == [3] * 7, (layout, result["accepted_per_position"])
