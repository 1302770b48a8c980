"""The kill drill's quick mode: SIGKILL at the riskiest moments of convert loses nothing.

Ten chosen kills (inside the final rename of the staging folder, during a repack, between the
in-place swaps, ...) and two conversions racing to one OUT. The full drill (`python
bench/kill_drill.py`, 240 kills at random points) is run by hand; its figures are in the README.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_kill_drill_quick_has_no_failures() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "kill_drill.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^failures: 0$", done.stdout, re.MULTILINE), done.stdout
    assert re.search(r"races to the same OUT: 2, failures: 0", done.stdout), done.stdout
    killed = sum(int(n) for n in re.findall(r"(\d+) killed mid-run", done.stdout))
    assert killed >= 8, done.stdout  # the staged kills must land while convert runs
