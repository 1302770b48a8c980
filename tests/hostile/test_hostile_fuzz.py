"""The fuzz campaign's quick mode (3,000 inputs through every parser, and hostile answers from a
loopback stand-in Hub) ends with 0 tracebacks.

The full campaign (`python fuzz/campaign.py`, 100,000 inputs) is run by hand; its figures are in
docs/reliability.md.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fuzz_campaign_quick_has_no_tracebacks(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "campaign.py"), "--quick", "--crash-dir", str(tmp_path / "crashes")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tried = re.search(r"([\d,]+) inputs in", done.stdout)
    assert tried and int(tried.group(1).replace(",", "")) >= 3000, done.stdout
    assert "tracebacks: 0" in done.stdout
    # Every parser got inputs, and the real CLI ran on some of them.
    by_parser = re.search(r"inputs by parser: (.*)", done.stdout)
    assert by_parser and all(
        name in by_parser.group(1)
        for name in (
            "header",
            "file",
            "index",
            "config",
            "checkpoint",
            "hub",
            "counters",
            "metrics",
            "jsonl",
            "protocol",
        )
    )
    assert not re.search(r"real CLI runs .*: 0$", done.stdout, re.MULTILINE)
