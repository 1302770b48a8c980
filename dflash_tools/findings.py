"""Findings: the stable, documented result of every check.

Codes are public contract (docs/findings.md): JSON output, docs and tests refer to them. A code never
changes meaning; new codes may be added.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class CodeInfo:
    code: str
    severity: Severity
    title: str


_CATALOGUE: tuple[CodeInfo, ...] = (
    CodeInfo("DFT001", Severity.ERROR, "config.json missing or not valid JSON"),
    CodeInfo("DFT002", Severity.ERROR, "dialect not recognized"),
    CodeInfo("DFT003", Severity.ERROR, "safetensors header corrupt, out of bounds, overlapping or with holes"),
    CodeInfo("DFT004", Severity.ERROR, "shard index names a file that is missing or escapes the checkpoint folder"),
    CodeInfo("DFT005", Severity.INFO, "weights not inspected (config-only source, or shards not available offline)"),
    CodeInfo("DFT007", Severity.INFO, "the Hub was unreachable: the draft was read from the local cache"),
    CodeInfo("DFT006", Severity.ERROR, "config value has the wrong type or is out of range"),
    CodeInfo(
        "DFT008",
        Severity.WARNING,
        "architecture an engine release serves that dflash-tools reads no config of: nothing about it is checked",
    ),
    CodeInfo("DFT009", Severity.WARNING, "config keys dflash-tools does not know (they may change the draft's math)"),
    CodeInfo(
        "DFT010",
        Severity.ERROR,
        "block_size missing, not a positive int, or two locations disagree (or two declarations of the layout)",
    ),
    CodeInfo(
        "DFT011",
        Severity.WARNING,
        "sample_from_anchor not declared where engines read it (a note when the evidence settles the layout)",
    ),
    CodeInfo(
        "DFT012",
        Severity.ERROR,
        "proposal count is not the trained K_max (a warning when only an inferred layout makes it wrong)",
    ),
    CodeInfo("DFT013", Severity.ERROR, "requested K incompatible with the trained geometry (DFlash2: K != K_max)"),
    CodeInfo("DFT014", Severity.WARNING, "requested K above K_max (positions never trained)"),
    CodeInfo("DFT015", Severity.ERROR, "conv taps exceed block_size / group size does not divide hidden"),
    CodeInfo("DFT016", Severity.INFO, "requested K below K_max (valid, drafts fewer positions than trained)"),
    CodeInfo("DFT017", Severity.WARNING, "conv taps exceed the query positions (unused taps)"),
    CodeInfo("DFT018", Severity.WARNING, "the trained layout is unknown: its evidence disagrees (both readings shown)"),
    CodeInfo("DFT019", Severity.WARNING, "weaker layout evidence says the other layout than the evidence that decides"),
    CodeInfo("DFT020", Severity.ERROR, "required tensor missing"),
    CodeInfo("DFT021", Severity.WARNING, "unexpected tensor (will be dropped or will break loading)"),
    CodeInfo("DFT022", Severity.ERROR, "tensor shape differs from the config's expectation"),
    CodeInfo("DFT023", Severity.WARNING, "mixed or unusual floating dtypes"),
    CodeInfo("DFT024", Severity.INFO, "quantized checkpoint: packed weights checked by name, not by shape"),
    CodeInfo("DFT030", Severity.ERROR, "target layer id out of range, duplicated or unsorted"),
    CodeInfo("DFT031", Severity.ERROR, "hidden size mismatch with the target (fc width, draft hidden)"),
    CodeInfo("DFT032", Severity.ERROR, "vocabulary mismatch with the target, or mask_token_id out of range"),
    CodeInfo("DFT033", Severity.WARNING, "layer ids look shifted by one (z-lab / speculators convention mixed up)"),
    CodeInfo("DFT034", Severity.WARNING, "RoPE settings differ from the target's"),
    CodeInfo(
        "DFT035",
        Severity.INFO,
        "config feature engine releases treat differently (warning where one ignores or refuses it)",
    ),
    CodeInfo("DFT040", Severity.WARNING, "speculators draft whose full-attention layers vLLM will run causally"),
    CodeInfo("DFT041", Severity.WARNING, "layout or algorithm the selected vLLM runner cannot serve as declared"),
    CodeInfo("DFT055", Severity.INFO, "sliding layers see other context keys served (vLLM) than trained (speculators)"),
    CodeInfo("DFT050", Severity.INFO, "departs from the published profile of a known checkpoint"),
    CodeInfo(
        "DFT054", Severity.WARNING, "named like a published draft, but its config.json is none of the known revisions"
    ),
    CodeInfo(
        "DFT051",
        Severity.ERROR,
        "vLLM's V1 runner would serve an anchor-first DFlash draft in the bonus layout, silently",
    ),
    CodeInfo("DFT052", Severity.WARNING, "--engine vllm given but vLLM is not installed: serving not checked"),
    CodeInfo(
        "DFT053", Severity.INFO, "the installed vLLM serves this anchor-first draft (natively or with the plugin)"
    ),
    CodeInfo("DFT058", Severity.WARNING, "config value an engine reads is far outside what real checkpoints use"),
    CodeInfo(
        "DFT070", Severity.ERROR, "the engine reads no config of this format, or has no loader for its architecture"
    ),
    CodeInfo(
        "DFT071", Severity.ERROR, "the engine would serve the draft without an error, but not as trained (layout, keys)"
    ),
    CodeInfo(
        "DFT072",
        Severity.WARNING,
        "the engine falls back to a block size or draft count the draft was not trained with",
    ),
    CodeInfo("DFT073", Severity.ERROR, "the target layers the engine captures differ from the trained ones"),
    CodeInfo("DFT074", Severity.ERROR, "the engine refuses the draft when it loads it"),
    CodeInfo(
        "DFT075", Severity.WARNING, "what the engine uses depends on the target, and cannot be checked from the draft"
    ),
    CodeInfo("DFT076", Severity.INFO, "served as trained only with the dflash-tools vLLM plugin on the serving host"),
    CodeInfo(
        "DFT077",
        Severity.WARNING,
        "the engine installed here could not be asked what it builds from the draft (or one of its steps)",
    ),
    CodeInfo(
        "DFT078", Severity.ERROR, "the engine cannot load the config (an unknown or missing model_type, at config load)"
    ),
    CodeInfo(
        "DFT079",
        Severity.WARNING,
        "the config class its model_type selects fills keys the config leaves out, and they change the draft",
    ),
    CodeInfo(
        "DFT080",
        Severity.ERROR,
        "max_num_batched_tokens is below max_num_seqs x the draft's query positions (the draft pass runs fewer "
        "requests at once)",
    ),
    CodeInfo(
        "DFT081",
        Severity.WARNING,
        "the engine's default for a serving setting breaks a check: the launch line sets the value that holds",
    ),
    CodeInfo("DFT082", Severity.ERROR, "the weights and one request of max_model_len do not fit in the GPU memory"),
    CodeInfo(
        "DFT083",
        Severity.ERROR,
        "tensor or decode context parallelism cannot split the target or the draft (heads, KV heads, vocabulary)",
    ),
    CodeInfo("DFT084", Severity.INFO, "the launch line pins a draft setting the release needs (the draft's DCP)"),
    CodeInfo("DFT085", Severity.INFO, "the launch line selects the model runner that serves the draft"),
    CodeInfo("DFT086", Severity.INFO, "the engine caps the running requests lower than asked unless told otherwise"),
    CodeInfo("DFT087", Severity.WARNING, "the memory check is incomplete (weights unknown, or state not counted)"),
    CodeInfo("DFT088", Severity.ERROR, "a setting on the launch line that the engine refuses at start-up"),
    CodeInfo(
        "DFT089",
        Severity.WARNING,
        "the installed engine reads the draft differently from dflash-tools' table for its release",
    ),
    CodeInfo("DFT059", Severity.ERROR, "duplicated JSON key with different values (readers disagree on which wins)"),
    CodeInfo("DFT060", Severity.WARNING, "duplicated JSON key repeating the same value"),
    CodeInfo("DFT061", Severity.ERROR, "string with a lone surrogate: not Unicode, refused by strict JSON readers"),
    CodeInfo("DFT062", Severity.ERROR, "JSON nested deeper than any config (64 levels)"),
)

CATALOGUE: dict[str, CodeInfo] = {info.code: info for info in _CATALOGUE}


@dataclass(frozen=True)
class Finding:
    """One problem (or note) about a checkpoint.

    `keys` names the exact config keys or tensor names involved and `values` their values, so a
    script can act on a finding without parsing the message.
    """

    code: str
    severity: Severity
    message: str
    hint: str = ""
    keys: tuple[str, ...] = ()
    values: dict[str, Any] = field(default_factory=dict)
    file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "severity": self.severity.value,
            "title": CATALOGUE[self.code].title if self.code in CATALOGUE else "",
            "message": self.message,
            "hint": self.hint,
            "keys": list(self.keys),
        }
        if self.values:
            out["values"] = _strict_json(self.values)
        if self.file is not None:
            out["file"] = self.file
        return out


def brief_list(values: Sequence[Any], shown: int = 12) -> str:
    """A list as a message quotes it: whole when short, else its first and last entries and its length.

    A config may carry a million layer ids; a message (and the terminal) gets a line, and the
    whole list stays in the finding's `values`.
    """
    if len(values) <= shown:
        return "[" + ", ".join(repr(v) for v in values) + "]"
    head = ", ".join(repr(v) for v in values[: shown - 2])
    tail = ", ".join(repr(v) for v in values[-2:])
    return f"[{head}, ..., {tail}] ({len(values):,} entries)"


def _strict_json(value: Any, depth: int = 0) -> Any:
    """`values` quote the config exactly, except what strict JSON cannot carry.

    NaN and the infinities become strings spelled as the file spells them; structures nested
    deeper than any real config are summarized, so a hostile value cannot exhaust the encoder.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list | tuple) and set(map(type, value)) <= _PLAIN:
        return list(value)  # a million layer ids: nothing to change, checked at C speed
    if isinstance(value, dict | list | tuple):
        if depth >= _MAX_VALUE_DEPTH:
            return f"<{type(value).__name__} nested deeper than {_MAX_VALUE_DEPTH} levels>"
        if isinstance(value, dict):
            return {key: _strict_json(item, depth + 1) for key, item in value.items()}
        return [_strict_json(item, depth + 1) for item in value]
    return value


_MAX_VALUE_DEPTH = 32
_PLAIN = frozenset({int, str, bool, type(None)})


def make_finding(
    code: str,
    message: str,
    hint: str = "",
    *,
    severity: Severity | None = None,
    keys: tuple[str, ...] | list[str] = (),
    values: dict[str, Any] | None = None,
    file: str | None = None,
) -> Finding:
    """Build a finding; the severity comes from the catalogue unless a check overrides it."""
    info = CATALOGUE[code]
    return Finding(
        code=code,
        severity=severity or info.severity,
        message=message,
        hint=hint,
        keys=tuple(keys),
        values=dict(values or {}),
        file=file,
    )


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)


_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then by code, keeping discovery order inside a code."""
    return sorted(findings, key=lambda f: (_SEVERITY_ORDER[f.severity], f.code))
