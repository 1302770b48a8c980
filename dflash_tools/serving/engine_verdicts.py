"""Each engine release's verdict on one draft, from the tables alone: plain `inspect`'s engine lines.

    table_verdicts(report, target_name)  ->  [EngineVerdict, ...]   (one per release in ENGINE_RULES)

A verdict is the outcome of the release's view (`engine_view.engine_view` with its static table:
no engine is read or imported, the vLLM installed here included) with the K it drafts and the
query positions that K takes in the layout it serves. `inspect --engine` gives the whole column
of the same view, with its findings and launch line.

`OUTCOME_MEANINGS` says what each outcome word means, in the words inspect prints beside it the
first time it appears (docs/inspect.md, "Engines").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflash_tools.engine_rules import ENGINE_RULES, Outcome, json_key
from dflash_tools.inspect import InspectReport
from dflash_tools.serving.engine_model import DraftFacts, EngineView
from dflash_tools.serving.engine_view import engine_view

# One sentence per outcome word (`engine_rules.Outcome`), keyed by the word: the legend under
# inspect's engine lines and columns. A release module that adds an outcome adds its line here
# (tests/serving/test_engine_verdicts.py names a missing one).
OUTCOME_MEANINGS: dict[str, str] = {
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


def outcome_meaning(outcome: str) -> str:
    return OUTCOME_MEANINGS.get(outcome, "")


@dataclass(frozen=True)
class EngineVerdict:
    """What one release does with the draft, in one line (JSON: one entry of `engine_verdicts`)."""

    engine: str
    version: str
    outcome: Outcome
    num_speculative_tokens: int | None
    num_query_tokens: int | None

    @property
    def spec(self) -> str:
        return f"{self.engine}=={self.version}"

    @classmethod
    def of(cls, view: EngineView) -> EngineVerdict:
        return cls(view.rules.engine, view.rules.version, view.outcome, view.draft_tokens, view.num_query_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "version": self.version,
            "outcome": self.outcome.value,
            "num_speculative_tokens": self.num_speculative_tokens,
            "num_query_tokens": self.num_query_tokens,
        }


def table_verdicts(report: InspectReport, target_name: str | None = None) -> list[EngineVerdict]:
    """Every release's verdict from its table (none when there is no config to apply them to)."""
    facts = DraftFacts.from_report(report, target=target_name)
    if facts is None:
        return []
    return [EngineVerdict.of(engine_view(rules, facts)) for rules in ENGINE_RULES.values()]


def verdicts_document(verdicts: list[EngineVerdict]) -> dict[str, dict[str, Any]]:
    """JSON `engine_verdicts`: keyed as `engines` is (`engine_rules.json_key`)."""
    return {json_key(ENGINE_RULES[verdict.spec]): verdict.to_dict() for verdict in verdicts}
