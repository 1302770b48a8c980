"""The target model: its one normalized description (`TargetDescription`, read from config.json only)
and the pairing of a draft with it (docs/rules.md, "Pairing with the target").

`inspect --target`, `plan` (its memory, parallelism and token-budget checks), `convert --target`
and `smoke-test` all read the target through `load_target` / `target_from_config`: one reading,
one rule for a multimodal target's `text_config` (`text_value`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_tools.draft.description import DraftDescription
from dflash_tools.errors import SourceError
from dflash_tools.findings import Finding, brief_list, make_finding
from dflash_tools.reading.checkpoint import path_exists, read_small_file
from dflash_tools.reading.safetensors_header import TensorHeader
from dflash_tools.reading.source import looks_like_repo_id

# Layer kinds of `layer_types` whose KV the serving plan counts (others keep a fixed state).
FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"


@dataclass(frozen=True)
class TargetDescription:
    """A target model as every command reads it: its config.json, read once (`target_from_config`).

    A multimodal target is its text model: each key is read from `text_config` when that holds
    it, else from the top level (`text_value`, the one rule). The pairing fields (layers,
    hidden size, vocabulary) are required; the attention geometry a serving plan needs is read
    too, and a key it cannot read is kept as `attention_problem` until a plan asks for it.
    """

    source: str
    location: str
    num_hidden_layers: int
    hidden_size: int
    vocab_size: int
    rope_theta: float | None
    architectures: list[str]
    multimodal: bool
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None  # num_attention_heads when the config names none
    head_dim: int | None = None  # hidden_size / num_attention_heads when the config names none
    layer_types: tuple[str, ...] = ()  # one per layer: full_attention, sliding_attention or another kind
    sliding_window: int | None = None  # None when the config has none, or does not use it
    dtype: str | None = None  # the config's `torch_dtype` / `dtype`, without `torch.`
    max_position_embeddings: int | None = None
    mla: bool = False  # multi-head latent attention (`kv_lora_rank`): no KV heads to split
    # Why the attention geometry cannot be read ("text_config.num_attention_heads is None, ..."):
    # pairing does not need it, a serving plan does (`require_attention`).
    attention_problem: str | None = None

    def require_attention(self) -> None:
        """Raise SourceError naming the key when the attention geometry could not be read."""
        if self.attention_problem is not None:
            raise SourceError(
                f"target {self.location}: {self.attention_problem}", "pass the target model's own config.json"
            )

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


# The name it had when it held only the pairing dimensions.
TargetSpec = TargetDescription


def text_value(config: Mapping[str, Any], key: str) -> tuple[Any, str]:
    """(value, where) of a target config key: `text_config`'s when it holds the key (a multimodal
    target's text model), else the top level's. `where` names the key as the config writes it."""
    text = config.get("text_config")
    if isinstance(text, Mapping) and key in text:
        return text[key], f"text_config.{key}"
    return config.get(key), key


def rope_theta(config: Mapping[str, Any]) -> float | None:
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


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# A bound on num_hidden_layers: the per-layer attention kinds are one entry per layer.
_MAX_LAYERS = 1 << 16


class _Unreadable(Exception):
    """A key the attention geometry needs, missing or not a positive integer."""


def _required(config: Mapping[str, Any], key: str, multimodal: bool) -> int:
    value, where = text_value(config, key)
    if not _positive(value):
        if value is None and multimodal and where == key:
            where = f"text_config.{key}"  # absent everywhere: the text model is where it belongs
        raise _Unreadable(f"{where} is {value!r}, not a positive integer")
    assert isinstance(value, int)
    return value


def _attention(config: Mapping[str, Any], hidden_size: int, layers: int, multimodal: bool) -> dict[str, Any]:
    """The attention geometry: `num_key_value_heads` defaults to the heads and `head_dim` to
    hidden_size / heads, as transformers' configs do; raises _Unreadable naming the key."""
    heads = _required(config, "num_attention_heads", multimodal)
    kv_present = text_value(config, "num_key_value_heads")[0] is not None
    kv_heads = _required(config, "num_key_value_heads", multimodal) if kv_present else heads
    head_dim = _required(config, "head_dim", multimodal) if text_value(config, "head_dim")[0] is not None else None
    return {
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim if head_dim is not None else hidden_size // heads,
    }


