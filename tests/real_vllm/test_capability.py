"""What smoke-test plans from the installed vLLM 0.33.0, read from its real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_tools.serving.vllm_capability import detect_vllm
from tests.smoke.test_smoke_plan import ANCHOR_DFLASH2, plan_for

pytestmark = pytest.mark.real_vllm


def test_real_0_33_0_capability_plans_the_plugin(vllm_root: Path, tmp_path: Path) -> None:
    real = detect_vllm({})
    assert real.support == "patchable" and real.location == str(vllm_root / "vllm")
    draft = plan_for(tmp_path, "zlab-dflash2", ANCHOR_DFLASH2, real)
    assert draft.runs[0].serving == "plugin"
