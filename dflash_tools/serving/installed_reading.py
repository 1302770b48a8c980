"""The installed engine has the last word: its own reading of a draft against the table's column.

Where an engine is installed in this environment (the serving host), `inspect` asks that engine's
own config code what it builds from the draft (`installed_vllm`, `installed_sglang`: each runs the
engine in a child process and returns an `EngineReading`). This module is what both share:

- `disagreements(table_view, reading)`: every field where the table's column (`EngineView`, built
  from the release's table in `dflash_tools/engine_rules/`) says something else than the engine
  did: whether it loads and builds the draft, the method (path), the layout, the drafts (K), the
  query positions, the block, the mask token, the captured target layers. Each is a DFT089
  finding: the table is wrong there.
- `installed_view(...)`: the column as the installed engine reads it, which replaces the table's.
  The engine's layout and loader enter the table's own steps through a copy of the table
  corrected by the reading (`corrected_rules`), so every consequence (misaligned, the plugin, the
  launch line) follows from them; what it raised, its mask token, its captured layers and its
  query positions are then written over the column (`apply_reading`). A release the tool has no
  table for is read the same way on the newest table of that engine, which only supplies what
  the engine's config code cannot show (the checks at weight load, the launch flags).
- `InstalledEngineView`: such a column, which says where it was read from (JSON `read_from`,
  `installed_reading`, `disagreements`).

Nothing here imports an engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.draft.geometry import num_query_tokens
from dflash_tools.engine_rules import EngineRules, FormatRule, KeyRead, Layout, Outcome, Route
from dflash_tools.findings import Finding, make_finding
from dflash_tools.serving.engine_model import DraftFacts, EngineView, layout_for

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}

# Step states an engine's child process reports (see installed_vllm_child.py).
OK, RAISED, SKIPPED, UNAVAILABLE = "ok", "raised", "skipped", "unavailable"


@dataclass(frozen=True)
class ReadStep(JsonDocument):
    """One step of the engine's own load path, run on the draft: what it read or what it raised."""

    name: str = field(metadata=json_rules(name="step"))
    cite: str = field(metadata=json_rules(name="from"))
    status: str  # ok | raised | skipped | unavailable
    read: dict[str, Any] = field(default_factory=dict)
    raised: str = field(default="", metadata=json_rules(omit_empty=True))  # "ValueError: ...": what the engine raised
    at: str = field(default="", metadata=json_rules(omit_empty=True))  # where (vllm/config/speculative.py:1642)
    why: str = field(default="", metadata=json_rules(omit_empty=True))  # why it was skipped or could not run

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReadStep:
        return cls(
            name=str(data.get("step", "")),
            cite=str(data.get("from", "")),
            status=str(data.get("status", SKIPPED)),
            read=dict(data.get("read") or {}),
            raised=str(data.get("raised", "")),
            at=str(data.get("at", "")),
            why=str(data.get("why", "")),
        )


@dataclass(frozen=True)
class EngineReading(JsonDocument):
    """What an installed engine's own code made of one draft (None: that step did not read it).

    `target_layer_ids` are in the z-lab convention (the layer whose output is captured), as the
    engine captures them; None where the config names none (the engine then takes the target's
    defaults, which depend on the target). `block_size` is SGLang's block (DFLASH: the verify
    window; DSPARK: the drafts); vLLM has none for DFlash (K comes from the launch line).
    """

    engine: str
    version: str
    steps: tuple[ReadStep, ...] = ()
    method: str | None = None
    architecture: str | None = None
    registered: bool | None = None
    num_speculative_tokens: int | None = None
    query_positions: int | None = None
    sample_from_anchor: bool | None = None
    block_size: int | None = None
    mask_token_id: int | None = None
    target_layer_ids: tuple[int, ...] | None = None
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, metadata=json_rules(inline=True))

    @property
    def name(self) -> str:
        """`vLLM 0.34.0`: how messages name it."""
        return f"{ENGINE_NAMES.get(self.engine, self.engine)} {self.version}"

    @property
    def stopped(self) -> ReadStep | None:
        """The step at which the engine raised (it stops there), or None."""
        return next((step for step in self.steps if step.status == RAISED), None)

    @property
    def built(self) -> bool:
        """Every step ran and none raised: the engine builds the draft's config and drafter."""
        return bool(self.steps) and all(step.status == OK for step in self.steps)

    @property
    def layout(self) -> Layout | None:
        return None if self.sample_from_anchor is None else layout_for(self.sample_from_anchor)

    def step(self, name: str) -> ReadStep | None:
        return next((step for step in self.steps if step.name == name), None)

    def unavailable(self) -> list[ReadStep]:
        return [step for step in self.steps if step.status == UNAVAILABLE]


