"""Pairing a draft with its target model (docs/rules.md, "Pairing with the target"): config.json of the
target only."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_tools.draft.description import DraftDescription
from dflash_tools.errors import SourceError
from dflash_tools.findings import Finding, brief_list, make_finding
from dflash_tools.reading.checkpoint import path_exists, read_small_file
from dflash_tools.reading.safetensors_header import TensorHeader
from dflash_tools.reading.source import looks_like_repo_id


@dataclass(frozen=True)
class TargetSpec:
    """The target dimensions a draft depends on (the text model of a multimodal target)."""

    source: str
    location: str
    num_hidden_layers: int
    hidden_size: int
    vocab_size: int
    rope_theta: float | None
    architectures: list[str]
    multimodal: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "location": self.location,
            "num_hidden_layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "rope_theta": self.rope_theta,
            "architectures": self.architectures,
            "multimodal": self.multimodal,
        }


def rope_theta(config: dict[str, Any]) -> float | None:
    params = config.get("rope_parameters")
    value = params.get("rope_theta") if isinstance(params, dict) else None
    if value is None:
        value = config.get("rope_theta")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    # A JSON integer may be too large for a float, and NaN / Infinity parse as floats: neither
    # is a usable theta, and either would break the JSON report.
    try:
        theta = float(value)
    except OverflowError:
        return None
    return theta if math.isfinite(theta) else None


def target_from_config(config: dict[str, Any], source: str, location: str) -> TargetSpec:
    text = config.get("text_config")
    multimodal = isinstance(text, dict)
    inner: dict[str, Any] = text if isinstance(text, dict) else config
    values: dict[str, int] = {}
    for key in ("num_hidden_layers", "hidden_size", "vocab_size"):
        value = inner.get(key, config.get(key))
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            where = f"text_config.{key}" if multimodal else key
            raise SourceError(
                f"target {location}: {where} is {value!r}, not a positive integer",
                "pass the target model's own config.json",
            )
        values[key] = value
    archs = config.get("architectures")
    return TargetSpec(
        source=source,
        location=location,
        num_hidden_layers=values["num_hidden_layers"],
        hidden_size=values["hidden_size"],
        vocab_size=values["vocab_size"],
        rope_theta=rope_theta(inner) if rope_theta(inner) is not None else rope_theta(config),
        architectures=[a for a in archs if isinstance(a, str)] if isinstance(archs, list) else [],
        multimodal=multimodal,
    )


def load_target(
    source: str, *, revision: str | None = None, token: str | None = None, timeout: float | None = None
) -> TargetSpec:
    """Read a target's config.json from a folder, a file, a bundled example or the Hub."""
    from dflash_tools.reading.local import examples_dir
    from dflash_tools.reading.source import EXAMPLE_PREFIX

    if source.startswith(EXAMPLE_PREFIX):
        name = source[len(EXAMPLE_PREFIX) :]
        path = examples_dir() / name
        if not name or ".." in Path(name).parts or not (path / "config.json").is_file():
            raise SourceError(f"no bundled example target named {name!r}", "e.g. example:tiny-target")
    else:
        path = Path(source).expanduser()
    if path_exists(path):
        file = path / "config.json" if path.is_dir() else path
        if path.is_dir() and not path_exists(file):
            raise SourceError(f"target {source}: no config.json in {path}", "pass the target model's folder")
        if not file.is_file():
            # A device, FIFO or folder would hang the read or make no sense as a config.
            raise SourceError(f"target {file}: not a regular file", "pass the target model's folder or its config.json")
        try:
            config = json.loads(read_small_file(file).decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise SourceError(
                f"target {file}: cannot read config.json ({exc})", "restore the target's config.json"
            ) from None
        if not isinstance(config, dict):
            raise SourceError(f"target {file}: config.json is not a JSON object", "restore the target's config.json")
        return target_from_config(config, source, str(file.resolve()))
    if looks_like_repo_id(source):
        from dflash_tools.reading.hub import load_hub_config

        config, location = load_hub_config(
            source.removeprefix("hf://"), revision=revision, token=token, timeout=timeout
        )
        return target_from_config(config, source, location)
    raise SourceError(
        f"target {source}: no such folder and not a Hugging Face repo id", "pass --target with a folder or owner/name"
    )


def check_target(
    desc: DraftDescription, target: TargetSpec, tensors: dict[str, TensorHeader] | None = None
) -> list[Finding]:
    findings: list[Finding] = []
    findings.extend(_layer_findings(desc, target))
    findings.extend(_hidden_findings(desc, target, tensors or {}))
    findings.extend(_vocab_findings(desc, target, tensors or {}))
    draft_theta = rope_theta(desc.decoder.rope)
    if draft_theta is not None and target.rope_theta is not None and draft_theta != target.rope_theta:
        findings.append(
            make_finding(
                "DFT034",
                f"draft rope_theta {draft_theta:g} differs from the target's {target.rope_theta:g}",
                "drafts normally share the target's RoPE settings; check the draft config's rope_parameters",
                keys=("rope_parameters.rope_theta",),
                values={"draft": draft_theta, "target": target.rope_theta},
            )
        )
    return findings


def _layer_findings(desc: DraftDescription, target: TargetSpec) -> list[Finding]:
    layers = target.num_hidden_layers
    key = desc.target_layer_ids_key
    findings: list[Finding] = []
    shifted = [i for i in desc.target_layer_ids if i == layers]
    beyond = [i for i in desc.target_layer_ids if i > layers]
    if shifted:
        findings.append(
            make_finding(
                "DFT033",
                f"{key} (z-lab convention {brief_list(desc.target_layer_ids)}) includes {layers}, one past the last of the target's "
                f"{layers} layers: the ids look written in the speculators convention (id + 1)",
                "subtract 1 from each id in a z-lab config (or write them as aux_hidden_state_layer_ids in a speculators config)",
                keys=(key,),
                values={"target_layer_ids": desc.target_layer_ids, "target_num_hidden_layers": layers},
            )
        )
    if beyond:
        findings.append(
            make_finding(
                "DFT030",
                f"{key} (z-lab convention {brief_list(desc.target_layer_ids)}) has ids {brief_list(beyond)} beyond the target's {layers} layers",
                "the draft was built for a deeper target: pair it with the model it was trained on",
                keys=(key,),
                values={"target_layer_ids": desc.target_layer_ids, "target_num_hidden_layers": layers},
            )
        )
    if desc.num_target_layers is not None and desc.num_target_layers != layers:
        findings.append(
            make_finding(
                "DFT030",
                f"num_target_layers = {desc.num_target_layers} but the target has {layers} layers",
                "pair the draft with the target it was trained on",
                keys=("num_target_layers",),
                values={"num_target_layers": desc.num_target_layers, "target_num_hidden_layers": layers},
            )
        )
    return findings


def _hidden_findings(desc: DraftDescription, target: TargetSpec, tensors: dict[str, TensorHeader]) -> list[Finding]:
    findings: list[Finding] = []
    hidden = desc.decoder.hidden_size
    want_fc = desc.num_captured_layers * target.hidden_size
    fc = tensors.get("fc.weight")
    fc_width = fc.shape[1] if fc is not None and len(fc.shape) == 2 else desc.fc_input_width
    if fc_width != want_fc:
        findings.append(
            make_finding(
                "DFT031",
                f"fc.weight input width is {fc_width}, but {desc.num_captured_layers} captured layers x target hidden "
                f"{target.hidden_size} = {want_fc}",
                "the draft was trained on a target with another hidden size: pair it with its own target",
                keys=("fc.weight",),
                values={"fc_input_width": fc_width, "expected": want_fc},
            )
        )
    owns_vocab_io = "embed_tokens.weight" in tensors and "lm_head.weight" in tensors
    if hidden != target.hidden_size and not owns_vocab_io:
        findings.append(
            make_finding(
                "DFT031",
                f"draft hidden_size {hidden} != target hidden_size {target.hidden_size}, and the draft does not ship its "
                "own embed_tokens and lm_head to replace the shared ones",
                "pair the draft with the target it was trained on",
                keys=("hidden_size",),
                values={"draft": hidden, "target": target.hidden_size},
            )
        )
    return findings


def _vocab_findings(desc: DraftDescription, target: TargetSpec, tensors: dict[str, TensorHeader]) -> list[Finding]:
    findings: list[Finding] = []
    vocab = desc.decoder.vocab_size
    if vocab != target.vocab_size:
        findings.append(
            make_finding(
                "DFT032",
                f"draft vocab_size {vocab} != target vocab_size {target.vocab_size}",
                "the draft shares the target's embeddings and head: pair it with the target it was trained on",
                keys=("vocab_size",),
                values={"draft": vocab, "target": target.vocab_size},
            )
        )
    if desc.mask_token_id is not None and desc.mask_token_id >= target.vocab_size:
        findings.append(
            make_finding(
                "DFT032",
                f"{desc.mask_token_id_key} = {desc.mask_token_id} is outside the target vocabulary ({target.vocab_size})",
                "use the mask token id of the target tokenizer",
                keys=(desc.mask_token_id_key or "mask_token_id",),
                values={"mask_token_id": desc.mask_token_id, "target_vocab_size": target.vocab_size},
            )
        )
    return findings
