"""Published acceptance lengths (`configs/references/*.json`) and how far a measurement is from them.

A published number is only a yardstick under the protocol, the definition and the dataset it was
measured with. Each reference set says all three, and where it comes from:

    {"schema_version": 1, "draft": "z-lab/Qwen3.8-27B-DFlash2", "target": "Qwen/Qwen3.8-27B",
     "sets": [{"name": "card", "label": "the card's", "source": "...",
               "protocol": "zlab-card",          # configs/protocols/zlab-card.json
               "definition": "sglang",           # smoke.acceptance: "sglang" or "vllm"
               "aggregation": "mean_per_request",  # or "pooled"
               "engine": "SGLang", "hardware": "1x H200",
               "values": {"gsm8k": 5.46, ...},   # by dataset (smoke.workloads.datasets names)
               "floors": {...}}]}                # optional: what the publisher asserts

`distance` states a measurement against one of them in a sentence such as
"AL 5.21, 95% of the card's 5.46 on GSM8K, same protocol", and says so when the protocols differ.

Imports: `draft.profiles` (where the bundled configs live), `smoke.workloads.protocols`, `smoke.acceptance`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.draft.profiles import configs_dir
from dflash_tools.errors import UsageError
from dflash_tools.smoke import acceptance
from dflash_tools.smoke.workloads.datasets import DATASETS
from dflash_tools.smoke.workloads.protocols import MeasurementProtocol, load_protocol

REFERENCES_SCHEMA_VERSION = 1
AGGREGATIONS = ("mean_per_request", "pooled")


@dataclass(frozen=True)
class ReferenceSet(JsonDocument):
    draft: str
    target: str | None
    name: str
    label: str  # what a sentence puts before the number: "the card's", "vLLM's DFlash CI target"
    source: str
    protocol: str
    definition: str
    aggregation: str
    values: dict[str, float]
    floors: dict[str, float] = field(default_factory=dict)
    engine: str = ""
    hardware: str = ""

    json_keys: ClassVar[tuple[str, ...]] = (
        "draft",
        "target",
        "name",
        "label",
        "source",
        "protocol",
        "definition",
        "aggregation",
        "engine",
        "hardware",
        "values",
        "floors",
    )


def references_dir() -> Path:
    return configs_dir() / "references"


def _values(data: Any, where: str) -> dict[str, float]:
    if not isinstance(data, dict):
        raise UsageError(f"{where} is not an object of dataset -> number", "fix the references file")
    values: dict[str, float] = {}
    for key, value in data.items():
        if key not in DATASETS:
            raise UsageError(f"{where}: {key!r} is not one of {', '.join(DATASETS)}", "fix the references file")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 1:
            raise UsageError(f"{where}.{key} is {value!r}, not an acceptance length", "fix the references file")
        values[key] = float(value)
    return values


def _text(data: dict[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise UsageError(f"{where}.{key} is missing or not text", "fix the references file")
    return value


def parse_references(data: Any, where: str) -> list[ReferenceSet]:
    if not isinstance(data, dict) or data.get("schema_version") != REFERENCES_SCHEMA_VERSION:
        raise UsageError(f"{where}: not a references file (schema_version {REFERENCES_SCHEMA_VERSION})", "fix it")
    draft = _text(data, "draft", where, required=True)
    target = _text(data, "target", where) or None
    sets = data.get("sets")
    if not isinstance(sets, list) or not sets:
        raise UsageError(f"{where}: sets must be a non-empty list", "fix the references file")
    found = []
    for index, item in enumerate(sets):
        item_where = f"{where}: sets[{index}]"
        if not isinstance(item, dict):
            raise UsageError(f"{item_where} is not an object", "fix the references file")
        definition = item.get("definition")
        if definition not in acceptance.DEFINITIONS:
            raise UsageError(f"{item_where}.definition is {definition!r}, not vllm or sglang", "fix it")
        aggregation = item.get("aggregation", "mean_per_request")
        if aggregation not in AGGREGATIONS:
            raise UsageError(f"{item_where}.aggregation is {aggregation!r}", f"one of {', '.join(AGGREGATIONS)}")
        found.append(
            ReferenceSet(
                draft=draft,
                target=target,
                name=_text(item, "name", item_where, required=True),
                label=_text(item, "label", item_where, required=True),
                source=_text(item, "source", item_where, required=True),
                protocol=_text(item, "protocol", item_where, required=True),
                definition=definition,
                aggregation=aggregation,
                values=_values(item.get("values"), f"{item_where}.values"),
                floors=_values(item.get("floors", {}), f"{item_where}.floors"),
                engine=_text(item, "engine", item_where),
                hardware=_text(item, "hardware", item_where),
            )
        )
    return found


def load_references(folder: Path | None = None) -> list[ReferenceSet]:
    """Every reference set bundled (or in `folder`)."""
    found: list[ReferenceSet] = []
    for path in sorted((folder or references_dir()).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise UsageError(f"references {path}: cannot read JSON ({exc})", "fix the references file") from None
        found += parse_references(data, f"references {path}")
    return found


def references_for(draft: str | None, dataset: str, folder: Path | None = None) -> list[ReferenceSet]:
    """The reference sets with a value for `dataset`, of `draft` (a repo id; any draft when None)."""
    wanted = draft.lower().removeprefix("hf://") if draft else None
    return [
        ref
        for ref in load_references(folder)
        if dataset in ref.values and (wanted is None or ref.draft.lower() == wanted)
    ]


# --- the distance ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Distance(JsonDocument):
    reference: ReferenceSet = field(metadata=json_rules(omit=True))  # JSON: its name, label, source
    dataset: str
    measured: float | None
    published: float
    ratio: float | None
    same_protocol: bool
    aggregation_used: str = field(metadata=json_rules(name="aggregation"))
    sentence: str

    json_keys: ClassVar[tuple[str, ...]] = (
        "reference",
        "label",
        "source",
        "dataset",
        "definition",
        "aggregation",
        "measured",
        "published",
        "floor",
        "ratio",
        "same_protocol",
        "protocol",
        "sentence",
    )
    json_properties: ClassVar[Mapping[str, str]] = {
        "reference": "reference.name",
        "label": "reference.label",
        "source": "reference.source",
        "definition": "definition",
        "floor": "floor",
        "protocol": "reference.protocol",
    }

    @property
    def definition(self) -> str:
        """The name of the acceptance definition the reference uses."""
        return str(acceptance.DEFINITIONS[self.reference.definition]["name"])

    @property
    def floor(self) -> float | None:
        return self.reference.floors.get(self.dataset)


def same_sampling(run: MeasurementProtocol, published: MeasurementProtocol) -> bool:
    """Whether two protocols decode alike: sampling, chat and the chat template's switches."""
    return (
        run.temperature == published.temperature
        and (run.greedy or (run.top_p, run.top_k) == (published.top_p, published.top_k))
        and run.chat == published.chat
        and run.chat_template_kwargs == published.chat_template_kwargs
    )