# --------------------------------------------------------------------------------------------
# Where the table and the engine disagree
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Disagreement(JsonDocument):
    """One field where the table's column and the installed engine differ; `evidence`: the
    engine's step that read it (its file and function)."""

    field: str
    table: Any
    engine: Any
    evidence: str

    def phrase(self) -> str:
        return f"{self.field}: the table says {_shown(self.table)}, the engine {_shown(self.engine)}"


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value) if value else "none"
    return "none" if value is None else str(value)


# Outcomes that say the engine does not load or build the draft; `wont-load` is the outcome of a
# config the engine cannot load at all (issue 32, the load path), where the tables have it.
STOPS = frozenset({Outcome.REFUSED.value, Outcome.UNSUPPORTED.value, "wont-load"})
_WONT_LOAD = next((outcome for outcome in Outcome if outcome.value == "wont-load"), Outcome.REFUSED)
# The steps that load the config (a draft that raises there does not load at all).
LOAD_STEPS = ("get_config",)


def table_query_positions(view: EngineView) -> int | None:
    """The query positions per request the table's column implies: K + 1 bonus, K anchor-first."""
    if view.draft_tokens is None or view.layout is None:
        return None
    return num_query_tokens(view.draft_tokens, view.layout is Layout.ANCHOR_FIRST)


def _evidence(reading: EngineReading, *names: str) -> str:
    steps = [reading.step(name) for name in names]
    cites = [f"{step.name} ({step.cite})" for step in steps if step is not None and step.cite]
    return f"{reading.name}: " + "; ".join(cites) if cites else reading.name


def disagreements(view: EngineView, reading: EngineReading) -> list[Disagreement]:
    """Where the table's column (`view`) says something else than the engine's own reading."""
    found: list[Disagreement] = []
    stopped = reading.stopped
    if stopped is not None:
        if view.outcome.value not in STOPS:
            engine = f"raises at {stopped.name}: {stopped.raised}"
            found.append(Disagreement("outcome", view.outcome.value, engine, _evidence(reading, stopped.name)))
        return found  # nothing after the step that raised was read
    if reading.registered is False:
        if view.outcome.value not in STOPS:
            engine = f"has no loader for architecture {reading.architecture or '(none named)'}"
            found.append(Disagreement("outcome", view.outcome.value, engine, _evidence(reading, "registry")))
        return found
    if view.outcome is Outcome.UNSUPPORTED:
        if reading.built and reading.registered is True:
            engine = f"builds it (method {reading.method}, architecture {reading.architecture})"
            found.append(Disagreement("outcome", view.outcome.value, engine, _evidence(reading, "engine_config")))
        return found  # the table reads nothing further: no field to compare
    if view.path is None or view.outcome is Outcome.UNCHECKED:
        return found  # the table reads no config of it (DFT008): it claims nothing to compare

    def compare(name: str, table: Any, engine: Any, *steps: str) -> None:
        if engine is not None and table != engine:
            found.append(Disagreement(name, table, engine, _evidence(reading, *steps)))

    compare("method", view.path, reading.method, "engine_config", "parse")
    layout = view.layout.value if view.layout is not None else None
    compare("layout", layout, reading.layout.value if reading.layout else None, "speculator", "parse")
    compare("num_speculative_tokens", view.draft_tokens, reading.num_speculative_tokens, "engine_config", "parse")
    if view.layout is reading.layout:  # else the layout says it already
        compare("query_positions", table_query_positions(view), reading.query_positions, "speculator")
    compare("block_size", view.block_size, reading.block_size, "parse")
    if view.mask_token_id_source != "looked-up":
        compare("mask_token_id", view.mask_token_id, reading.mask_token_id, "draft_reads", "parse")
    ids = reading.target_layer_ids
    table_ids = view.target_layer_ids if view.target_layer_ids_source == "config" else None
    engine_ids = list(ids) if ids is not None else None
    if engine_ids != table_ids and _layers_read(reading):
        found.append(
            Disagreement(
                "target_layer_ids",
                table_ids if table_ids is not None else "derived from the target",
                list(ids) if ids is not None else "derived from the target",
                _evidence(reading, "draft_reads", "parse"),
            )
        )
    return found


def _layers_read(reading: EngineReading) -> bool:
    return any(step.status == OK and "target_layer_ids" in step.read for step in reading.steps) or any(
        step.status == OK and "aux_hidden_state_layer_ids" in step.read for step in reading.steps
    )


