"""`docs/engines.md`, generated from the engine tables: one section per engine release.

    python -m dflash_tools.engine_rules.docs > docs/engines.md

A test keeps the file equal to what this module renders, so the page never says something the
code does not do.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.engine_rules._model import EngineRules, WhenMissing

_HEAD = """# What each engine release does with a draft

Generated from the tables in `dflash_tools/engine_rules/` by
`python -m dflash_tools.engine_rules.docs > docs/engines.md`; a test fails when the two differ.
`dflash-tools inspect --engine ...` applies these tables to a draft (docs/inspect.md, "Engines"),
`dflash-tools convert --for ...` writes what they read (docs/convert.md) and `dflash-tools plan`
builds launch lines from them and checks their serving rules (docs/plan.md).

Terms. A *path* is how the engine serves a draft: SGLang's `--speculative-algorithm` (`DFLASH`,
`DSPARK`) or vLLM's `method` (`dflash`, `dspark`). A *location* is a dotted key path in the
draft's config.json; an engine tries a key's locations in the order listed and the first one
present wins. *bonus*: query position 0 holds the last verified token and K + 1 positions draft
K tokens; *anchor-first*: every position drafts, K positions for K tokens. Outcomes: `served`
(as trained), `served-with-plugin` (as trained, only with the dflash-tools vLLM plugin),
`refused` (the engine fails loudly), `misaligned` (served without an error in another layout
than trained: acceptance collapses while the output stays correct), `unsupported` (no loader),
`served-wrong` (served without an error, but keys or weights are dropped), `unchecked` (the
release has a loader for the architecture, and dflash-tools reads no config of it: DFT008).
Every rule cites the file of the released wheel it comes from (and the function, where one).

*Architectures* lists every DFlash-family architecture the release registers, and which
dialect reads its configs (docs/adding-a-dialect.md); the real-engine tiers compare the list
with the release's own registry. *Config features* says what the release does with a feature a
config declares (`dflash_tools/dialects/features.py`, finding DFT035): `outcome` when the
config states it at a location the release reads (and the named condition holds), `else` when
it does not.

