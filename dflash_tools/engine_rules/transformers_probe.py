"""Asks a transformers what its config classes do with a draft config: run where that
transformers is importable, in a process of its own.

Two questions, each a function and a command of `python -m dflash_tools.engine_rules.transformers_probe`
(a JSON request on stdin, a JSON answer on stdout):

- `table`: for the model_types drafts declare, what the config class of each fills into a config
  that leaves a key out (`describe_class`), and every model_type `AutoConfig` knows. The
  generator (`generate_defaults`) writes that into `engine_rules/generated/` for the transformers
  version an engine release pins, so that `inspect --engine` answers without transformers.
- `read` (`read-many`: several, by name): `AutoConfig.from_pretrained` on one config (written to a temporary folder, as an engine
  loads it from the draft's folder): the class it picks and the values of `FILL_KEYS` the config
  leaves out, or the error it raises. `inspect --engine` asks this of an installed transformers
  that an engine release would run with but that has no generated table, and the tiers compare
  it with the table's prediction on every corpus config.

A process of its own because importing transformers' config code imports torch (through
`transformers.generation`), which `inspect` never does in its own process (docs/architecture.md).
Only the standard library here: transformers is imported inside the functions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# The keys of a draft config that change what the draft computes, as vLLM's
# `vllm/model_executor/models/qwen3_dflash.py` (DFlashQwen3DecoderLayer, _resolve_layer_attention)
# and SGLang's `sglang/srt/models/dflash.py` read them from the loaded config object.
FILL_KEYS = (
    "layer_types",
    "sliding_window",
    "head_dim",
    "num_key_value_heads",
    "rope_parameters",
    "attention_bias",
    "tie_word_embeddings",
    "hidden_act",
    "rms_norm_eps",
)

# Keys a config class may compute a filled value from, and a value to try for each (besides
# num_hidden_layers, hidden_size and num_attention_heads, which every probe varies). A key whose
# value changes a fill is recorded as one of that fill's `inputs`, with the class's own value.
INPUT_TRIALS: dict[str, Any] = {
    "use_sliding_window": True,
    "sliding_window": 96,
    "max_window_layers": 1,
    "sliding_window_pattern": 2,
    "rope_theta": 123456.0,
    "partial_rotary_factor": 0.375,
    "layer_types": "every-layer-sliding",  # a list as long as the probe's layers
    "head_dim": 48,
}

# Legacy top-level RoPE keys a config class may copy into rope_parameters.
MERGED_ROPE_KEYS = ("partial_rotary_factor",)

# The (hidden_size, num_attention_heads, num_hidden_layers) of the probes: the quotient differs
# between them (64, 192), so a computed head_dim is told from a constant one.
PROBE_SHAPES = ((1024, 16, 1), (768, 4, 2), (1024, 16, 3), (768, 4, 5), (1024, 16, 8), (768, 4, 12), (1024, 16, 40))

_ABSENT = "<absent>"


def stated(config: dict[str, Any], key: str) -> bool:
    """Whether the config states `key` itself (RoPE: in either spelling transformers reads)."""
    if key == "rope_parameters":
        return "rope_parameters" in config or "rope_scaling" in config
    return key in config


def _plain(value: Any) -> Any:
    """A JSON value (tuples as lists, mappings as dicts)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def _get(instance: Any, key: str) -> Any:
    """The attribute, or a marker where the class will not give one (a per-layer attribute of a
    heterogeneous config raises on global access): never a tabulated value."""
    try:
        return getattr(instance, key, _ABSENT)
    except Exception as error:  # any refusal is the marker
        return f"<unreadable: {type(error).__name__}>"


def _filled(instance: Any, key: str) -> Any:
    value = _get(instance, key)
    if key == "rope_parameters" and isinstance(value, dict):
        # The file's (or the class's) rope_theta sits in the same dict; kept apart (`theta`).
        value = {k: v for k, v in value.items() if k != "rope_theta"}
    return _plain(value)


