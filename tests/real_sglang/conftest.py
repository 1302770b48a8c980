"""The SGLang source tier: SGLang 0.5.23's released wheel, read, never imported (marker real_sglang).

SGLang cannot run here (its wheel needs CUDA 13 stacks, and even its config parser imports GPU
kernels), so `dflash_tools/engine_rules/sglang_0_5_23.py` is checked against the released source:
the files and functions it cites, the keys it says SGLang reads, its defaults, and SGLang's own
parser executed on our configs (`tests/engine_sources.extract`).

The wheel comes from `DFLASH_TOOLS_SGLANG_WHEEL` (a wheel file or an unpacked folder), else from
the cache folder `DFLASH_TOOLS_WHEEL_CACHE` (default `.cache/wheels` in the checkout), where the
first run puts it with `pip download --no-deps sglang==0.5.23` (39 MB). `.ci/tier-sglang.sh`
runs the tier.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine_sources import Sources

SGLANG_VERSION = "0.5.23"
ROOT = Path(__file__).resolve().parents[2]


def _wheel() -> Path:
    given = os.environ.get("DFLASH_TOOLS_SGLANG_WHEEL")
    if given:
        return Path(given)
    cache = Path(os.environ.get("DFLASH_TOOLS_WHEEL_CACHE", ROOT / ".cache" / "wheels"))
    found = sorted(cache.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", f"sglang=={SGLANG_VERSION}", "-d",
             str(cache)],
            check=True,
        )  # fmt: skip
        found = sorted(cache.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    assert found, f"pip download left no sglang {SGLANG_VERSION} wheel in {cache}"
    return found[0]


@pytest.fixture(scope="session")
def sglang() -> Sources:
    return Sources(_wheel())
