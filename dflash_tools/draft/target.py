"""The target model: its one normalized description (`TargetDescription`, read from config.json only)
and the pairing of a draft with it (docs/rules.md, "Pairing with the target").

`inspect --target`, `plan` (its memory, parallelism and token-budget checks), `convert --target`
and `smoke-test` all read the target through `load_target` / `target_from_config`: one reading,
one rule for a multimodal target's `text_config` (`text_value`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from dflash_tools.documents import JsonDocument
from dflash_tools.draft.description import DraftDescription
from dflash_tools.draft.model_limits import over_limit
from dflash_tools.errors import SourceError, UsageError
from dflash_tools.findings import Finding, brief_list, make_finding
from dflash_tools.reading.checkpoint import (
    MAX_JSON_VALUES,
    LoadedCheckpoint,
    optional_seconds,
    optional_text,
    path_exists,
    read_small_file,
    source_text,
)
from dflash_tools.reading.json_hazards import loads_bounded
from dflash_tools.reading.safetensors_header import TensorHeader
from dflash_tools.reading.source import looks_like_repo_id

# A RoPE scaling factor above this is no real model's (they scale 4x to 64x): not read.
MAX_ROPE_FACTOR = 1_000_000

# Layer kinds of `layer_types` whose KV the serving plan counts (others keep a fixed state).
FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"


@dataclass(frozen=True)
class TargetDescription(JsonDocument):
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
    # The longest max_model_len an engine starts with (`longest_context`), None when unknown.
    longest_context: int | None = None
    mla: bool = False  # multi-head latent attention (`kv_lora_rank`): no KV heads to split
    # Why the attention geometry (or the length) cannot be read ("text_config.num_attention_heads
    # is None, ..."): pairing does not need it, a serving plan does (`require_attention`).
    attention_problem: str | None = None

    # The pairing fields (JSON `target`); the attention geometry is a plan's (`AttentionDims`).
    json_keys: ClassVar[tuple[str, ...]] = (
        "source",
        "location",
        "num_hidden_layers",
        "hidden_size",
        "vocab_size",
        "rope_theta",
        "architectures",
        "multimodal",
    )

    def require_attention(self) -> None:
        """Raise SourceError naming the key when the attention geometry could not be read."""
        if self.attention_problem is not None:
            raise SourceError(
                f"target {self.location}: {self.attention_problem}", "pass the target model's own config.json"
            )


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
        raise _Unreadable(f"{where} is {_shown(value)}, not a positive integer")
    beyond = over_limit(key, value)
    if beyond is not None:
        # Layers are counted one by one and sizes multiplied into bytes: a count no model has
        # would take minutes and gigabytes (`model_limits`).
        raise _Unreadable(f"{where} is {beyond}")
    assert isinstance(value, int)
    return value


def _shown(value: Any) -> str:
    """A config value in a message, short whatever it holds (a list of a million, 5,000 digits)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


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
    if not _positive(window) or over_limit("sliding_window", window):
        return None
    if text_value(config, "use_sliding_window")[0] is False:
        return None  # Qwen2-style configs carry a window they do not use
    assert isinstance(window, int)
    return window


def _layer_types(config: Mapping[str, Any], layers: int, window: int | None) -> tuple[str, ...]:
    raw = text_value(config, "layer_types")[0]
    # Entries that are lists or objects are no layer kind: the list is not used (`layers` is capped).
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


