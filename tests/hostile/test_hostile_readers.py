"""Every case of tests/hostile/reader_cases.py ends cleanly (protocol files, dataset files and the
cache, parquet, secrets, the API's arguments, `examples --copy-to`, release matching, `convert --to`);
`convert` on a long list stays within twice `inspect`'s CPU and memory; `--to` takes every dialect
the API writes."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from tests.hostile.reader_cases import CASES, Case, available, problems, run_case

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("case", CASES, ids=[f"{case.surface}: {case.name}" for case in CASES])
def test_reader_case_ends_cleanly(case: Case) -> None:
    if not available(case):
        pytest.skip(f"needs {case.needs}")
    run_case(case)
    assert not problems(case), problems(case)


def test_convert_to_takes_every_dialect_the_api_writes() -> None:
    from dflash_tools.cli.convert_cmd import ConvertArgs
    from dflash_tools.convert import TARGET_FAMILIES

    hints = typing.get_type_hints(ConvertArgs, include_extras=True)
    literal = next(arg for arg in typing.get_args(typing.get_args(hints["to"])[0]) if arg is not type(None))
    assert set(typing.get_args(literal)) == set(TARGET_FAMILIES)


def test_convert_on_a_long_list_costs_at_most_twice_inspect() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_convert_lists.py"), "--quick", "--check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "convert / inspect, CPU" in done.stdout and "convert / inspect, memory" in done.stdout
