"""Draft configs the engine views are tested on, shared by the default suite and the tiers.

Every bundled example (the nested demo drafts included), plus hand-made edge cases built from
them: each changes one thing an engine reads differently (a missing block size, missing layer
ids, keys at the top level instead of in `dflash_config`, the layout stated where an engine does
not look, DeepSpec's undeclared anchor-first layout, Domino's `shift_label`, the load-time rules
SGLang enforces). The tiers run SGLang's own parser from its released wheel on the same configs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dflash_tools import dialects
from dflash_tools.reading.local import examples_dir

Config = dict[str, Any]


def example_drafts() -> dict[str, Path]:
    """Every bundled draft folder (config.json and weights), by its `example:` name; the bundled
    target models are not drafts (no dialect detects them)."""
    root = examples_dir()
    return {
        str(path.parent.relative_to(root)): path.parent
        for path in sorted(root.rglob("config.json"))
        if any(path.parent.glob("*.safetensors")) and dialects.detect(json.loads(path.read_text())) is not None
    }


def example_config(name: str) -> Config:
    loaded: Config = json.loads((examples_dir() / name / "config.json").read_text())
    return loaded


def _edit(name: str, change: Callable[[Config], None]) -> Config:
    config = copy.deepcopy(example_config(name))
    change(config)
    return config


def _nested(config: Config) -> Config:
    inner: Config = config["dflash_config"]
    return inner


def _no_block_size(config: Config) -> None:
    config.pop("block_size")
    _nested(config).pop("block_size")


def _top_level_only(config: Config) -> None:
    # The older z-lab form: block_size, target_layer_ids and mask_token_id at the top level.
    inner = config.pop("dflash_config")
    config["target_layer_ids"] = inner["target_layer_ids"]
    config["mask_token_id"] = inner["mask_token_id"]


def _nested_only(config: Config) -> None:
    config.pop("block_size")


def _block_sizes_disagree(config: Config) -> None:
    config["block_size"] = 16


def _no_layer_ids(config: Config) -> None:
    _nested(config).pop("target_layer_ids")


def _empty_layer_ids_then_top_level(config: Config) -> None:
    config["target_layer_ids"] = _nested(config)["target_layer_ids"]
    _nested(config)["target_layer_ids"] = []


def _anchor_first_top_level_only(config: Config) -> None:
    _nested(config).pop("sample_from_anchor")
    config["sample_from_anchor"] = True
    config["block_size"] = _nested(config)["block_size"] = 7


def _shift_label(config: Config) -> None:
    _nested(config).pop("sample_from_anchor")
    _nested(config)["shift_label"] = True


def _domino(shift: bool) -> Callable[[Config], None]:
    def change(config: Config) -> None:
        _nested(config).pop("sample_from_anchor")
        _nested(config).update(
            projector_type="domino", shift_label=shift, pure_draft_prefix_len=1, gru_hidden_dim=32, emb_dim=32
        )

    return change


def _deepspec(config: Config) -> None:
    # DeepSpec's dflash_*_block7 drafts: Qwen3DSparkModel, markov_rank 0, no sample_from_anchor.
    config["markov_rank"] = 0
    for key in ("markov_head_type", "confidence_head_with_markov", "enable_confidence_head"):
        config.pop(key)


def _no_mask(config: Config) -> None:
    _nested(config).pop("mask_token_id")


def _set(path: str, value: Any) -> Callable[[Config], None]:
    def change(config: Config) -> None:
        node = config
        *parents, last = path.split(".")
        for part in parents:
            node = node[part]
        node[last] = value

    return change


def _drop_sfa(config: Config) -> None:
    config.pop("sample_from_anchor")


EDGE_CASES: dict[str, tuple[str, Callable[[Config], None]]] = {
    "no-block-size": ("zlab-dflash", _no_block_size),
    "top-level-keys": ("zlab-dflash", _top_level_only),
    "nested-keys-only": ("zlab-dflash", _nested_only),
    "block-sizes-disagree": ("zlab-dflash", _block_sizes_disagree),
    "no-layer-ids": ("zlab-dflash", _no_layer_ids),
    "null-layer-ids": ("zlab-dflash", _set("dflash_config.target_layer_ids", None)),
    "empty-layer-ids-then-top-level": ("zlab-dflash", _empty_layer_ids_then_top_level),
    "anchor-first-top-level-only": ("zlab-dflash", _anchor_first_top_level_only),
    "shift-label": ("zlab-dflash", _shift_label),
    "domino-anchor-first": ("zlab-dflash", _domino(True)),
    "domino-bonus": ("zlab-dflash", _domino(False)),
    "deepspec": ("dspark-native", _deepspec),
    "no-mask-token-id": ("zlab-dflash", _no_mask),
    "mask-token-ids-disagree": ("zlab-dflash", _set("mask_token_id", 499)),
    "negative-mask-token-id": ("zlab-dflash", _set("dflash_config.mask_token_id", -1)),
    "conv-unpaired": ("zlab-dflash2", _set("dflash_config.conv_group_size", 0)),
    "selector-unpaired": ("zlab-dflash2", _set("dflash_config.selector_top_k", 0)),
    "output-multiplier-zero": ("zlab-dflash2", _set("dflash_config.output_multiplier", 0.0)),
    "layer-id-out-of-range": ("zlab-dflash", _set("dflash_config.target_layer_ids", [1, 5])),
    "no-sliding-window": ("zlab-dflash", _set("sliding_window", None)),
    "speculators-dspark-no-sfa": ("speculators-dspark", _drop_sfa),
}


def edge_configs() -> dict[str, Config]:
    return {name: _edit(base, change) for name, (base, change) in EDGE_CASES.items()}


def write_config(folder: Path, config: Config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def case_folders(scratch: Path) -> dict[str, Path]:
    """Every example, every edge case and every convert output (normalize, `--to zlab`,
    `--to speculators`, `--for sglang`) of every example, as folders under `scratch`, by a name for messages."""
    from dflash_tools.convert import convert_checkpoint
    from dflash_tools.errors import OperationError

    folders = {f"example:{name}": path for name, path in example_drafts().items()}
    for name, config in edge_configs().items():
        folders[f"edge:{name}"] = write_config(scratch / "edge" / name, config)
    conversions: dict[str, dict[str, Any]] = {
        "normalize": {},
        "to-zlab": {"to": "zlab"},
        "to-speculators": {"to": "speculators"},
        "for-sglang": {"for_engines": ["sglang==0.5.23"]},
    }
    for name, path in example_drafts().items():
        for label, options in conversions.items():
            out = scratch / "converted" / label / name.replace("/", "-")
            try:
                convert_checkpoint(str(path), out, **options)
            except OperationError:
                continue  # a refused conversion writes nothing to check
            folders[f"convert:{label}:{name}"] = out
    return folders
