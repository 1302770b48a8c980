"""Draft checkpoints into torch tensors: any supported dialect, local, bundled or on the Hub.

The description (dialect, algorithm, dimensions, layer ids in the z-lab convention) comes from the
same readers `inspect` uses, after applying the request's `draft_config_overrides`, so the engine
runs exactly what `inspect` describes.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dflash_tools.draft.config_paths import set_path
from dflash_tools.draft.description import DraftDescription
from dflash_tools.draft.geometry import Geometry, resolve_geometry
from dflash_tools.errors import OperationError, SourceError
from dflash_tools.findings import Severity
from dflash_tools.inspect import describe
from dflash_tools.reading.checkpoint import LoadedCheckpoint
from dflash_tools.reading.source import load_checkpoint


@dataclass
class DraftCheckpoint:
    source: str
    folder: Path
    description: DraftDescription
    geometry: Geometry | None
    tensors: dict[str, torch.Tensor]


def apply_overrides(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A copy of `config` with dotted keys (`dflash_config.sample_from_anchor`) set."""
    out = copy.deepcopy(config)
    for dotted, value in overrides.items():
        set_path(out, dotted, value)
    return out


def checkpoint_folder(loaded: LoadedCheckpoint, revision: str | None) -> Path:
    """The local folder that holds the weights, downloading Hub repos into the Hugging Face cache."""
    if loaded.kind != "hub":
        if loaded.local_dir is None:
            raise SourceError(f"{loaded.source}: no local folder for the weights", "pass the checkpoint folder")
        return loaded.local_dir
    from huggingface_hub import snapshot_download

    print(f"downloading {loaded.source} ...", file=sys.stderr)
    path = snapshot_download(
        loaded.source.removeprefix("hf://"), revision=revision, allow_patterns=["*.json", "*.safetensors"]
    )
    return Path(path)


def read_tensors(folder: Path, loaded: LoadedCheckpoint) -> dict[str, torch.Tensor]:
    """Every tensor of every shard the header reader found, on the CPU in its stored dtype."""
    from safetensors.torch import load_file

    files = sorted({shard.file for shard in loaded.shards}) or sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        raise OperationError(f"{folder}: no *.safetensors weights", "download the draft's weights")
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        tensors.update(load_file(str(folder / name), device="cpu"))
    return tensors


def load_draft(source: str, *, revision: str | None = None, overrides: dict[str, Any] | None = None) -> DraftCheckpoint:
    """Config -> description (errors refused with the finding's message) -> weights."""
    loaded = load_checkpoint(source, revision=revision)
    broken = [f for f in loaded.findings if f.severity is Severity.ERROR]
    if loaded.config is None or broken:
        first = broken[0].message if broken else "config.json unreadable"
        raise OperationError(f"draft {source}: {first}", f"run `dflash-tools inspect {source}`")
    config = apply_overrides(loaded.config, overrides or {})
    desc, findings = describe(config)
    if desc is None:
        raise OperationError(f"draft {source}: {findings[0].message if findings else 'unknown dialect'}", "")
    geometry, _ = resolve_geometry(desc)
    folder = checkpoint_folder(loaded, revision)
    return DraftCheckpoint(source, folder, desc, geometry, read_tensors(folder, loaded))