def longest_context(config: Mapping[str, Any], positions: int | None) -> int | None:
    """The longest context an engine starts the target with, read generously: max_position_embeddings,
    times a RoPE scaling `factor` above 1, or `model_max_length` when that is larger.

    Both engines refuse a longer max_model_len at start-up unless an environment variable allows
    it: vLLM derives the length from the config and scales it by the RoPE factor for most RoPE
    types (`_get_and_verify_max_len` in vllm/config/model.py), SGLang by the factor unless the
    scaling names its original length (`get_context_length` in
    sglang/srt/utils/hf_transformers/common.py). The larger reading is taken, so a plan never
    flags a length one of them accepts.
    """
    if positions is None:
        return None
    longest = positions
    for scope in (config.get("text_config"), config):
        if not isinstance(scope, Mapping):
            continue
        for key in ("rope_parameters", "rope_scaling"):
            params = scope.get(key)
            factor = params.get("factor") if isinstance(params, Mapping) else None
            if isinstance(factor, int | float) and not isinstance(factor, bool) and 1 < factor <= MAX_ROPE_FACTOR:
                longest = max(longest, math.floor(positions * factor))
        declared = scope.get("model_max_length")
        if isinstance(declared, int) and _positive(declared) and not over_limit("max_position_embeddings", declared):
            longest = max(longest, declared)
    return longest


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
    positions, positions_where = text_value(config, "max_position_embeddings")
    if _positive(positions) and over_limit("max_position_embeddings", positions):
        problem = problem or f"{positions_where} is {over_limit('max_position_embeddings', positions)}"
        positions = None
    elif not _positive(positions):
        positions = None
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
        max_position_embeddings=positions,
        longest_context=longest_context(config, positions),
        mla=text_value(config, "kv_lora_rank")[0] is not None,
        attention_problem=problem,
        **attention,
    )


def target_config(loaded: LoadedCheckpoint, source: str) -> dict[str, Any]:
    """The config of a target read as a checkpoint (`plan` reads its headers too), or SourceError
    naming what is wrong with it, as `inspect --target` does: the file's own problem (not valid
    JSON, a folder, larger than 64 MiB, missing), not "no readable config.json"."""
    if loaded.config is not None:
        return loaded.config
    problem = next((f.message for f in loaded.findings if f.code == "DFT001"), "config.json cannot be read")
    raise SourceError(
        f"target {source}: {problem} ({loaded.location})", "pass the target model's folder or Hub repo id"
    )


def target_argument(
    target: Any, *, revision: str | None = None, token: str | None = None, timeout: float | None = None
) -> TargetDescription | None:
    """The `target=` of the Python API's entry points: None, a description already read, or a
    SOURCE (str or `os.PathLike`) to read with `load_target`; anything else is a UsageError."""
    if target is None or isinstance(target, TargetDescription):
        return target
    if isinstance(target, str | os.PathLike):
        return load_target(target, revision=revision, token=token, timeout=timeout)
    raise UsageError(
        f"target is {target!r:.60} ({type(target).__name__}), not a path, a name or a TargetDescription",
        "pass target='org/model', a folder (str or pathlib.Path), or leave it out",
    )


def load_target(
    source: str | os.PathLike[str],
    *,
    revision: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
) -> TargetDescription:
    """Read a target's config.json from a folder, a file, a bundled example or the Hub."""
    source = source_text(source, "target")
    revision, token = optional_text(revision, "target_revision"), optional_text(token, "token")
    timeout = optional_seconds(timeout, "timeout")
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
            # Bounded as every config (size, values, nesting): 64 MiB of `[[],...]` would take gigabytes.
            config = loads_bounded(read_small_file(file), max_values=MAX_JSON_VALUES)
        except (OSError, ValueError) as exc:  # JsonRefused is a ValueError
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


def check_own_layer_count(desc: DraftDescription) -> list[Finding]:
    """Without a target: the layer ids against the draft config's own `num_target_layers`, the
    depth of the target it says it was trained for (a z-lab config states it). With a target,
    `check_target` compares both with the target's real depth instead."""
    layers = desc.num_target_layers
    if layers is None:
        return []
    beyond = [i for i in desc.target_layer_ids if i >= layers]
    if not beyond:
        return []
    key = desc.target_layer_ids_key
    return [
        make_finding(
            "DFT030",
            f"{key} (z-lab convention {brief_list(desc.target_layer_ids)}) has ids {brief_list(beyond)} beyond the "
            f"{layers} layers of the config's own num_target_layers",
            "fix the ids or num_target_layers (pass --target to check both against the target model)",
            keys=(key, "num_target_layers"),
            values={"target_layer_ids": desc.target_layer_ids, "num_target_layers": layers},
        )
    ]


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
