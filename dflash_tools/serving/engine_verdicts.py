"""Each engine release's verdict on one draft, from the tables alone: plain `inspect`'s engine lines.

    table_verdicts(report, target_name)  ->  [EngineVerdict, ...]   (one per release in ENGINE_RULES)

A verdict is the outcome of the release's view (`engine_view.engine_view` with its static table:
no engine is read or imported, the vLLM installed here included) with the K it drafts and the
query positions that K takes in the layout it serves. `inspect --engine` gives the whole column
of the same view, with its findings and launch line.

What each outcome word means is `serving.verdict.OUTCOME_WORDS`, printed beside it the first time
it appears (docs/inspect.md, "Engines").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflash_tools.documents import JsonDocument
from dflash_tools.engine_rules import ENGINE_RULES, Outcome, json_key
from dflash_tools.inspect import InspectReport
from dflash_tools.serving.engine_model import DraftFacts, EngineView
from dflash_tools.serving.engine_view import engine_view
from dflash_tools.serving.verdict import OUTCOME_WORDS


def outcome_meaning(outcome: str) -> str:
    return OUTCOME_WORDS.get(outcome, "")


@dataclass(frozen=True)
class EngineVerdict(JsonDocument):
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


def table_verdicts(report: InspectReport, target_name: str | None = None) -> list[EngineVerdict]:
    """Every release's verdict from its table (none when there is no config to apply them to)."""
    facts = DraftFacts.from_report(report, target=target_name)
    if facts is None:
        return []
    return [EngineVerdict.of(engine_view(rules, facts)) for rules in ENGINE_RULES.values()]


def verdicts_document(verdicts: list[EngineVerdict]) -> dict[str, dict[str, Any]]:
    """JSON `engine_verdicts`: keyed as `engines` is (`engine_rules.json_key`)."""
    return {json_key(ENGINE_RULES[verdict.spec]): verdict.to_dict() for verdict in verdicts}
