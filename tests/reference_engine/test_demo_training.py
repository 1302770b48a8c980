"""The demos' training loop (`dflash_tools_testing.demos.training`) computes what the reference
engine computes, and a tiny run of the recipe writes a bundle the engine runs.

The training forward passes are batched re-statements of the engine's (`reference_engine/target.py`
and `draft.py`, one block at a time there); a drift between the two would train drafts for an
arithmetic the engine does not run. Compared here on random weights, every algorithm and layout.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import dflash_tools_testing as testing
from dflash_tools_testing.demos import bundle as bundles
from dflash_tools_testing.demos import checkpoints, corpus
from dflash_tools_testing.demos.training import Recipe
from tests.torch_extra import require_torch_extra

torch = require_torch_extra()

from dflash_tools.reference_engine.draft import DraftModel  # noqa: E402
from dflash_tools.reference_engine.target import BuiltinTarget  # noqa: E402
from dflash_tools.reference_engine.weights import load_draft  # noqa: E402
from dflash_tools_testing.demos import training  # noqa: E402

TINY = Recipe(
    corpus_problems=40, target_steps=3, target_batch=2, target_window=96,
    draft_steps=2, draft_batch=2, draft_window=96, draft_pool=3, anchors_per_window=2,
)  # fmt: skip
LAYOUTS = [(algorithm, sfa) for algorithm in ("dflash", "dflash2") for sfa in (False, True)]


def random_tensors(table: list[testing.TensorSpec], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, _, shape in table:
        if name.endswith("norm.weight"):
            out[name] = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith("base_kernel"):
            out[name] = 0.5 * rng.standard_normal(shape)
        else:
            out[name] = rng.standard_normal(shape) / np.sqrt(shape[-1]) * (4.0 if "codebook" in name else 1.0)
    return out


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """A random float32 target of the engine demo's shape, written and as stored."""
    bundle = bundles.ENGINE_DEMO
    tensors = random_tensors(bundles.expected_tables(bundle)["target"], seed=3)
    folder = tmp_path_factory.mktemp("target") / "target"
    config = bundle.target_config()
    config["dtype"] = "float32"
    checkpoints.write_target(folder, bundle.shape, tensors, config, dtype="F32")
    return folder, training.round_like_stored(tensors, "F32")


def ids_of(text: str) -> torch.Tensor:
    return torch.tensor(training.encode_text(text, bundles.ENGINE_DEMO.shape), dtype=torch.long)


def test_target_forward_is_the_builtin_targets(target: tuple[Path, dict[str, np.ndarray]]) -> None:
    folder, stored = target
    shape = bundles.ENGINE_DEMO.shape
    ids = ids_of(corpus.PROMPTS[0])
    engine = BuiltinTarget(folder, device=torch.device("cpu"), dtype=torch.float32)
    logits, captured = engine.forward(ids.tolist(), (2, 3, 4))
    params = {name: torch.tensor(value, dtype=torch.float32) for name, value in stored.items()}
    ours, ours_captured = training.target_forward(params, shape, ids[None], (2, 3, 4))
    assert ours_captured is not None and captured is not None
    torch.testing.assert_close(ours[0], logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours_captured[0], captured, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("algorithm", "sfa"), LAYOUTS)
def test_draft_rows_are_the_engines_block_rows(
    target: tuple[Path, dict[str, np.ndarray]], tmp_path: Path, algorithm: str, sfa: bool
) -> None:
    folder, stored = target
    bundle = bundles.ENGINE_DEMO
    entry = bundles.DraftEntry("zlab-dflash2" if algorithm == "dflash2" else "zlab-dflash", algorithm, sfa)
    dspec = replace(bundle.draft_spec(entry), dtype="F32")
    tensors = random_tensors(testing.tensor_table(dspec), seed=5)
    draft_folder = checkpoints.write_draft(tmp_path / "draft", entry.dialect, dspec, tensors)
    engine_target = BuiltinTarget(folder, device=torch.device("cpu"), dtype=torch.float32)
    checkpoint = load_draft(str(draft_folder))
    draft = DraftModel(
        checkpoint.description,
        checkpoint.tensors,
        target_embeddings=engine_target.embedding_weight(),
        target_lm_head=engine_target.lm_head_weight(),
        device=torch.device("cpu"),
        dtype=torch.float32,
    )
    ids = ids_of(corpus.PROMPTS[1])
    _, captured = engine_target.forward(ids.tolist(), (2, 3))
    assert captured is not None
    k = dspec.k_max
    params = {name: torch.tensor(value, dtype=torch.float32) for name, value in tensors.items()}
    embeddings = torch.tensor(stored["model.embed_tokens.weight"], dtype=torch.float32)
    anchors = [40, 77, 101]
    ours = training.draft_rows(params, dspec, embeddings, captured[None], ids[None], torch.tensor([anchors]))
    for index, anchor in enumerate(anchors):
        state = draft.new_state()
        draft.append_context(state, captured[:anchor], torch.arange(anchor))
        hidden = draft.block_hidden(state, int(ids[anchor]), anchor, k if sfa else k + 1)
        first = 0 if sfa else 1
        torch.testing.assert_close(ours[0, index], hidden[first : first + k], rtol=1e-4, atol=1e-4)


def test_a_tiny_run_of_the_recipe_writes_a_bundle_the_engine_runs(tmp_path: Path) -> None:
    bundle = replace(bundles.ENGINE_DEMO, recipe=TINY)
    manifest = bundles.write_bundle(bundle, tmp_path / "demo", measure=False)
    root = tmp_path / "demo"
    assert manifest["files"] == bundles.file_hashes(root)
    assert manifest["training"]["target"]["steps"] == TINY.target_steps
    for name, entry in bundle.drafts.items():
        assert (root / name / "config.json").read_bytes() == (bundle.folder / name / "config.json").read_bytes()
        assert np.isfinite(manifest["training"][name]["final_loss"])
        result = bundles.run_engine(
            root / "target", root / name, entry.algorithm, entry.sample_from_anchor, [[65, 32]], 6
        )
        assert result["num_drafts"] > 0
