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

import dflash_tools
import dflash_tools_testing as testing

if importlib.util.find_spec("speculators") is None:
    collect_ignore_glob = ["test_*.py"]

# speculators resolves verifier configs through huggingface_hub: keep it off the network.
os.environ["HF_HUB_OFFLINE"] = "1"

EXAMPLES = Path(dflash_tools.__file__).parent / "examples"
# The bundled examples in speculators' own format, and those `convert --to speculators` accepts.
SPECULATORS_EXAMPLES = ("speculators-dflash", "speculators-dflash-legacy", "speculators-dflash2", "speculators-dspark")
CONVERTIBLE_EXAMPLES = (*SPECULATORS_EXAMPLES, "zlab-dflash", "zlab-dflash2", "zlab-dflash2-anchor-first")
# (algorithm, sample_from_anchor) for the forward comparisons: both layouts of DFlash and DFlash2.
LAYOUTS = [("dflash", False), ("dflash", True), ("dflash2", False), ("dflash2", True)]


def random_draft_spec(algorithm: str, sample_from_anchor: bool, **changes: Any) -> testing.DraftSpec:
    """A small float32 draft paired with the engine demo target (hidden 64, vocabulary 128)."""
    from dflash_tools_testing.demos import engine_demo as demo

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
    from dflash_tools_testing.demos import engine_demo as demo

    return demo.write_target(tmp_path_factory.mktemp("target") / "target", noise=0.6, dtype="F32")


def speculators_model(folder: Path, *, attention: str = "eager") -> Any:
    """speculators' own draft model, loaded by its own `from_pretrained` in float32.

    `eager` attention: the default flex path compiles its mask builder (torch.compile), which
    this CPU tier does not need; the eager path applies the same mask numerically.
    """
    import torch
    from speculators import SpeculatorModel, SpeculatorModelConfig

    config = SpeculatorModelConfig.from_pretrained(str(folder))
    config.transformer_layer_config._attn_implementation = attention
    return SpeculatorModel.from_pretrained(str(folder), config=config, dtype=torch.float32).eval()


def engine_model(folder: Path, target: Path) -> tuple[Any, Any]:
    """Our reference engine's draft (float32) and the target it drafts for."""
    import torch

    from dflash_tools.reference_engine.draft import DraftModel
    from dflash_tools.reference_engine.target import BuiltinTarget
    from dflash_tools.reference_engine.weights import load_draft

    checkpoint = load_draft(str(folder))
    built = BuiltinTarget(target, device=torch.device("cpu"), dtype=torch.float32)
    model = DraftModel(
        checkpoint.description,
        checkpoint.tensors,
        target_embeddings=built.embedding_weight(),
        target_lm_head=built.lm_head_weight(),
        device=torch.device("cpu"),
        dtype=torch.float32,
    )
    return model, built


def prompt_ids(length: int) -> list[int]:
    return [(7 * i + 3) % 60 + 2 for i in range(length)]


def both_blocks(spec_model: Any, engine: Any, target: Any, context_length: int) -> tuple[Any, Any, list[int], Any]:
    """Final-norm hidden rows [block_size, H] of one block anchored at position P = context_length,
    with the token ids and the captured target states they came from.

    speculators: its training forward (`_backbone_forward`) with exactly one valid anchor, P (the
    loss mask selects it; the sequence runs a block past P so the anchor is eligible). Engine: the
    context 0 .. P - 1 appended from the same captured target states, then one block at P.
    """
    import torch

    block = spec_model.block_size
    ids = prompt_ids(context_length + block + 1)
    target.reset()  # the target keeps a KV cache between calls
    _, captured = target.forward(ids, [t + 1 for t in engine.desc.target_layer_ids])
    total = len(ids)
    loss_mask = torch.zeros(1, total)
    loss_mask[0, context_length] = 1
    with torch.no_grad():
        theirs, *_ = spec_model._backbone_forward(
            captured[None].to(torch.float32),
            torch.tensor([ids]),
            loss_mask,
            torch.zeros(1, total, engine.hidden_size),
            torch.zeros(1, total, dtype=torch.long),
            max_anchors=1,
        )
    state = engine.new_state()
    engine.append_context(state, captured[:context_length], torch.arange(context_length))
    ours = engine.block_hidden(state, anchor=ids[context_length], position=context_length, num_query_tokens=block)
    return theirs[0], ours, ids, captured


def assert_logits_close(ours: Any, theirs: Any) -> None:
    """Logits agree within 1e-5 of the largest logit's magnitude, element by element.

    Why scaled, when hidden rows use a flat 1e-5: each logit is a dot product over the hidden
    size, and float32 rounding in it grows with the logits' scale, not with the one element.
    How BLAS splits that sum depends on the core count: on a 2-core CI machine one logit of
    magnitude 0.06 differed by 1.4e-5 while the row's largest was ~15 (a flat 1e-5 failed).
    A real disagreement (a wrong mask, a missing norm) moves logits by more than 1e-3, well
    past 1e-5 * 15; the drafted argmax is compared exactly besides.
    """
    import torch

    scale = float(theirs.abs().max())
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5 * max(scale, 1.0))
