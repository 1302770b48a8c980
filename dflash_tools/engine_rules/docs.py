"""`docs/engines.md`, generated from the engine tables: one section per engine release.

    python -m dflash_tools.engine_rules.docs > docs/engines.md

A test keeps the file equal to what this module renders, so the page never says something the
code does not do.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.engine_rules._model import EngineRules, WhenMissing
from dflash_tools.engine_rules.config_loading import AUTO_CONFIG_CITE, ConfigLoading, transformers_table

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
release has a loader for the architecture, and dflash-tools reads no config of it: DFT008),
`wont-load` (the engine cannot load the config at all: an unknown or missing `model_type`,
DFT078). Every rule cites the file of the released wheel it comes from (and the function, where one).

*Loading the config* is the first step of each release's load path: which config class the
draft's config.json becomes (the release's own registries, then transformers' `AutoConfig` for
the transformers the release requires), which fills every key the file leaves out. The
registries and the defaults are generated from the released wheels
(`python -m dflash_tools.engine_rules.generate_defaults`, never by hand; the tiers regenerate and
compare); *transformers' defaults* at the end lists what the config classes drafts declare fill
in (DFT079 where that changes the draft).

*Architectures* lists every DFlash-family architecture the release registers, and which
dialect reads its configs (docs/adding-a-dialect.md); the real-engine tiers compare the list
with the release's own registry. *Config features* says what the release does with a feature a
config declares (`dflash_tools/dialects/features.py`, finding DFT035): `outcome` when the
config states it at a location the release reads (and the named condition holds), `else` when
it does not.

These tables are a hand-kept model of each release. On the serving host, `inspect --engine vllm`
(and `--engine sglang` where SGLang is installed) also asks the installed engine's own config
code what it builds from the draft; where it disagrees with its release's table, it wins in the
column and DFT089 names the field, and a release without a table gets a column read from it
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


def _loading(loading: ConfigLoading) -> list[str]:
    data = loading.release_data
    table = loading.transformers_data
    rows: list[tuple[str, str, str]] = []
    how = "`model_type`"
    if loading.speculators_detection:
        how += "; absent: `speculators` when the config has `speculators_config`"
    mapped = ", ".join(f"`{a}` → `{m}`" for a, m in loading.architecture_model_types.items())
    if mapped:
        how += f"; {'before it' if loading.architecture_first else 'absent: from'} `architectures[0]`: {mapped}"
    rows.append(("model_type", how, loading.parser))
    if loading.speculative:
        speculative = ", ".join(f"`{m}` ({c})" for m, c in loading.speculative.items())
        known = ", ".join(f"`{t}`" for t in loading.speculators_model_types)
        rows.append(
            (
                "its speculative config classes",
                f"{speculative}; the speculators class translates the file, `speculators_model_type` one of {known}",
                data["cites"][1] if len(data.get("cites", [])) > 1 else "",
            )
        )
    rows.append(
        (
            "its config registry",
            f"{len(loading.registry)} model_types, loaded with its own class: "
            + ", ".join(f"`{m}`" for m in loading.registry),
            data["cites"][0] if data.get("cites") else "",
        )
    )
    if loading.auto_config_extra:
        rows.append(
            (
                "registered with AutoConfig only",
                ", ".join(f"`{m}`" for m in loading.auto_config_extra),
                data["cites"][0] if data.get("cites") else "",
            )
        )
    rows.append(
        (
            "transformers",
            f"requires `{loading.transformers}`; every other model_type through `AutoConfig` (an unknown or missing "
            f"one raises: wont-load); defaults from transformers {loading.table} ({len(table['model_types'])} "
            f"model_types known, {len(table['classes'])} classes' defaults tabulated)",
            AUTO_CONFIG_CITE,
        )
    )
    return ["### Loading the config", "", *_table(("step", "what the release does", "from"), rows)]


def _fill_cell(entry: dict[str, Any], key: str) -> str:
    rule = entry.get("fills", {}).get(key)
    if rule is None:
        return "?"
    if rule.get("absent"):
        return "-"
    if "period" in rule:
        short = {"sliding_attention": "S", "full_attention": "F", "linear_attention": "L", "indexed_attention": "I"}
        return "repeats " + "".join(short.get(kind, "?") for kind in rule["period"])
    if "derived" in rule:
        return f"= {rule['derived']}"
    if "value" in rule:
        value = rule["value"]
        if key == "rope_parameters" and isinstance(value, dict):
            types = (
                {value.get("rope_type")}
                if "rope_type" in value
                else {part.get("rope_type") for part in value.values() if isinstance(part, dict)}
            )
            return "/".join(sorted(str(t) for t in types)) + (f" x{value['factor']:g}" if "factor" in value else "")
        return f"`{json.dumps(value)}`"
    return "computed"


def render_transformers_defaults() -> list[str]:
    """What the config classes drafts declare fill in, per transformers version a release uses."""
    lines = ["## transformers' defaults (generated)", ""]
    lines += [
        "What the config class of each model_type fills into a config that leaves the key out (`-`: the class "
        "has no such attribute; `repeats SF`: the pattern over num_hidden_layers, S sliding_attention, F "
        "full_attention, L linear_attention, I indexed_attention; `computed`: from other keys, not tabulated). *Depends on*: keys that change the fill "
        "when the config sets them to another value than the class's (the fill is then not tabulated).",
        "",
    ]
    keys = ("layer_types", "sliding_window", "head_dim", "rope_parameters", "attention_bias", "tie_word_embeddings")
    for version in dict.fromkeys(
        rules.config_loading.table for rules in ENGINE_RULES.values() if rules.config_loading is not None
    ):
        table = transformers_table(version)
        lines += [f"### transformers {version}", ""]
        rows = []
        for model_type, entry in table["classes"].items():
            depends = sorted({name for names in entry.get("inputs", {}).values() for name in names})
            rows.append(
                (
                    _code(model_type),
                    entry["class"],
                    *(_fill_cell(entry, key) for key in keys),
                    ", ".join(_code(name) for name in depends),
                )
            )
        lines += _table(("model_type", "class", *keys, "depends on"), rows)
    return lines


def render_rules(rules: EngineRules) -> list[str]:
    lines = [f"## `{rules.spec}` (released {rules.released})", "", rules.summary, ""]
    if rules.config_loading is not None:
        lines += _loading(rules.config_loading)
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
    lines += render_transformers_defaults()
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":  # pragma: no cover - documentation generator
    sys.stdout.write(render_markdown())