def distance(
    lengths: dict[str, Any], dataset: str, run_protocol: MeasurementProtocol, reference: ReferenceSet
) -> Distance:
    """How far a result's acceptance length (`acceptance_lengths` of a result) is from a reference.

    The measured value is taken in the reference's definition and aggregation (pooled when the
    server gives no per-request values, which the sentence then says).
    """
    title = DATASETS[dataset].title
    published = reference.values[dataset]
    entry = lengths.get(reference.definition) or {}
    aggregation = reference.aggregation
    measured = entry.get(aggregation)
    notes = []
    if measured is None and aggregation == "mean_per_request" and entry.get("pooled") is not None:
        measured, aggregation = entry["pooled"], "pooled"
        notes.append("pooled over requests; the reference averages per request")
    expected_protocol = load_protocol(reference.protocol)
    same = same_sampling(run_protocol, expected_protocol)
    if measured is None:
        sentence = f"no {acceptance.DEFINITIONS[reference.definition]['name']} measured to compare with {reference.label} {published:.2f} on {title}"
        return Distance(reference, dataset, None, published, None, same, aggregation, sentence)
    ratio = measured / published
    sentence = f"AL {measured:.2f}, {ratio:.0%} of {reference.label} {published:.2f} on {title}"
    if same:
        sentence += ", same protocol"
        if run_protocol.max_tokens != expected_protocol.max_tokens and run_protocol.max_tokens:
            notes.append(f"{run_protocol.max_tokens} tokens per answer, the reference {expected_protocol.max_tokens}")
    else:
        sentence += (
            f", not the same protocol (this run: {run_protocol.summary()}; {reference.name}: "
            f"{expected_protocol.summary()}): not a like-for-like comparison"
        )
    floor = reference.floors.get(dataset)
    if floor is not None:
        notes.append(f"{'above' if measured >= floor else 'BELOW'} its floor {floor:.2f}")
    notes.append(acceptance.DEFINITIONS[reference.definition]["name"])
    sentence += " (" + "; ".join(notes) + ")"
    return Distance(reference, dataset, measured, published, ratio, same, aggregation, sentence)