def disagreement_finding(spec: str, reading: EngineReading, found: list[Disagreement]) -> Finding:
    """DFT089: the table for this release is wrong about the draft; the engine's reading is used."""
    return make_finding(
        "DFT089",
        f"{spec}: the installed {reading.name} reads the draft differently from dflash-tools' table for it "
        f"({'; '.join(d.phrase() for d in found)}); the column shows what {reading.name} does",
        "the table is wrong here: report it with this output (its JSON `disagreements` names the engine's "
        "file and function for each)",
        keys=tuple(dict.fromkeys(d.field for d in found)),
        values={"engine": spec, "disagreements": [d.to_dict() for d in found]},
    )


# --------------------------------------------------------------------------------------------
# The column as the installed engine reads it
# --------------------------------------------------------------------------------------------


@dataclass
class InstalledEngineView(EngineView):
    """One engine column read from the engine installed here (its `rules` are the table used for
    what its config code cannot show: the release's own, or the newest one of that engine)."""

    reading: EngineReading | None = field(default=None, metadata=json_rules(name="installed_reading"))
    # The table compared with (its own) or filling in (the newest).
    table_spec: str = field(default="", metadata=json_rules(name="table"))
    has_table: bool = True  # the tool has a table for this very release
    disagreements: list[Disagreement] = field(default_factory=list)

    json_keys: ClassVar[tuple[str, ...]] = (
        *EngineView.json_keys,
        "read_from",
        "table",
        "has_table",
        "installed_reading",
        "disagreements",
    )
    # The version read from the installed engine, in the place of the table's.
    json_properties: ClassVar[Mapping[str, str]] = {
        **EngineView.json_properties,
        "version": "version",
        "read_from": "read_from",
    }

    @classmethod
    def of(cls, view: EngineView, **extra: Any) -> InstalledEngineView:
        """A copy of `view` (every field, whatever EngineView holds) with `extra` set."""
        base = {f.name: getattr(view, f.name) for f in fields(EngineView)}
        return cls(**base, **extra)

    @property
    def version(self) -> str:
        return self.reading.version if self.reading is not None else self.rules.version

    @property
    def spec(self) -> str:
        return f"{self.rules.engine}=={self.version}"

    @property
    def read_from(self) -> str:
        if self.reading is None:
            return ""
        return f"the installed {self.reading.name}"


def corrected_rules(
    rules: EngineRules, facts: DraftFacts, table_view: EngineView, reading: EngineReading
) -> EngineRules:
    """The table, corrected where the engine's reading shows it wrong about what the column's steps
    read from it: the layout the engine serves (the `sample_from_anchor` read on the draft's path),
    and its loader (the format and the route, where the engine built a draft the table calls
    unsupported). Everything else stays the table's."""
    cite = f"the installed {reading.name}"
    loader = reading.built and reading.registered is True and reading.method is not None
    if loader and table_view.outcome is Outcome.UNSUPPORTED and facts.algorithm:
        assert reading.method is not None
        rules = _with_loader(rules, facts, reading.method, cite)
    path = table_view.path or reading.method
    layout = reading.sample_from_anchor
    if path is None or layout is None or table_view.layout is layout_for(layout):
        return rules
    current = rules.key("sample_from_anchor", path, facts.family)
    read = KeyRead(
        "sample_from_anchor",
        path,
        (),
        cite=cite,
        default=layout,
        note=f"read from {cite}",
        family=current.family if current is not None else None,
    )
    keys = tuple(rule for rule in rules.keys if rule is not current)
    return replace(rules, keys=(read, *keys))


def _with_loader(rules: EngineRules, facts: DraftFacts, method: str, cite: str) -> EngineRules:
    assert facts.algorithm is not None
    formats = rules.formats
    if facts.family is not None and not (rules.reads_format(facts.family) or FormatRule("", False, "")).read:
        formats = (FormatRule(facts.family, True, cite), *(f for f in formats if f.family != facts.family))
    routes = list(rules.routes)
    route = rules.route(facts.algorithm)
    architecture = facts.architecture or ""
    if route is None:
        routes.append(Route(facts.algorithm, method, (architecture,), cite))
    elif architecture not in route.architectures:
        routes[routes.index(route)] = replace(route, architectures=(*route.architectures, architecture))
    return replace(rules, formats=formats, routes=tuple(routes))


