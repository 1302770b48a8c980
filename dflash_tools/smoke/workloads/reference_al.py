"""The acceptance length a draft should reach, where one is known: a run far below it fails.

The sanity floor (mean acceptance length 1.2) catches a draft that does not work at all; it lets
through a draft that works at half its strength, such as one reading the wrong target layers
(docs/smoke-test.md, "A reference acceptance length": the engine-demo DFlash2 draft with taps
[0, 1] reaches 2.88-3.02 against 5.54-5.59 with its own). Where a reference exists, a run's mean
acceptance length is also judged against `MARGIN` of it:

1. `--reference-al X`: the user's number, measured like this run (a shortfall fails it).
2. The bundled demo drafts' weights (`dflash_tools/examples/*/manifest.json`): a draft whose
   `model.safetensors` has the sha256 of a bundled demo draft's (a copy, a `convert` output, the
   same weights under another config) has that draft's acceptance, measured when it was trained
   on the bundle's default prompts. On those prompts a shortfall fails the run; on others it is a
   warning (the demo drafts know word problems only), and the diagnosis says the prompts differ.
3. A published card (`configs/references`, with `--dataset`): a shortfall fails the run when it
   was measured under the same protocol (`smoke.workloads.references.distance`), else it is a warning.

A preset's floor already carries its references (0.72-0.75 of them): with one, none is added.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dflash_tools.documents import JsonDocument, json_rules
from dflash_tools.reading.local import examples_dir

# The share of a reference a healthy run reaches: the presets' floors are 0.72-0.75 of their
# published numbers (configs/presets), with room for fewer prompts and shorter answers.
MARGIN = 0.75
# Bundled demo drafts are small: a weights file larger than this is no demo's, and is not hashed.
_MAX_DEMO_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ReferenceAL(JsonDocument):
    """A mean acceptance length the run is judged against. `comparable`: measured the way this
    run measures (a shortfall fails the run), else a shortfall is a warning. `prompts`: the
    prompts file it was measured on, when known (the diagnosis compares it with the run's)."""

    value: float = field(metadata=json_rules(name="mean_acceptance_length"))
    source: str  # "argument", "demo weights", "card"
    description: str
    comparable: bool
    num_speculative_tokens: int | None = None  # the K it was measured at (None: any)
    prompts: str | None = None
    # Per position, where known (a demo's manifest); and the config the same weights were
    # measured with (a demo's own), which the diagnosis compares with the one served.
    rates: tuple[float, ...] = field(default=(), metadata=json_rules(name="acceptance_rate_per_position"))
    config: dict[str, Any] | None = field(default=None, metadata=json_rules(omit=True))
    sibling: str | None = None  # example:NAME whose weights these are

    json_properties: ClassVar[Mapping[str, str]] = {"margin": "margin", "floor": "floor"}
    margin: ClassVar[float] = MARGIN

    @property
    def short(self) -> str:
        """How a sentence names the value: `the reference 5.34`, `the card's 5.46`, or the value a
        sibling's weights reached."""
        if self.sibling:
            return f"the {self.value:.2f} that {self.sibling}'s weights reached"
        owner = "the card's" if self.source == "card" else "the reference"
        return f"{owner} {self.value:.2f}"

    @property
    def floor(self) -> float:
        return round(self.value * MARGIN, 2)


def given(value: float) -> ReferenceAL:
    return ReferenceAL(value, "argument", f"--reference-al {value:g}", comparable=True)


def demo_weights(local_dir: Path | None, prompts_source: str) -> ReferenceAL | None:
    """The reference of a bundled demo draft whose weights `local_dir` holds byte for byte."""
    if local_dir is None:
        return None
    weights = local_dir / "model.safetensors"
    try:
        size = weights.stat().st_size
    except OSError:
        return None
    if size > _MAX_DEMO_BYTES:
        return None
    for manifest_path in sorted(examples_dir().glob("*/manifest.json")):
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        acceptance = manifest.get("acceptance") or {}
        for name, measured in (acceptance.get("drafts") or {}).items():
            recorded = (manifest.get("files") or {}).get(f"{name}/model.safetensors")
            bundled = manifest_path.parent / name / "model.safetensors"
            if not recorded or not bundled.is_file() or bundled.stat().st_size != size:
                continue
            if _sha256(weights) != recorded:
                continue
            declared = (measured or {}).get("declared") or {}
            value = declared.get("mean_acceptance_length")
            if not isinstance(value, int | float):
                return None
            prompts = _default_prompts_name()
            sibling = f"example:{manifest_path.parent.name}/{name}"
            description = f"{sibling}'s weights, measured on {prompts} when trained"
            try:
                config = json.loads((bundled.parent / "config.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                config = None
            return ReferenceAL(
                float(value),
                "demo weights",
                description,
                comparable=Path(prompts_source).name == prompts,
                num_speculative_tokens=acceptance.get("num_speculative_tokens"),
                prompts=prompts,
                rates=tuple(float(rate) for rate in declared.get("acceptance_rate_per_position") or ()),
                config=config if isinstance(config, dict) else None,
                sibling=sibling,
            )
    return None


def card(distances: list[dict[str, Any]]) -> ReferenceAL | None:
    """The first published card value a run was compared with (`smoke.workloads.references`, with --dataset)."""
    for distance in distances:
        if distance.get("measured") is None:
            continue
        return ReferenceAL(
            float(distance["published"]),
            "card",
            f"{distance['label']} {distance['published']:.2f} on {distance['dataset']} ({distance['source']})",
            comparable=bool(distance["same_protocol"]),
        )
    return None


def shortfall(reference: ReferenceAL, mean: float) -> str | None:
    """The sentence of a run below MARGIN of its reference, or None."""
    if mean >= reference.floor:
        return None
    return (
        f"mean acceptance length {mean:.2f} is {mean / reference.value:.0%} of {reference.short}, "
        f"below its floor {reference.floor:.2f} ({MARGIN:.0%})"
    )


def _default_prompts_name() -> str:
    """The prompts a bundled demo draft's acceptance was measured on: smoke-test's default set."""
    from dflash_tools.plan.presets import DEFAULT_PROMPTS

    return Path(DEFAULT_PROMPTS).name


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
