"""Every list a config carries is checked in linear time, and a source's findings are capped.

`bench/bench_lists.py --quick --check` times each list check at 10,000 and 100,000 entries and
fails on a ratio above 25 (linear is ~10; the old quadratic duplicate check made it ~100). The
full run (a million entries, under 2 s) is in docs/reliability.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import dflash_tools_testing as testing
from dflash_tools.cli import app
from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.inspect.report import MAX_FINDINGS
from dflash_tools.reading.safetensors_header import encode_header

ROOT = Path(__file__).resolve().parents[2]


def test_list_checks_are_linear() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_lists.py"), "--quick", "--check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not linear" not in done.stdout


def test_findings_are_capped_with_a_count(tmp_path: Path) -> None:
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", testing.TINY)
    extra = [(f"layers.{i}.extra.weight", "BF16", (2,)) for i in range(1000)]
    prefix, offsets = encode_header(testing.tensor_table(testing.TINY) + extra)
    (folder / "model.safetensors").write_bytes(prefix + bytes(offsets[-1][1]))
    report = inspect_checkpoint(str(folder))
    assert len(report.findings) == MAX_FINDINGS
    assert report.omitted == {"warning": 1000 - MAX_FINDINGS}
    document = json.loads(CliRunner().invoke(app, ["inspect", str(folder), "--json"]).stdout)
    assert len(document["findings"]) == MAX_FINDINGS and document["findings_omitted"] == 1000 - MAX_FINDINGS
    human = CliRunner().invoke(app, ["inspect", str(folder)]).stdout
    assert f"... and {1000 - MAX_FINDINGS:,} more findings not shown ({1000 - MAX_FINDINGS:,} warnings)" in human
    assert "0 error(s), 1000 warning(s)" in human  # the verdict counts every finding


def test_a_million_layer_ids_quote_a_line_not_the_list(tmp_path: Path) -> None:
    folder = testing.write_checkpoint(tmp_path / "draft", "zlab-dflash", testing.TINY)
    config = json.loads((folder / "config.json").read_text())
    config["dflash_config"]["target_layer_ids"] = list(range(1_000_000))[::-1]
    (folder / "config.json").write_text(json.dumps(config))
    report = inspect_checkpoint(str(folder))
    [order] = [f for f in report.findings if f.code == "DFT030" and "not increasing" in f.message]
    assert len(order.message) < 400 and "(1,000,000 entries)" in order.message
    # The ids past the config's own num_target_layers (4): the same brief quote.
    [beyond] = [f for f in report.findings if f.code == "DFT030" and "num_target_layers" in f.message]
    assert len(beyond.message) < 400
    assert len(order.values["dflash_config.target_layer_ids"]) == 1_000_000  # the data stays whole
