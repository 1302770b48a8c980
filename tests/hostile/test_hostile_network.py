"""Network faults on Hub reads, through the real CLI against a local Hub imitation.

`bench/net_faults.py --check` runs each scenario (404, gated, 429, timeouts, truncated and
short range responses, the Hub unreachable, offline with a partial cache) and fails when the exit
code, the one-line message or the next step is not what it must be. The quick set runs here;
the full table is in docs/reliability.md. Below: a broken proxy's Content-Range header, in process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import dflash_tools_testing as testing
from dflash_tools.errors import SourceError
from dflash_tools.reading.hub import load_hub_checkpoint
from tests.hub_server import HubServer, safetensors_bytes

ROOT = Path(__file__).resolve().parents[2]


def test_network_faults_quick() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "net_faults.py"), "--quick", "--check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 not as expected" in done.stdout, done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "`dflash-tools" in line]
    assert len(rows) >= 8


@pytest.mark.parametrize(
    "content_range", ["bytes 0-" + "9" * 5000 + "/1", "bytes 0-7/" + "9" * 5000, "bytes */" + "9" * 5000, "junk"]
)
def test_hostile_content_range_is_an_incomplete_response(hub: HubServer, content_range: str) -> None:
    # int() refuses more than 4300 digits: a broken proxy's header used to raise ValueError.
    hub.add_repo(
        "org/draft",
        {
            "config.json": json.dumps(testing.make_config("zlab-dflash", testing.TINY)).encode(),
            "model.safetensors": safetensors_bytes(testing.tensor_table(testing.TINY)),
        },
    )
    hub.content_range = content_range
    try:
        loaded = load_hub_checkpoint("org/draft", revision=None, token=None, timeout=5)
    except SourceError as exc:
        assert "\n" not in exc.message and exc.hint
    else:
        assert {f.code for f in loaded.findings} <= {"DFT003", "DFT005"}