def apply_reading(view: EngineView, facts: DraftFacts, reading: EngineReading) -> None:
    """Write what the engine raised and read (its mask token, captured layers, drafts, query
    positions, block) over the column; a value that is not the trained one fails it."""
    stopped = reading.stopped
    if stopped is not None:
        reason = f"{reading.name} raises when it loads the draft, at {stopped.name}: {stopped.raised}"
        if view.outcome.value not in STOPS:
            view.note(
                "DFT074",
                f"refuses it: {reason}",
                f"the engine's own code raised this ({stopped.cite}{', ' + stopped.at if stopped.at else ''})",
                values={"step": stopped.name, "raised": stopped.raised},
            )
        outcome = _WONT_LOAD if stopped.name in LOAD_STEPS else Outcome.REFUSED
        if view.outcome.value not in STOPS or view.outcome is outcome:
            view.outcome, view.refusal = outcome, reason  # the engine's own words win
        view.launch = None
        view.matches_training = False
        return
    if reading.registered is False:
        view.fail(Outcome.UNSUPPORTED, f"{reading.name} has no loader for the draft's architecture")
        view.launch = None
        view.matches_training = False
        return
    if view.path is None:
        view.path = reading.method
    if view.layout is None and reading.layout is not None:
        view.layout = reading.layout
    if reading.num_speculative_tokens is not None:
        view.draft_tokens = reading.num_speculative_tokens
    if reading.block_size is not None and reading.block_size != view.block_size:
        view.block_size, view.block_size_source = reading.block_size, "installed"
    if reading.query_positions is not None and view.block_size_source == "launch":
        view.block_size = reading.query_positions  # vLLM's DFlash "block" is the query count
    matches = view.matches_training
    if reading.mask_token_id is not None and reading.mask_token_id != view.mask_token_id:
        view.mask_token_id, view.mask_token_id_source = reading.mask_token_id, "installed"
    trained_mask = facts.trained_mask_token_id
    if view.mask_token_id is not None and trained_mask is not None and view.mask_token_id != trained_mask:
        matches = False
        if view.mask_token_id_source == "installed":
            reason = f"it embeds the masked positions with token {view.mask_token_id}, not {trained_mask}"
            view.fail(Outcome.SERVED_WRONG, reason)
            view.note(
                "DFT071",
                f"{reading.name} reads mask_token_id {view.mask_token_id}, the draft describes {trained_mask}",
                keys=("mask_token_id",),
            )
    if reading.target_layer_ids is not None and list(reading.target_layer_ids) != view.target_layer_ids:
        view.target_layer_ids, view.target_layer_ids_source = list(reading.target_layer_ids), "installed"
        trained = facts.trained_layer_ids
        if trained is not None and sorted(set(trained)) != view.target_layer_ids:
            matches = False
            view.fail(Outcome.SERVED_WRONG, f"it captures target layers {view.target_layer_ids}, not {trained}")
    view.matches_training = matches and view.serves_as_trained


def reading_note(reading: EngineReading) -> str:
    """A short line for the human output: where the column was read, and what could not run."""
    steps = ", ".join(step.name for step in reading.steps if step.status == OK)
    text = f"read from the installed {reading.name} ({steps or 'no step ran'})"
    missing = reading.unavailable()
    if missing:
        text += "; not run here: " + ", ".join(f"{step.name} ({step.why})" for step in missing)
    return text


# --------------------------------------------------------------------------------------------
# Running an engine's child process
# --------------------------------------------------------------------------------------------


def run_child(
    child: Path,
    request: Path,
    folder: Path,
    *,
    timeout_s: float,
    python: str | None = None,
    environ: dict[str, str] | None = None,
) -> tuple[dict[str, Any] | None, str]:
    """Run `python CHILD REQUEST RESULT` in `folder` (the private temporary folder that holds the
    request); returns the result document it wrote (None: none) and why it failed ("" if it did
    not). The engine's output (its logs go to stdout) is kept away from ours."""
    result_path = folder / "result.json"
    env = dict(os.environ if environ is None else environ)
    env["HF_HUB_OFFLINE"] = "1"  # the draft and target are local: nothing is fetched
    command = [python or sys.executable, str(child), str(request), str(result_path)]
    failure = ""
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=folder, timeout=timeout_s, check=False
        )
        if completed.returncode != 0:
            failure = f"it exited with status {completed.returncode}: {_last_line(completed.stderr)}"
    except subprocess.TimeoutExpired:
        failure = f"it did not answer within {timeout_s:.0f} s"
    except OSError as exc:
        failure = f"it could not be started ({exc})"
    try:
        document = json.loads(result_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, failure or "it wrote no result"
    return (document if isinstance(document, dict) else None), failure


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"
