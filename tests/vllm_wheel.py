"""The real vLLM 0.33.0 wheel, for checks against its sources (no install, no GPU).

`DFLASH_TOOLS_VLLM_WHEEL=/path/to/vllm-0.33.0-*.whl` uses a wheel you already have. Otherwise the
wheel is fetched once with `pip download vllm==0.33.0 --no-deps` into the pytest cache
(`.pytest_cache/d/vllm-wheel/`, git-ignored) and reused by later sessions. When it cannot be had
(offline, no pip) the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

VERSION = "0.33.0"
WHEEL_ENV = "DFLASH_TOOLS_VLLM_WHEEL"


def _cached(folder: Path) -> Path | None:
    wheels = sorted(folder.glob(f"vllm-{VERSION}-*.whl"))
    return wheels[0] if wheels else None


def find_or_fetch_wheel(cache_dir: Path) -> tuple[Path | None, str]:
    """The wheel's path, or None and why it could not be had."""
    configured = os.environ.get(WHEEL_ENV)
    if configured:
        path = Path(configured)
        return (path, "") if path.is_file() else (None, f"{WHEEL_ENV}={configured} is not a file")
    cached = _cached(cache_dir)
    if cached is not None:
        return cached, ""
    command = [
        sys.executable, "-m", "pip", "download", f"vllm=={VERSION}", "--no-deps",
        "--only-binary", ":all:", "--disable-pip-version-check", "--timeout", "30", "-d", str(cache_dir),
    ]  # fmt: skip
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"pip download vllm=={VERSION} failed: {exc}"
    cached = _cached(cache_dir)
    if cached is None:
        last = (completed.stderr or completed.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"pip download vllm=={VERSION} --no-deps did not produce a wheel ({last[0][:200]})"
    return cached, ""


def wheel_fixture(request: pytest.FixtureRequest) -> Path:
    cache_dir = request.config.cache.mkdir("vllm-wheel") if request.config.cache else Path(".pytest_cache/vllm-wheel")
    wheel, why = find_or_fetch_wheel(Path(cache_dir))
    if wheel is None:
        pytest.skip(f"the vLLM {VERSION} wheel cannot be had here, so its sources are not checked: {why}")
    return wheel