These tables are a hand-kept model of each release. On the serving host, `inspect --engine vllm`
(and `--engine sglang` where SGLang is installed) also asks the installed engine's own config
code what it builds from the draft; where it disagrees with its release's table, it wins in the
column and DFT079 names the field, and a release without a table gets a column read from it
(docs/inspect.md, "The installed engine has the last word").
"""


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _code(value: str) -> str:
    return f"`{value}`" if value else ""


def _table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    rows = list(rows)
    if not rows:
        return []
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return lines + [""]


def _default(rule_default: Any, when_missing: WhenMissing) -> str:
    if when_missing is not WhenMissing.DEFAULT:
        return ""
    return "" if rule_default is None else f"`{rule_default}`"


def render_rules(rules: EngineRules) -> list[str]:
    lines = [f"## `{rules.spec}` (released {rules.released})", "", rules.summary, ""]
    if rules.format_rules:
        lines += ["### Config formats", ""]
        lines += _table(
            ("format", "read", "from", "notes"),
            ((f.family, "yes" if f.read else "no", f.cite, f.note) for f in rules.format_rules),
        )
    if rules.routes:
        lines += ["### Paths", ""]
        lines += _table(
            ("algorithm", "path", "architectures with a loader", "from"),
            ((r.algorithm, _code(r.path), ", ".join(r.architectures), r.cite) for r in rules.routes),
        )
    if rules.architectures:
        lines += ["### Architectures", ""]
        lines += _table(
            ("architecture", "algorithm", "loader", "read by dflash-tools as", "from", "notes"),
            (
                (
                    _code(a.name),
                    a.algorithm,
                    _code(a.loader),
                    f"`{a.family}` configs" if a.family else "not read: DFT008, nothing checked",
                    a.cite,
                    a.note,
                )
                for a in rules.architectures
            ),
        )
    if rules.layouts:
        lines += ["### Layouts", ""]
        lines += _table(
            ("algorithm", "layout", "outcome", "from", "notes"),
            ((r.algorithm, r.layout.value, r.outcome.value, r.cite, r.note) for r in rules.layouts),
        )
    if rules.keys:
        lines += ["### Keys read", ""]
        lines += _table(
            ("key", "path", "locations, first found wins", "default", "when absent", "from", "notes"),
            (
                (
                    _code(k.key),
                    _code(k.path),
                    ", ".join(_code(location) for location in k.locations) or "not read",
                    _default(k.default, k.when_missing),
                    k.when_missing.value,
                    k.cite,
                    k.note,
                )
                for k in rules.keys
            ),
        )
    if rules.features:
        lines += ["### Config features", ""]
        lines += _table(
            ("feature", "read at", "outcome", "else", "from", "notes"),
            (
                (
                    _code(f.feature) + (f" (`{f.path}`)" if f.path else ""),
                    ", ".join(_code(location) for location in f.locations) or "not read",
                    f.outcome.value
                    + (f" if `{f.requires}`" if f.requires else "")
                    + (" (depends on the target's model)" if f.target_dependent else ""),
                    f.ignored.value,
                    f.cite,
                    f.note,
                )
                for f in rules.features
            ),
        )
    if rules.checks:
        lines += ["### Checks when the draft is loaded", ""]
        lines += _table(
            ("check", "path", "keys", "rule", "broken", "from"),
            (
                (_code(c.name), _code(c.path), ", ".join(_code(k) for k in c.keys), c.rule, c.outcome.value, c.cite)
                for c in rules.checks
            ),
        )
    if rules.launch:
        lines += ["### Launch line", ""]
        lines += _table(
            ("role", "flag", "meaning", "from"),
            ((f.role, _code(f.name), f.meaning, f.cite) for f in rules.launch),
        )
    if rules.v2_only:
        lines += ["### Drafts only the V2 model runner serves (the launch line selects it)", ""]
        lines += _table(
            ("path", "drafts", "on the V1 runner", "V1 refuses with", "from"),
            (
                (_code(r.path), r.trait.value, r.reason, _code(r.v1_refuses) or "no error", r.cite)
                for r in rules.v2_only
            ),
        )
    if rules.serving_defaults:
        lines += ["### Defaults the serving plan reads", ""]
        lines += _table(
            ("setting", "value", "from GPU memory", "paths", "from", "notes"),
            (
                (
                    _code(d.setting),
                    f"`{d.value}`",
                    f"{d.min_gpu_memory_gib:g} GiB",
                    ", ".join(_code(path) for path in d.paths) or "all",
                    d.cite,
                    d.note,
                )
                for d in rules.serving_defaults
            ),
        )
    if rules.serving_rules:
        lines += ["### Rules on the launch settings (the serving plan checks them)", ""]
        lines += _table(
            ("rule", "what must hold", "when broken", "from"),
            ((_code(r.name), r.rule, r.broken, r.cite) for r in rules.serving_rules),
        )
    if rules.query_count_sites:
        lines += ["### Where the release sizes draft work from the query count", ""]
        lines += _table(
            ("site", "from", "stock", "with the plugin"),
            ((s.name, s.cite, s.stock, s.plugin) for s in rules.query_count_sites),
        )
    if rules.engine == "vllm":
        plugin = rules.plugin_route if rules.plugin_supported else "not patched by the dflash-tools plugin"
        lines += [
            f"V1 model runner: {'present' if rules.has_v1_runner else 'removed'}. Plugin: {plugin}.",
            "",
        ]
    for note in rules.notes:
        lines += [note, ""]
    return lines


def render_markdown() -> str:
    lines = [_HEAD]
    for rules in ENGINE_RULES.values():
        lines += render_rules(rules)
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":  # pragma: no cover - documentation generator
    sys.stdout.write(render_markdown())
