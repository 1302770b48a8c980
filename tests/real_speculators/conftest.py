"""The speculators 0.9.0 conformance tier: fixtures shared by its tests.

Runs only in the tier's environment (`.ci/tier-speculators.sh` builds it): without speculators
installed nothing here is collected, and the default run deselects the `real_speculators` marker.
Everything is real: speculators' own config and model classes, our inspect / convert / engine, and
checkpoints written to a temporary folder. speculators reads the verifier's embeddings, head and
final norm from a real local target folder, never from the Hub.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dflash_tools import testing

if importlib.util.find_spec("speculators") is None:
    collect_ignore_glob = ["test_*.py"]

# speculators resolves verifier configs through huggingface_hub: keep it off the network.
os.environ["HF_HUB_OFFLINE"] = "1"

EXAMPLES = Path(testing.__file__).parent / "examples"
# The bundled examples in speculators' own format, and those `convert --to speculators` accepts.
SPECULATORS_EXAMPLES = ("speculators-dflash", "speculators-dflash-legacy", "speculators-dflash2", "speculators-dspark")
CONVERTIBLE_EXAMPLES = (*SPECULATORS_EXAMPLES, "zlab-dflash", "zlab-dflash2", "zlab-dflash2-anchor-first")
# (algorithm, sample_from_anchor) for the forward comparisons: both layouts of DFlash and DFlash2.
LAYOUTS = [("dflash", False), ("dflash", True), ("dflash2", False), ("dflash2", True)]


def random_draft_spec(algorithm: str, sample_from_anchor: bool, **changes: Any) -> testing.DraftSpec:
    """A small float32 draft paired with the engine demo target (hidden 64, vocabulary 64)."""
    from dflash_tools.engine import demo

    spec = replace(demo.draft_spec(algorithm, sample_from_anchor=sample_from_anchor), dtype="F32")
    # Fewer selector candidates than the vocabulary, so the selector really chooses.
    return replace(spec, selector_top_k=4, selector_rank=8, **changes)


def write_random_draft(folder: Path, dialect: str, spec: testing.DraftSpec, seed: int = 7) -> Path:
    """Every tensor of `spec` with random float32 values large enough that rows and tokens differ."""
    rng = np.random.default_rng(seed)
    data: dict[str, bytes] = {}
    for name, _, shape in testing.tensor_table(spec):
        if name.endswith("norm.weight"):
            value = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith("base_kernel"):
            value = 0.5 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) / np.sqrt(shape[-1])
            if "codebook" in name:
                value = value * 4.0
        data[name] = np.ascontiguousarray(value, dtype="<f4").tobytes()
    return testing.write_checkpoint(folder, dialect, spec, data=data)


@pytest.fixture(scope="session")
def target_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dflash_tools.engine import demo

    return demo.write_target(tmp_path_factory.mktemp("target") / "target", noise=0.6, dtype="F32")
