"""Counters that cannot all be true never give a PASS: every case of tests/hostile/counter_cases.py
ends as it must (a lying SGLang or vLLM server: exit 1 with one line naming the relation; a broken
engine child's result: an "error" verdict naming it; honest numbers: a pass)."""

from __future__ import annotations

import pytest

from tests.hostile.counter_cases import OFFLINE_CASES, SERVER_CASES, OfflineCase, offline_problems, run_offline
from tests.hostile.smoke_cases import Case, problems, run_case


@pytest.mark.parametrize("case", [case for _, case in SERVER_CASES], ids=[case.name for _, case in SERVER_CASES])
def test_server_counters_end_cleanly(case: Case) -> None:
    outcome = run_case(case)
    assert not problems(outcome), problems(outcome)
    if outcome.result is not None:
        assert outcome.result["ok"] and outcome.result["num_drafts"] > 0


@pytest.mark.parametrize("case", OFFLINE_CASES, ids=[case.name for case in OFFLINE_CASES])
def test_offline_results_with_impossible_counters_are_errors(case: OfflineCase) -> None:
    assert not offline_problems(run_offline(case))
