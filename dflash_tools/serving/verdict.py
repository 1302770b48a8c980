"""The words every command uses for what an engine release does with a draft, and the one verdict policy.

The policy (docs/plan.md, "Output and exit codes"; docs/inspect.md): each engine release asked
for gets its own verdict, OK when it serves the draft as trained (`served`, or
`served-with-plugin`) and nothing it would run has an error, FAIL otherwise. The command's verdict
is FAIL, and it exits 1, when any release asked for fails; ask only for the releases you serve
with (`--engine vllm==VERSION`) to judge the draft against those. `inspect --engine` and `plan`
both say it the same way: `FAIL for sglang==X; OK for vllm==Y, vllm==Z`.

`legend` defines on screen the outcome and layout words a table shows, the first time they appear.
Nothing here imports typer or rich.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# What an outcome word means (the `outcome` row of inspect's and plan's engine tables; JSON
# `outcome`; one line per `engine_rules.Outcome`: a release module that adds an outcome adds its
# line here, tests/cli/test_inspect_engine_verdicts.py names a missing one), and the layout words
# of an engine column (JSON `layout`).
OUTCOME_WORDS = {
    "served": "served as trained, by the engine itself",
    "served-with-plugin": "served as trained, with the dflash-tools plugin installed with vLLM",
    "misaligned": "served without an error in another layout than trained: every draft one "
    "position off, acceptance collapses while the output stays correct",
    "served-wrong": "served without an error, but not as trained (keys it ignores, layers it derives)",
    "refused": "the engine stops at start-up",
    "wont-load": "the engine cannot load the draft's config",
    "unsupported": "the engine reads no config of this format, or has no loader for the draft",
    "unchecked": "the engine has a loader, but dflash-tools reads no config of it: nothing is checked",
}
LAYOUT_WORDS = {
    "bonus": "bonus-anchor layout: position 0 is the last verified token (K + 1 queries)",
    "anchor-first": "every position drafts (K queries for K tokens)",
}


def legend(words: Iterable[str | None]) -> list[str]:
    """`word: meaning` for each outcome, then layout, word in `words` that has one."""
    meanings = {**OUTCOME_WORDS, **LAYOUT_WORDS}
    seen = set(words)
    return [f"{word}: {meaning}" for word, meaning in meanings.items() if word in seen]


def engine_verdict(results: Sequence[tuple[str, bool]]) -> tuple[bool, str]:
    """(ok, `FAIL for a, b; OK for c`) for (engine release, ok) pairs, failures first; ok only
    when every release asked for is. A release listed twice (several drafts) fails if it fails once."""
    failed = list(dict.fromkeys(spec for spec, ok in results if not ok))
    passed = [spec for spec in dict.fromkeys(spec for spec, _ in results) if spec not in failed]
    parts = []
    if failed:
        parts.append(f"FAIL for {', '.join(failed)}")
    if passed:
        parts.append(f"OK for {', '.join(passed)}")
    return not failed, "; ".join(parts)


def narrowing_hint(results: Sequence[tuple[str, bool]]) -> str:
    """When some releases pass and others fail: the --engine value that asks for the passing ones."""
    ok, _ = engine_verdict(results)
    failed = {spec for spec, good in results if not good}
    passed = [spec for spec in dict.fromkeys(spec for spec, _ in results) if spec not in failed]
    if ok or not passed:
        return ""
    return f"to judge it only by the releases that serve it as trained: --engine {','.join(passed)}"