def _sliding_window(config: Mapping[str, Any]) -> int | None:
    window = text_value(config, "sliding_window")[0]
    if not _positive(window):
        return None
    if text_value(config, "use_sliding_window")[0] is False:
        return None  # Qwen2-style configs carry a window they do not use
    assert isinstance(window, int)
    return window


def _layer_types(config: Mapping[str, Any], layers: int, window: int | None) -> tuple[str, ...]:
    raw = text_value(config, "layer_types")[0]
    if isinstance(raw, list) and len(raw) == layers and all(isinstance(t, str) for t in raw):
        return tuple(raw)
    # No per-layer list: a config with a window slides on every layer (Mistral-style), else full.
    return ((SLIDING_ATTENTION if window else FULL_ATTENTION),) * layers


def _dtype(config: Mapping[str, Any]) -> str | None:
    for key in ("torch_dtype", "dtype"):
        value = text_value(config, key)[0]
        if isinstance(value, str):
            return value.removeprefix("torch.")
    return None


def target_from_config(config: dict[str, Any], source: str, location: str) -> TargetDescription:
    """Read a target's config.json once (see `TargetDescription`). Raises SourceError naming the
    key when a pairing dimension is missing or not a positive integer."""
    multimodal = isinstance(config.get("text_config"), Mapping)
    try:
        values = {key: _required(config, key, multimodal) for key in ("num_hidden_layers", "hidden_size", "vocab_size")}
    except _Unreadable as exc:
        raise SourceError(f"target {location}: {exc}", "pass the target model's own config.json") from None
    layers = values["num_hidden_layers"]
    if layers > _MAX_LAYERS:
        raise SourceError(
            f"target {location}: num_hidden_layers is {layers}, more layers than any model has (at most {_MAX_LAYERS})",
            "pass the target model's own config.json",
        )
    try:
        attention: dict[str, Any] = _attention(config, values["hidden_size"], layers, multimodal)
        problem = None
    except _Unreadable as exc:
        attention, problem = {}, str(exc)
    window = _sliding_window(config)
    positions = text_value(config, "max_position_embeddings")[0]
    archs = config.get("architectures")
    # RoPE is a group of keys (rope_parameters, rope_theta): the text model's group first, whole.
    text = config.get("text_config")
    theta = rope_theta(text) if isinstance(text, dict) else None
    return TargetDescription(
        source=source,
        location=location,
        num_hidden_layers=layers,
        hidden_size=values["hidden_size"],
        vocab_size=values["vocab_size"],
        rope_theta=theta if theta is not None else rope_theta(config),
        architectures=[a for a in archs if isinstance(a, str)] if isinstance(archs, list) else [],
        multimodal=multimodal,
        layer_types=_layer_types(config, layers, window),
        sliding_window=window,
        dtype=_dtype(config),
        max_position_embeddings=positions if _positive(positions) else None,
        mla=text_value(config, "kv_lora_rank")[0] is not None,
        attention_problem=problem,
        **attention,
    )


def load_target(
    source: str, *, revision: str | None = None, token: str | None = None, timeout: float | None = None
) -> TargetDescription:
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
    desc: DraftDescription, target: TargetDescription, tensors: dict[str, TensorHeader] | None = None
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


def _layer_findings(desc: DraftDescription, target: TargetDescription) -> list[Finding]:
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


def _hidden_findings(
    desc: DraftDescription, target: TargetDescription, tensors: dict[str, TensorHeader]
) -> list[Finding]:
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


def _vocab_findings(
    desc: DraftDescription, target: TargetDescription, tensors: dict[str, TensorHeader]
) -> list[Finding]:
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
