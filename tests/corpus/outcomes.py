"""What each engine release does with each corpus file at load (`engine_outcomes.json`).

One record per corpus entry and engine release, established by running that engine's code (the
vLLM tiers, the SGLang source tier, transformers' AutoConfig under each pinned release), never
from dflash-tools' answer. The tiers re-run the engines and compare with the record; with
`DFLASH_TOOLS_RECORD_OUTCOMES=1` they write what they measured into it instead (a new corpus
file, a new engine release): tests/corpus/README.md, "What each engine does".

Keys, per release:
- transformers==X: `outcome` (loads / wont-load), `config_class`, `filled` (the keys the class fills
  that the file leaves out, among those that change the draft), or `error`.
- vllm==X: `config` (get_config: loads with `config_class`, or wont-load), then `outcome`
  (served: the speculator was built / refused / unsupported: no model class / wont-load), `error`,
  `method` and `architecture` (vLLM's, after its rewrites), `k_given` (the K the probe had to give;
  null where vLLM decides it), `num_speculative_tokens` (the drafts), `layout`, `query_positions`.
- sglang==X: `config` (loads / wont-load, as SGLang's get_config would), `registered` (an
  `EntryClass` names the architecture), `outcome`, and for a served draft what its parsers give:
  `block_size`, `layout`, `target_layer_ids`, `mask_token_id`.
Every record has a `source`: which code decided it.

The engine tiers import this module too, so it imports nothing of the tests' own set-up.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

RECORD = Path(__file__).parent / "engine_outcomes.json"

# Disagreements that are bugs in the tool, not pieces being built; each names the engine's code.
TOOL_BUGS: dict[tuple[str, str], str] = {}
"""(corpus entry, engine release) -> why the tool's column disagrees with what that engine does: bugs
in the tool, found by the corpus (strict xfails in the default suite and in the engine tiers)."""
RECORDING = os.environ.get("DFLASH_TOOLS_RECORD_OUTCOMES") == "1"


def load() -> dict[str, dict[str, dict[str, Any]]]:
    loaded: dict[str, dict[str, dict[str, Any]]] = json.loads(RECORD.read_text(encoding="utf-8"))
    return loaded


def recorded(release: str) -> dict[str, dict[str, Any]]:
    """The record of one release ("vllm==0.34.0", "transformers==5.19.0", ...), per entry."""
    return {entry: releases[release] for entry, releases in load().items() if release in releases}


def write(release: str, measured: dict[str, dict[str, Any]]) -> None:
    """Replace one release's column of the record with what a tier measured."""
    record = load() if RECORD.exists() else {}
    for entry in list(record):
        record[entry].pop(release, None)
    for entry, outcome in measured.items():
        record.setdefault(entry, {})[release] = outcome
    ordered = {entry: dict(sorted(record[entry].items())) for entry in sorted(record)}
    RECORD.write_text(json.dumps(ordered, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def check_or_record(release: str, measured: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    """Entries whose record differs from the measurement (recorded, measured); records instead
    when DFLASH_TOOLS_RECORD_OUTCOMES=1."""
    if RECORDING:
        write(release, measured)
        return {}
    have = recorded(release)
    return {
        entry: (have.get(entry), measured.get(entry))
        for entry in sorted(set(have) | set(measured))
        if have.get(entry) != measured.get(entry)
    }


def explain(differs: dict[str, tuple[Any, Any]]) -> str:
    """The entries whose record differs, each with its recorded and its measured outcome."""
    lines = [f"{len(differs)} corpus file(s) differ from the record (DFLASH_TOOLS_RECORD_OUTCOMES=1 re-records):"]
    for entry, (have, got) in differs.items():
        lines += [
            f"- {entry}",
            f"  recorded: {json.dumps(have, sort_keys=True)}",
            f"  measured: {json.dumps(got, sort_keys=True)}",
        ]
    return "\n".join(lines)
