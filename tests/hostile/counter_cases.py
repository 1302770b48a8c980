"""Counters that cannot all be true: a lying server, a broken engine child, never a PASS.

Each case sends numbers one relation of `dflash_tools.smoke.counter_relations` rules out (and a few
honest ones that must still pass: the relations may refuse nothing a real engine sends):

- SGLang answers (tests/hostile/smoke_server.py as SGLang: `/server_info` says 4 drafts per step;
  each answer reports 2 verify steps, 5 of 8 drafts accepted, 8 completion tokens);
- vLLM `/metrics` pages whose second scrape (after the requests) was changed (the healthy server
  drafts K = 4 and accepts positions 0-2 at every step: 2 prompts x 2 steps);
- finished runs of the offline engines (a vLLM or torch child's result file), judged by
  `smoke.report.judge_run`.

A server case ends cleanly as in tests/hostile/smoke_cases.py (exit code, one line naming the
relation, within its bound, no other exception); an offline case when its verdict is "error" with
the relation in its reason, or "pass" for an honest result.

`python -m tests.hostile.counter_cases` prints the table of docs/reliability.md.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.hostile.smoke_cases import QUICK, Case, Outcome, problems, run_case, sglang
from tests.hostile.smoke_server import Connection, Counters, HostileServer, Request

SERVER_SURFACES = ("SGLang answers", "vLLM /metrics")


def metrics_after(change: Callable[[Counters], str | None]) -> Callable[[HostileServer, HostileServer], None]:
    """`/metrics` as the healthy server's, except the scrape after the requests: `change` gets a copy
    of the counters to alter and returns the page (None: the counters as changed)."""

    def setup(server: HostileServer, elsewhere: HostileServer) -> None:
        scrapes: list[int] = []

        def handler(connection: Connection, request: Request) -> None:
            scrapes.append(1)
            if len(scrapes) == 1:
                text = server.metrics_text()
            else:
                shadow = HostileServer.__new__(HostileServer)
                shadow.counters = copy.deepcopy(server.counters)
                text = change(shadow.counters) or HostileServer.metrics_text(shadow)
            connection.respond(200, text.encode(), "text/plain; version=0.0.4")

        server.routes["/metrics"] = handler

    return setup


def per_position_line(position: str, value: int | float = 0) -> str:
    return f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{position}"}} {value}\n'


def with_lines(*lines: str) -> Callable[[HostileServer, HostileServer], None]:
    """Every scrape carries `lines` besides the healthy counters (a label the first scrape has too)."""

    def setup(server: HostileServer, elsewhere: HostileServer) -> None:
        server.routes["/metrics"] = lambda c, r: c.respond(
            200, (server.metrics_text() + "".join(lines)).encode(), "text/plain"
        )

    return setup


def frozen_metrics(server: HostileServer, elsewhere: HostileServer) -> None:
    """Speculative-decoding counters that never move, whatever is generated."""
    text = server.metrics_text()
    server.routes["/metrics"] = lambda c, r: c.respond(200, text.encode(), "text/plain")


def _inflate(**changes: int | float) -> Callable[[Counters], None]:
    def change(counters: Counters) -> None:
        for key, value in changes.items():
            if key.startswith("position"):
                index = int(key.removeprefix("position"))
                counters.per_position[index] += value  # type: ignore[call-overload]
            else:
                setattr(counters, key, getattr(counters, key) + value)

    return change


def _set(**values: int) -> Callable[[Counters], None]:
    def change(counters: Counters) -> None:
        for key, value in values.items():
            setattr(counters, key, value)

    return change


IMPOSSIBLE = "impossible counters"

SERVER_CASES: list[tuple[str, Case]] = [
    # --- SGLang: each answer's meta_info ------------------------------------------------------
    (
        "SGLang answers",
        Case("SGLang: healthy, checked against -d K = 4 (reference)", sglang(), 0, "", QUICK, options={"draft_k": 4}),
    ),
    (
        "SGLang answers",
        Case(
            "SGLang: an answer capped at 2 tokens after a step that accepted 3 of 4 (honest: the cut tokens count)",
            sglang(
                {
                    "completion_tokens": 2,
                    "spec_verify_ct": 1,
                    "spec_num_correct_drafts": 3,
                    "spec_num_proposed_drafts": 4,
                    "spec_accept_length": 2.0,
                    "spec_correct_drafts_histogram": [0, 0, 0, 1],
                }
            ),
            0,
            "",
            QUICK,
        ),
    ),
    (
        "SGLang answers",
        Case(
            "SGLang: 7 accepted drafts in 2 completion tokens",
            sglang(
                {
                    "completion_tokens": 2,
                    "spec_num_correct_drafts": 7,
                    "spec_accept_length": 1.0,
                    "spec_correct_drafts_histogram": [0, 0, 0, 1, 1],
                }
            ),
            1,
            IMPOSSIBLE,
            QUICK,
        ),
    ),
    (
        "SGLang answers",
        Case(
            "SGLang: accepted > proposed",
            sglang({"spec_num_proposed_drafts": 4}),
            1,
            "(accepted <= proposed)",
            QUICK,
            options={"prompts": ["a"]},
        ),
    ),
    (
        "SGLang answers",
        Case(
            "SGLang: 0 proposed drafts, 6 accepted",
            sglang(
                {
                    "spec_num_proposed_drafts": 0,
                    "spec_num_correct_drafts": 6,
                    "spec_correct_drafts_histogram": [0, 0, 0, 2],
                }
            ),
            1,
            "(speculation with 0 proposals)",
            QUICK,
        ),
    ),
    (
        "SGLang answers",
        Case(
            "SGLang: an accept length of 4001 (4,000 accepted in one step), no histogram, no /server_info",
            sglang(
                {
                    "spec_verify_ct": 1,
                    "spec_num_correct_drafts": 4000,
                    "spec_num_proposed_drafts": 4000,
                    "spec_accept_length": 8.0,
                    "spec_correct_drafts_histogram": None,
                },
                server_info_status=404,
            ),
            1,
            "(positions <= K)",
            QUICK,
        ),
    ),
    (
        "SGLang answers",
        Case(
            "SGLang: accepted + steps beyond what the completion tokens allow",
            sglang(
                {
                    "spec_verify_ct": 3,
                    "spec_num_correct_drafts": 12,
                    "spec_num_proposed_drafts": 12,
                    "spec_accept_length": 8 / 3,
                    "spec_correct_drafts_histogram": [0, 0, 0, 0, 3],
                }
            ),
            1,
            "(accepted + steps <= completion tokens - 1 + K)",
            QUICK,
        ),
    ),
    (
        "SGLang answers",
        Case(
            "SGLang: as many verify steps as completion tokens",
            sglang(
                {
                    "spec_verify_ct": 8,
                    "spec_num_correct_drafts": 0,
                    "spec_num_proposed_drafts": 32,
                    "spec_accept_length": 1.0,
                    "spec_correct_drafts_histogram": [8],
                }
            ),
            1,
            "(verify steps < completion tokens)",
            QUICK,
        ),
    ),
    (
        "SGLang answers",
        Case(
            "SGLang: proposals that are not a whole number per verify step",
            sglang({"spec_num_proposed_drafts": 7}),
            1,
            "(proposed = steps x drafts per step)",
            QUICK,
        ),
    ),
    # --- vLLM: /metrics deltas ------------------------------------------------------------------
    (
        "vLLM /metrics",
        Case(
            "vLLM: healthy, checked against -d K = 4 (reference)",
            lambda s, e: None,
            0,
            "",
            QUICK,
            options={"draft_k": 4},
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: 1,000 accepted per draft step",
            metrics_after(_inflate(accepted=4000, draft_tokens=4000)),
            1,
            "(proposed <= steps x K)",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: a per-position rate of 100",
            metrics_after(_inflate(position0=396)),
            1,
            "(per-position counts <= steps)",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: accepted > draft tokens", metrics_after(_inflate(accepted=100)), 1, "(accepted <= proposed)", QUICK
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: per-position counts that do not add up to accepted",
            metrics_after(_inflate(accepted=4)),
            1,
            "(per-position counts sum to accepted)",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: position 1 accepted more often than position 0",
            metrics_after(_inflate(position0=-4)),
            1,
            "(per-position counts do not rise)",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: 1,000 position labels (K reported 1000)",
            with_lines(*(per_position_line(str(i)) for i in range(4, 1000))),
            1,
            "(positions <= K)",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: a position label of 10^7 (a 10-million-entry list once)",
            with_lines(per_position_line("10000000")),
            1,
            "(positions <= K)",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: a position label of 10^12 (MemoryError after 21 s once)",
            with_lines(per_position_line("1000000000000")),
            1,
            "(positions <= K)",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: a position label '²' (ValueError once)",
            with_lines(per_position_line("²")),
            1,
            "is not a draft position index",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: a position label of 5,000 digits (ValueError once)",
            with_lines(per_position_line("7" * 5000)),
            1,
            "(5,000 digits) is not below K",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: speculating, but 0 draft steps for the requests",
            frozen_metrics,
            1,
            "made 0 draft steps",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: a counter of 12.5",
            metrics_after(_inflate(accepted=0.5)),
            1,
            "not a counter value",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: a counter of 2^60",
            metrics_after(_set(accepted=2**60)),
            1,
            "not a counter value",
            QUICK,
        ),
    ),
    (
        "vLLM /metrics",
        Case(
            "vLLM: K = 4 served while -d says K = 2",
            lambda s, e: None,
            1,
            "(positions <= K)",
            QUICK,
            options={"draft_k": 2},
        ),
    ),
]


# --- offline results (the engine child's result file) -------------------------------------------------


@dataclass
class OfflineCase:
    name: str
    changes: dict[str, Any]
    status: str  # the verdict expected
    expect: str  # in its first reason ("" for a pass)
    engine: str = "vllm"
    outcome: dict[str, Any] = field(default_factory=dict)


def offline_result(engine: str, **changes: Any) -> dict[str, Any]:
    """A valid contract result of K = 7: 10 steps, positions 0-2 accepted every step."""
    per_position = [10, 10, 10, 0, 0, 0, 0]
    result: dict[str, Any] = {
        "schema_version": 1,
        "ok": True,
        "error": None,
        "engine": engine,
        "num_drafts": 10,
        "num_draft_tokens": 70,
        "num_accepted_tokens": 30,
        "accepted_per_position": per_position,
        "acceptance_rate_per_position": [c / 10 for c in per_position],
        "mean_acceptance_length": 4.0,
        "output_tokens": 40,
        "elapsed_s": 1.0,
        "tokens_per_second": 40.0,
        "outputs": [],
        "baseline": None,
        "token_identical": None,
        "query_positions_per_step": None,
        "log_path": None,
    }
    result.update(changes)
    return result


OFFLINE_CASES = [
    OfflineCase("an honest result (reference)", {}, "pass", ""),
    OfflineCase("the torch engine: an honest result (reference)", {}, "pass", "", engine="torch"),
    OfflineCase("accepted > proposed", {"num_draft_tokens": 20}, "error", "(accepted <= proposed)"),
    OfflineCase(
        "a position accepted more often than there were steps",
        {"accepted_per_position": [20, 10, 0, 0, 0, 0, 0], "acceptance_rate_per_position": [2.0, 1.0, 0, 0, 0, 0, 0]},
        "error",
        "(per-position counts <= steps)",
        engine="torch",
    ),
    OfflineCase(
        "position 0 never accepted, positions 1 and 2 always",
        {
            "accepted_per_position": [0, 10, 10, 10, 0, 0, 0],
            "acceptance_rate_per_position": [0, 1.0, 1.0, 1.0, 0, 0, 0],
        },
        "error",
        "(per-position counts do not rise)",
    ),
    OfflineCase(
        "a mean acceptance length of 9 from counts that give 4",
        {"mean_acceptance_length": 9.0},
        "error",
        "mean acceptance length",
    ),
    OfflineCase(
        "a rate of 100 at position 0",
        {"acceptance_rate_per_position": [100.0, 1.0, 1.0, 0, 0, 0, 0]},
        "error",
        "(rates in [0, 1])",
        engine="torch",
    ),
    OfflineCase(
        "1,000 accepted per step",
        {"num_accepted_tokens": 10_000, "num_draft_tokens": 10_000, "mean_acceptance_length": 1001.0},
        "error",
        "(proposed <= steps x K)",
    ),
]


def run_offline(case: OfflineCase) -> OfflineCase:
    from dflash_tools.plan.presets import SANITY_FLOOR
    from dflash_tools.smoke.report import judge_run
    from dflash_tools.smoke.run_plan import Runner, RunPlan, Serving

    run = RunPlan(
        label="draft",
        slug="01-draft",
        layout_role="declared",
        sample_from_anchor=False,
        num_speculative_tokens=7,
        num_query_tokens=8,
        runner=Runner.V2,
        serving=Serving.STOCK,
        env={},
        request=None,
    )
    started = time.monotonic()
    try:
        verdict = judge_run(run, offline_result(case.engine, **case.changes), SANITY_FLOOR, identity=None)  # type: ignore[arg-type]
    except BaseException as exc:  # an internal error
        case.outcome = {"status": "internal", "reasons": [f"{type(exc).__name__}: {exc}"[:200]], "seconds": 0.0}
        return case
    case.outcome = {"status": verdict.status, "reasons": verdict.reasons, "seconds": time.monotonic() - started}
    return case


def offline_problems(case: OfflineCase) -> list[str]:
    found = []
    status, reasons = case.outcome.get("status"), case.outcome.get("reasons") or []
    if status != case.status:
        found.append(f"verdict {status} {reasons}, expected {case.status}")
    elif case.expect and not any(case.expect in reason for reason in reasons):
        found.append(f"{case.expect!r} is not in {reasons}")
    if any("\n" in reason for reason in reasons):
        found.append("a reason is more than one line")
    return found


def table(outcomes: list[tuple[str, Outcome]], offline: list[OfflineCase]) -> str:
    rows = ["| surface | case | exit | message |", "|---|---|---|---|"]
    for surface, outcome in outcomes:
        message = outcome.message.replace("|", "\\|") or "a valid result"
        message = message.split("127.0.0.1:", 1)[-1].split("/", 1)[-1] if "127.0.0.1:" in message else message
        rows.append(f"| {surface} | {outcome.case.name} | {outcome.exit_code} | {message[:150]} |")
    for case in offline:
        reason = (case.outcome.get("reasons") or [""])[0].replace("|", "\\|")
        rows.append(f"| offline result | {case.name} | {case.outcome.get('status')} | {reason[:150] or 'pass'} |")
    return "\n".join(rows)


def main() -> int:
    outcomes = [(surface, run_case(case)) for surface, case in SERVER_CASES]
    offline = [run_offline(case) for case in OFFLINE_CASES]
    print(table(outcomes, offline))
    bad = [(o.case.name, problems(o)) for _, o in outcomes if problems(o)]
    bad += [(c.name, offline_problems(c)) for c in offline if offline_problems(c)]
    total = len(outcomes) + len(offline)
    print(f"\n{total} cases: {total - len(bad)} ended as they must, {len(bad)} did not")
    for surface in (*SERVER_SURFACES, "offline result"):
        cases = [o for s, o in outcomes if s == surface] if surface != "offline result" else offline
        failed = [c for c in cases if (problems(c) if isinstance(c, Outcome) else offline_problems(c))]  # type: ignore[arg-type]
        print(f"  {surface}: {len(cases)} cases, {len(failed)} did not")
    for name, found in bad:
        print(f"- {name}: {found}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