def _theta(instance: Any) -> Any:
    rope = _get(instance, "rope_parameters")
    return _plain(rope.get("rope_theta")) if isinstance(rope, dict) else None


def _build(cls: Any, config: dict[str, Any]) -> Any:
    return cls.from_dict(dict(config))


def _probe(shape: tuple[int, int, int], **extra: Any) -> dict[str, Any]:
    hidden, heads, layers = shape
    probe: dict[str, Any] = {"hidden_size": hidden, "num_attention_heads": heads, "num_hidden_layers": layers}
    for key, value in extra.items():
        probe[key] = ["sliding_attention"] * layers if value == "every-layer-sliding" else value
    return probe


def _period(lists: list[tuple[int, Any]]) -> list[Any] | None:
    """The shortest pattern every list (of its probe's layer count) repeats, if any."""
    if not all(isinstance(value, list) and len(value) == layers for layers, value in lists):
        return None
    longest = max((value for _, value in lists), key=len)
    for size in range(1, len(longest) + 1):
        pattern = longest[:size]
        if all(value == [pattern[i % size] for i in range(layers)] for layers, value in lists):
            return pattern
    return None


def _rule(key: str, base: list[tuple[tuple[int, int, int], Any]]) -> dict[str, Any]:
    """How the class fills `key` across the base probes (`base`: shape, built instance)."""
    values = [(shape, _filled(instance, key)) for shape, instance in base]
    first = values[0][1]
    if any(isinstance(value, str) and value.startswith("<unreadable") for _, value in values):
        rule: dict[str, Any] = {"computed": True}
    elif all(value == _ABSENT for _, value in values):
        rule = {"absent": True}
    elif all(value == first for _, value in values):
        rule = {"value": first}
    elif key == "layer_types" and (pattern := _period([(shape[2], value) for shape, value in values])) is not None:
        rule = {"period": pattern}
    elif all(value == shape[0] // shape[1] for shape, value in values):
        rule = {"derived": "hidden_size // num_attention_heads"}
    elif all(value == shape[1] for shape, value in values):
        rule = {"derived": "num_attention_heads"}
    else:
        rule = {"computed": True}
    if key == "rope_parameters":
        thetas = {json.dumps(_theta(instance)) for _, instance in base}
        rule["theta"] = _theta(base[0][1]) if len(thetas) == 1 else None
    return rule


def _lands(base: list[tuple[Any, Any]], changed: list[tuple[Any, Any]], name: str) -> bool:
    """Whether the trial value of `name` lands in rope_parameters as it is, changing nothing else."""
    before = [_filled(a, "rope_parameters") for _, a in base]
    after = [_filled(b, "rope_parameters") for _, b in changed]
    if not all(isinstance(x, dict) for x in [*before, *after]):
        return False
    rest = [{k: v for k, v in d.items() if k != name} for d in after]
    trimmed = [{k: v for k, v in d.items() if k != name} for d in before]
    return rest == trimmed and all(d.get(name) == INPUT_TRIALS[name] for d in after)


def describe_class(model_type: str) -> dict[str, Any]:
    """What the config class of `model_type` fills into a config that leaves out each of `FILL_KEYS`.

    Each fill is `{"value": v}` (the same whatever else the config says), `{"period": [...]}`
    (layer_types: the pattern repeated over num_hidden_layers), `{"derived": "hidden_size //
    num_attention_heads"}` or `{"derived": "num_attention_heads"}`, or `{"computed": true}` (none
    of those: not tabulated). `inputs` names, per fill, the keys whose value changes it and the
    class's own value of each (`"<absent>"`: the class has none): the fill holds for a config that
    states none of them or states the class's value. The RoPE fill's `theta` is the class's
    rope_theta, used when the config states none.
    """
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    entry: dict[str, Any] = {"class": cls.__name__, "module": cls.__module__}
    try:
        base = [(shape, _build(cls, _probe(shape))) for shape in PROBE_SHAPES]
    except Exception as error:
        entry["error"] = f"{type(error).__name__}: {error}"[:300]
        return entry
    bare = cls()
    trials: dict[str, list[tuple[tuple[int, int, int], Any]]] = {}
    for name, trial in INPUT_TRIALS.items():
        try:
            trials[name] = [(shape, _build(cls, _probe(shape, **{name: trial}))) for shape in PROBE_SHAPES]
        except Exception:
            continue
    fills: dict[str, Any] = {}
    inputs: dict[str, dict[str, Any]] = {}
    for key in FILL_KEYS:
        fills[key] = _rule(key, base)
        for name, changed in trials.items():
            if name == key:
                continue
            differs = [_filled(a, key) for _, a in base] != [_filled(b, key) for _, b in changed]
            # A file's own rope_theta lands in the filled dict (transformers' legacy key): recorded
            # as such, not as an input that makes the fill unknown.
            takes_theta = all(_theta(b) == INPUT_TRIALS[name] for _, b in changed)
            if key == "rope_parameters" and name == "rope_theta" and not differs and takes_theta:
                fills[key]["theta_from"] = name
                continue
            # Likewise a legacy top-level RoPE key that lands in the dict as it is.
            if key == "rope_parameters" and name in MERGED_ROPE_KEYS and _lands(base, changed, name):
                fills[key].setdefault("merges", []).append(name)
                continue
            if key == "rope_parameters":
                differs = differs or [_theta(a) for _, a in base] != [_theta(b) for _, b in changed]
            if differs:
                inputs.setdefault(key, {})[name] = _plain(_get(bare, name))
    entry["fills"] = fills
    if inputs:
        entry["inputs"] = inputs
    return entry


def table(model_types: list[str]) -> dict[str, Any]:
    """The generated table of the transformers importable here."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    known = dict(sorted(CONFIG_MAPPING_NAMES.items()))
    classes = {model_type: describe_class(model_type) for model_type in model_types if model_type in known}
    return {"transformers": transformers.__version__, "model_types": known, "classes": classes}


def read(config: dict[str, Any]) -> dict[str, Any]:
    """`AutoConfig.from_pretrained` on the config, from a folder as an engine loads it."""
    import transformers
    from transformers import AutoConfig

    answer: dict[str, Any] = {"transformers": transformers.__version__}
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(config), encoding="utf-8")
        try:
            loaded = AutoConfig.from_pretrained(folder, trust_remote_code=False)
        except Exception as error:
            message = str(error).replace(folder, "DRAFT")
            answer["error"] = f"{type(error).__name__}: {message}"
            return answer
    answer["model_type"] = loaded.model_type
    answer["class"] = type(loaded).__name__
    answer["module"] = type(loaded).__module__
    values = {key: _filled(loaded, key) for key in FILL_KEYS if not stated(config, key)}
    unreadable = [key for key, value in values.items() if isinstance(value, str) and value.startswith("<unreadable")]
    answer["filled"] = {key: value for key, value in values.items() if value != _ABSENT and key not in unreadable}
    answer["unreadable"] = unreadable
    if "rope_parameters" in answer["filled"]:
        answer["theta"] = _theta(loaded)
    return answer


def ask(command: str, request: dict[str, Any], path: Path | None = None, timeout: float = 600) -> dict[str, Any]:
    """`command` ("table" or "read") answered by a fresh interpreter (`path`, a folder holding an
    unpacked transformers, first on its sys.path; None: the transformers installed here).
    Raises RuntimeError when it fails, subprocess.TimeoutExpired when it takes longer."""
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-m", "dflash_tools.engine_rules.transformers_probe", command],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"transformers_probe {command} failed:\n{done.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    request = json.load(sys.stdin)
    if args == ["table"]:
        answer = table(list(request["model_types"]))
    elif args == ["read"]:
        answer = read(request["config"])
    elif args == ["read-many"]:
        answer = {name: read(config) for name, config in request["configs"].items()}
    else:
        print(
            "usage: python -m dflash_tools.engine_rules.transformers_probe table|read|read-many < request.json",
            file=sys.stderr,
        )
        return 2
    json.dump(answer, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
