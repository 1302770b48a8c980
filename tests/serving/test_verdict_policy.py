"""One verdict policy for `inspect --engine` and `plan` (`serving.verdict`; docs/plan.md): each
engine release asked for is OK or FAIL, and the command fails when any of them does.

The issue's case: for the same anchor-first draft and engines, `plan` said "OK: 1 error(s) ...
(the errors are theirs)" and exited 0 while `inspect --engine all` said FAIL and exited 1.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.serving.verdict import LAYOUT_WORDS, OUTCOME_WORDS, engine_verdict, legend, narrowing_hint

runner = CliRunner()
TARGET, ANCHOR = "example:vllm-cpu-demo/target", "example:vllm-cpu-demo/zlab-dflash-anchor-first"
BONUS = "example:vllm-cpu-demo/zlab-dflash"


def plan(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["plan", "-t", TARGET, *args], env={"COLUMNS": "80"})
    return result.exit_code, result.stdout


def test_plan_and_inspect_agree_on_an_anchor_first_draft() -> None:
    code, out = plan("-d", ANCHOR)
    inspected = runner.invoke(app, ["inspect", ANCHOR, "--engine", "all"])
    assert code == inspected.exit_code == 1
    first = " ".join(out.split("\n\n")[0].splitlines()[:2])
    assert first.startswith("FAIL for sglang==0.5.23; OK for vllm==0.33.0, vllm==0.34.0: 1 error(s)")
    assert "the errors are theirs" not in out
    # inspect --engine names the releases' verdict in plan's words (issue 34: one vocabulary).
    assert "engines: FAIL for sglang==0.5.23; OK for vllm==0.33.0, vllm==0.34.0" in " ".join(inspected.stdout.split())
    assert "--engine vllm==0.33.0,vllm==0.34.0" in out  # how to ask for the releases that serve it
    document = json.loads(runner.invoke(app, ["plan", "-t", TARGET, "-d", ANCHOR, "--json"]).stdout)
    assert document["ok"] is False and document["exit_code"] == 1


def test_asking_only_for_the_releases_that_serve_it_passes() -> None:
    code, out = plan("-d", ANCHOR, "--engine", "vllm==0.33.0,vllm==0.34.0")
    inspected = runner.invoke(app, ["inspect", ANCHOR, "--engine", "vllm==0.33.0,vllm==0.34.0"])
    assert code == inspected.exit_code == 0
    assert out.startswith("OK for vllm==0.33.0, vllm==0.34.0: 0 error(s)")


def test_a_draft_every_release_serves_is_ok_for_all() -> None:
    code, out = plan("-d", BONUS)
    assert code == 0 and out.startswith("OK for sglang==0.5.23, vllm==0.33.0, vllm==0.34.0: ")


def test_the_outcome_and_layout_words_are_defined_where_they_first_appear() -> None:
    _, out = plan("-d", ANCHOR)
    engines = out[out.index("\nengines\n") : out.index("\nfindings\n")]
    flat = " ".join(engines.split())
    for word in ("misaligned", "served-with-plugin", "bonus", "anchor-first"):
        meaning = {**OUTCOME_WORDS, **LAYOUT_WORDS}[word]
        assert f"{word}: {meaning}" in flat, word
    assert all(len(line) <= 80 for line in out.splitlines() if not line.startswith(("    '", "DFLASH")))


def test_the_policy_itself() -> None:
    assert engine_verdict([("a", True), ("b", False), ("a", False), ("c", True)]) == (False, "FAIL for b, a; OK for c")
    assert engine_verdict([("a", True)]) == (True, "OK for a")
    assert narrowing_hint([("a", False), ("c", True)]) == (
        "to judge it only by the releases that serve it as trained: --engine c"
    )
    assert narrowing_hint([("a", True)]) == "" and narrowing_hint([("a", False)]) == ""
    assert legend(["bonus", "misaligned", None, "x"]) == [
        f"misaligned: {OUTCOME_WORDS['misaligned']}",
        f"bonus: {LAYOUT_WORDS['bonus']}",
    ]


def test_convert_for_an_engine_defines_its_words_too() -> None:
    result = runner.invoke(
        app,
        ["convert", "example:zlab-dflash2-anchor-first", "--dry-run", "--for", "vllm==0.34.0"],
        env={"COLUMNS": "100"},
    )
    assert result.exit_code == 0, result.output
    flat = " ".join(result.stdout.split())
    assert f"served-with-plugin: {OUTCOME_WORDS['served-with-plugin']}" in flat
    assert f"anchor-first: {LAYOUT_WORDS['anchor-first']}" in flat
