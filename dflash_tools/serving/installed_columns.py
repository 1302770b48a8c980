"""The columns of `inspect --engine` read from the engines installed here (`installed_reading`).

`installed_column` builds one: the table's column first (the release's own table, or the newest
table of that engine for a release the tool has none for), then the engine's own reading of the
draft (a `Reader`: `vllm_reader` runs the installed vLLM in a child process), the disagreements
between the two (DFT089, where the table is the release's own), and the column as the engine
reads it. Where the engine cannot be asked at all, DFT077 says why and the table's column stays
(a release without a table then gets no column).

`engine_view` passes in how a column is built (`Build`), so that this module does not import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dflash_tools.engine_rules import EngineRules, latest
from dflash_tools.findings import Finding, make_finding
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.serving.engine_model import DraftFacts, EngineView
from dflash_tools.serving.installed_reading import (
    ENGINE_NAMES,
    EngineReading,
    InstalledEngineView,
    apply_reading,
    corrected_rules,
    disagreement_finding,
    disagreements,
)
from dflash_tools.serving.installed_sglang import read_installed_sglang
from dflash_tools.serving.installed_vllm import DraftRequest, read_installed_vllm

# Build(rules, view): the column of `rules` (into `view` when given, else a new EngineView).
Build = Callable[[EngineRules, EngineView | None], EngineView]
# Reader(table_view, facts): the engine's reading of the draft, or why it could not be asked.
Reader = Callable[[EngineView, DraftFacts], EngineReading | str]


@dataclass
class InstalledColumn:
    """The column read from the installed engine (None where it could not be asked and the
    release has no table), and findings that belong to no column (DFT077)."""

    view: EngineView | None
    findings: list[Finding]


def installed_column(
    engine: str,
    version: str,
    table: EngineRules | None,
    facts: DraftFacts,
    build: Build,
    reader: Reader,
) -> InstalledColumn:
    """The column of the `engine` `version` installed here. `table`: the tool's table for that
    release (None: it has none, and the newest table of the engine fills in)."""
    base = table if table is not None else latest(engine)
    if base is None:  # pragma: no cover - the package ships tables for every engine
        return InstalledColumn(None, [])
    table_view = build(base, None)
    reading = reader(table_view, facts)
    name = f"{ENGINE_NAMES.get(engine, engine)} {version}"
    if isinstance(reading, str):
        fallback = "its table's column stands" if table is not None else "there is no column for it"
        finding = make_finding(
            "DFT077",
            f"the installed {name} could not be asked what it builds from the draft: {reading}; {fallback}",
            f"run inspect with the Python environment that runs {ENGINE_NAMES.get(engine, engine)}, "
            "and check that it imports",
            values={"engine": f"{engine}=={version}", "why": reading},
        )
        return InstalledColumn(table_view if table is not None else None, [finding])
    found = disagreements(table_view, reading)
    rules = corrected_rules(base, facts, table_view, reading)
    view = InstalledEngineView(
        rules=rules,
        installed=True,
        reading=reading,
        table_spec=base.spec,
        has_table=table is not None,
        disagreements=found,
    )
    build(rules, view)
    apply_reading(view, facts, reading)
    if found and table is not None:
        view.findings.append(disagreement_finding(view.spec, reading, found))
    for step in reading.unavailable():
        view.note(
            "DFT077",
            f"{reading.name}'s {step.name} step cannot run in this environment ({step.why}): what it reads "
            "comes from the table",
            "run inspect on the serving host, in the Python environment that runs the engine",
            values={"step": step.name},
        )
    return InstalledColumn(view, [])


# --------------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------------


def _method(table_view: EngineView, facts: DraftFacts) -> str | None:
    """The engine's path for the draft: the column's, else the table's route for its algorithm."""
    if table_view.path is not None or facts.algorithm is None:
        return table_view.path
    route = table_view.rules.route(facts.algorithm)
    return route.path if route is not None else None


def _draft_location(loaded: LoadedCheckpoint) -> tuple[Path | None, str | None]:
    """(a local folder whose config.json is the one inspect read, else None; the config's text)."""
    # Absolute: the child runs in its own folder, where a relative path names nothing.
    folder = loaded.local_dir.resolve() if loaded.kind != "hub" and loaded.local_dir is not None else None
    if folder is not None and _config_text(folder) != loaded.config_text:
        folder = None  # a config file of another name: the engine reads config.json, so give it that text
    return folder, (loaded.config_text if folder is None else None)


def vllm_request(loaded: LoadedCheckpoint, table_view: EngineView, facts: DraftFacts) -> DraftRequest:
    """What the child reads for this draft: the method and K the column's launch line gives."""
    method = _method(table_view, facts)
    tokens = table_view.draft_tokens or facts.requested_tokens or facts.trained_max_tokens
    skip = ""
    if tokens is None and method != "dspark":
        skip = "K is unknown (vLLM needs num_speculative_tokens for this method): pass -k K"
    folder, text = _draft_location(loaded)
    return DraftRequest(
        id="draft",
        folder=folder,
        config_text=text,
        method=method,
        num_speculative_tokens=tokens,
        skip_engine=skip,
    )


def _config_text(folder: Path) -> str | None:
    try:
        return (folder / "config.json").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def vllm_reader(loaded: LoadedCheckpoint, version: str) -> Reader:
    """Ask the vLLM installed here (`installed_vllm.read_installed_vllm`) about this draft."""

    def read(table_view: EngineView, facts: DraftFacts) -> EngineReading | str:
        if loaded.config_text is None and loaded.local_dir is None:
            return "the draft has no config.json to give it"
        run = read_installed_vllm([vllm_request(loaded, table_view, facts)], version=version)
        return run.readings.get("draft") or run.failure or "it returned nothing"

    return read


# --------------------------------------------------------------------------------------------
# SGLang
# --------------------------------------------------------------------------------------------


def sglang_request(loaded: LoadedCheckpoint, table_view: EngineView, facts: DraftFacts) -> DraftRequest:
    """What SGLang's child reads: the draft on the path (DFLASH, DSPARK) the table routes it to."""
    folder, text = _draft_location(loaded)
    return DraftRequest(id="draft", folder=folder, config_text=text, method=_method(table_view, facts))


def sglang_reader(loaded: LoadedCheckpoint, version: str) -> Reader:
    """Ask the SGLang installed here (`installed_sglang.read_installed_sglang`) about this draft."""

    def read(table_view: EngineView, facts: DraftFacts) -> EngineReading | str:
        if loaded.config_text is None and loaded.local_dir is None:
            return "the draft has no config.json to give it"
        readings, failure = read_installed_sglang([sglang_request(loaded, table_view, facts)], version=version)
        return readings.get("draft") or failure or "it returned nothing"

    return read
