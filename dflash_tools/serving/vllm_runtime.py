"""How one vLLM release runs one draft in one layout: the one answer `inspect --engine`, `plan` and
smoke-test share.

From the release's table (`dflash_tools.engine_rules`), for one draft (`DraftFacts`) served in one
layout:

- the speculative method (`method`): the path the table routes the draft's algorithm to;
- where the release reads the layout (`layout_read`), and the config values it must be shown so
  that it serves the wanted layout (`config_overrides`, the first location the release reads
  `sample_from_anchor` from for the draft's dialect family);
- whether the dflash-tools plugin is needed (`needs_plugin`: the table's outcome for the layout);
- why only the V2 model runner serves the draft (`v2_reasons`, the table's `v2_only` rules; mixed
  attention is read from the dialect's normalized layer types, as vLLM reads the translated
  config) and the environment of the launch line that selects it where the release still ships
  V1 (`environment`, the table's `env` flags).

A vLLM without a table (a CPU build of another release, a newer release): its reads and routes are
taken from the newest table, a V1 runner is assumed to exist unless its files say otherwise, and
V2 is pinned where a draft needs it (`engine_rules.VLLM_V2_ONLY`), to be safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dflash_tools.engine_rules import (
    VLLM_V2_ENV,
    VLLM_V2_ONLY,
    DraftTrait,
    EngineRules,
    KeyRead,
    Outcome,
    RunnerRule,
    latest,
)
from dflash_tools.serving.config_reads import lookup
from dflash_tools.serving.engine_model import DraftFacts, layout_for

V2_RUNNER = "v2"  # the plan pins (or the release has only) the V2 model runner
AUTO_RUNNER = "auto"  # the release picks its runner


@dataclass(frozen=True)
class LayoutRead:
    """Where a release reads the layout of a draft and what it finds: `sample_from_anchor` at
    `location` (None: absent, so the rule's default)."""

    rule: KeyRead | None
    value: Any
    location: str | None

    @property
    def default(self) -> bool:
        return bool(self.rule.default) if self.rule is not None else False

    @property
    def sample_from_anchor(self) -> bool:
        """The layout the release serves: the value it reads, else its default."""
        return bool(self.value) if self.location is not None and self.value is not None else self.default


@dataclass(frozen=True)
class VllmRuntime:
    """What one vLLM release does to run one draft in one layout (see the module docstring)."""

    method: str
    sample_from_anchor: bool
    needs_plugin: bool
    has_v1_runner: bool
    v2_reasons: tuple[str, ...]
    environment: dict[str, str] = field(default_factory=dict)
    config_overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def runner(self) -> str:
        """`v2` where the V2 runner is selected or the only one, `auto` where the release picks."""
        return V2_RUNNER if self.v2_reasons or not self.has_v1_runner else AUTO_RUNNER


def reads_of(rules: EngineRules | None) -> EngineRules:
    """The table whose reads and routes apply: the release's own, else the newest vLLM table's."""
    table = rules if rules is not None else latest("vllm")
    if table is None:  # pragma: no cover - the package ships vLLM tables
        raise LookupError("no vLLM table")
    return table


def layout_read(rules: EngineRules, path: str, facts: DraftFacts) -> LayoutRead:
    """How the release reads `sample_from_anchor` on `path` from this draft's config."""
    rule = rules.key("sample_from_anchor", path, facts.family)
    value, location = lookup(facts.config, rule)
    return LayoutRead(rule, value, location)


def mixed_attention(layer_types: tuple[str, ...] | None) -> bool:
    """Some layers sliding-window and the others not (vLLM's own test:
    `VllmConfig._dflash_needs_multi_kv_group` in vllm/config/vllm.py)."""
    sliding = sum(kind == "sliding_attention" for kind in layer_types or ())
    return 0 < sliding < len(layer_types or ())


def _applies(rule: RunnerRule, method: str, facts: DraftFacts, sample_from_anchor: bool) -> bool:
    if rule.path != method:
        return False
    if rule.trait is DraftTrait.EVERY:
        return True
    if rule.trait is DraftTrait.DFLASH2:
        return facts.algorithm == "dflash2"
    if rule.trait is DraftTrait.ANCHOR_FIRST:
        return sample_from_anchor
    return mixed_attention(facts.layer_types)


def vllm_runtime(
    rules: EngineRules | None,
    facts: DraftFacts,
    sample_from_anchor: bool,
    *,
    has_v1_runner: bool | None = None,
) -> VllmRuntime:
    """How the release of `rules` (None: a vLLM without a table) runs the draft in the layout that
    `sample_from_anchor` names. `has_v1_runner`: what the installed vLLM's files say, where they
    were read (else the table's; a release without a table is assumed to have one)."""
    table = reads_of(rules)
    route = table.route(facts.algorithm or "")
    if route is None:
        raise ValueError(f"{table.spec} has no path for {facts.algorithm} drafts")
    method = route.path
    if has_v1_runner is None:
        has_v1_runner = rules.has_v1_runner if rules is not None else True
    runner_rules = rules.v2_only if rules is not None else VLLM_V2_ONLY
    reasons = tuple(rule.reason for rule in runner_rules if _applies(rule, method, facts, sample_from_anchor))
    environment: dict[str, str] = {}
    if reasons and has_v1_runner:
        # The table's `env` flags (`NAME=value`); a release without a table gets the V2 selector.
        assignments = [flag.name for flag in rules.flags("env")] if rules is not None else [f"{VLLM_V2_ENV}=1"]
        for assignment in assignments:
            name, _, value = assignment.partition("=")
            environment[name] = value
    layout_rule = table.outcome(facts.algorithm or "", layout_for(sample_from_anchor))
    return VllmRuntime(
        method=method,
        sample_from_anchor=sample_from_anchor,
        needs_plugin=layout_rule is not None and layout_rule.outcome is Outcome.SERVED_WITH_PLUGIN,
        has_v1_runner=has_v1_runner,
        v2_reasons=reasons,
        environment=environment,
        config_overrides=_overrides(table, method, facts, sample_from_anchor),
    )


def _overrides(rules: EngineRules, method: str, facts: DraftFacts, sample_from_anchor: bool) -> dict[str, Any]:
    """The layout written where the release reads it, when the config would make it serve the other."""
    fmt = rules.reads_format(facts.family or "")
    read = layout_read(rules, method, facts)
    if fmt is None or not fmt.read or read.rule is None or not read.rule.locations:
        return {}
    if read.sample_from_anchor is sample_from_anchor:
        return {}
    return {read.rule.locations[0]: sample_from_anchor}
