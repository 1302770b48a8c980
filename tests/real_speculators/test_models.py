"""speculators' draft model classes load our tensors, save checkpoints we read back, and compute
the same block as our reference engine.

Tolerance: float32 on CPU, the hidden rows and logits of speculators' forward and the engine's
agree within |ours - theirs| <= 1e-5 + 1e-5 * |theirs| for hidden rows, and within 1e-5 of the
largest logit for logits (`assert_logits_close` says why; measured: at most 1.4e-5 on logits of
magnitude ~10-20). The argmax drafts and the DFlash2 selector walk are compared exactly.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from speculators import SpeculatorModel, SpeculatorModelConfig

from dflash_tools.convert import convert_checkpoint
from dflash_tools.inspect import inspect_checkpoint
from tests.real_speculators.conftest import (
    CONVERTIBLE_EXAMPLES,
    EXAMPLES,
    LAYOUTS,
    assert_logits_close,
    both_blocks,
    engine_model,
    random_draft_spec,
    speculators_model,
    write_random_draft,
)

pytestmark = pytest.mark.real_speculators

ATOL, RTOL = 1e-5, 1e-5


def speculators_folder(name: str, tmp_path: Path) -> Path:
    """The example itself when it is in speculators' format, else its `convert --to speculators` output."""
    if name.startswith("speculators-"):
        return EXAMPLES / name
    out = tmp_path / name
    convert_checkpoint(str(EXAMPLES / name), out, to="speculators")
    return out


def bare_model(folder: Path) -> Any:
    """speculators' model class for the folder's config, built without a verifier to read."""
    config = SpeculatorModelConfig.from_pretrained(str(folder))
    config.speculators_config.verifier.name_or_path = None
    return SpeculatorModel.registered_model_class_from_config(config)(config)


def ignored_when_missing(model: Any, name: str) -> bool:
    return any(re.search(pattern, name) for pattern in model._keys_to_ignore_on_load_missing)


@pytest.mark.parametrize("name", CONVERTIBLE_EXAMPLES)
def test_model_classes_load_our_tensors_exactly(name: str, tmp_path: Path) -> None:
    folder = speculators_folder(name, tmp_path)
    model = bare_model(folder)
    ours = load_file(str(folder / "model.safetensors"))
    result = model.load_state_dict(ours, strict=False)
    assert result.unexpected_keys == []
    # Missing only what speculators itself rebuilds from the verifier (embeddings, heads, norm).
    assert [k for k in result.missing_keys if not ignored_when_missing(model, k)] == []
    state = model.state_dict()
    for key, value in ours.items():
        assert torch.equal(state[key], value.to(state[key].dtype)), key


@pytest.mark.parametrize("name", CONVERTIBLE_EXAMPLES)
def test_models_speculators_saves_inspect_cleanly(name: str, tmp_path: Path) -> None:
    # Normalized first (convert --to speculators), so the source itself is clean (the legacy
    # example is not: DFT011, DFT012).
    folder = tmp_path / "normalized"
    convert_checkpoint(str(EXAMPLES / name), folder, to="speculators")
    model = bare_model(folder)
    model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
    out = tmp_path / "saved"
    model.save_pretrained(str(out))
    before, after = inspect_checkpoint(str(folder)), inspect_checkpoint(str(out))
    assert after.ok, [f.message for f in after.findings]
    assert after.geometry is not None and before.geometry is not None
    assert (after.geometry.block_size, after.geometry.sample_from_anchor, after.geometry.max_speculative_tokens) == (
        before.geometry.block_size,
        before.geometry.sample_from_anchor,
        before.geometry.max_speculative_tokens,
    )
    assert after.description is not None and before.description is not None
    assert after.description.decoder == before.description.decoder
    assert after.description.target_layer_ids == before.description.target_layer_ids
    assert sorted(after.tensors) == sorted(before.tensors)
    assert before.ok
    assert [f.code for f in after.findings] == [f.code for f in before.findings]


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory, target_folder: Path) -> dict[tuple[str, bool], Path]:
    """Random-weight drafts written in z-lab form, converted to speculators with the target as verifier."""
    root = tmp_path_factory.mktemp("drafts")
    out = {}
    for algorithm, sfa in LAYOUTS:
        zlab = write_random_draft(
            root / f"zlab-{algorithm}-{sfa}", f"zlab-{algorithm}", random_draft_spec(algorithm, sfa)
        )
        converted = root / f"speculators-{algorithm}-{sfa}"
        convert_checkpoint(str(zlab), converted, to="speculators", target=str(target_folder))
        out[algorithm, sfa] = converted
    return out


@pytest.mark.parametrize(("algorithm", "sfa"), LAYOUTS)
def test_forward_equals_the_engine(
    drafts: dict[tuple[str, bool], Path], target_folder: Path, algorithm: str, sfa: bool
) -> None:
    folder = drafts[algorithm, sfa]
    theirs_model = speculators_model(folder)
    # speculators' own from_pretrained loaded our tensors and the verifier's from our target.
    for key, value in load_file(str(folder / "model.safetensors")).items():
        assert torch.equal(theirs_model.state_dict()[key], value), key
    engine, target = engine_model(folder, target_folder)
    for context_length in (1, 9, 23):
        theirs, ours, _, _ = both_blocks(theirs_model, engine, target, context_length)
        torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=ATOL)
        their_logits = theirs_model.lm_head(theirs)
        our_logits = engine.logits(ours)
        assert_logits_close(our_logits, their_logits)
        # Not a degenerate comparison: the rows draft different tokens.
        assert len(set(our_logits.argmax(-1).tolist())) > 1
        assert torch.equal(their_logits.argmax(-1), our_logits.argmax(-1))


def their_walk(model: Any, rows: torch.Tensor, logits: torch.Tensor, anchor: int) -> list[int]:
    """The DFlash2 walk composed from speculators' CandidateSelector.select, one row after the other."""
    previous, path = anchor, []
    for index in range(rows.shape[0]):
        candidates, scores = model.candidate_selector.select(
            logits[index : index + 1], rows[index : index + 1], torch.tensor([previous])
        )
        previous = int(candidates[0, int(scores[0].argmax())])
        path.append(previous)
    return path


@pytest.mark.parametrize("sfa", [False, True])
def test_dflash2_selector_walk_equals_the_engine(
    drafts: dict[tuple[str, bool], Path], target_folder: Path, sfa: bool
) -> None:
    folder = drafts["dflash2", sfa]
    theirs_model = speculators_model(folder)
    engine, target = engine_model(folder, target_folder)
    assert engine.selector is not None
    block = theirs_model.block_size
    k = block if sfa else block - 1
    first = 0 if sfa else 1
    differs_from_argmax = False
    for context_length in (1, 9, 23):
        theirs, _, ids, captured = both_blocks(theirs_model, engine, target, context_length)
        rows = theirs[first : first + k]
        with torch.no_grad():
            expected = their_walk(theirs_model, rows, theirs_model.lm_head(rows), ids[context_length])
        state = engine.new_state()
        engine.append_context(state, captured[:context_length], torch.arange(context_length))
        drafted = engine.propose(state, ids[context_length], context_length, k, sfa)
        assert drafted == expected
        differs_from_argmax |= drafted != theirs_model.lm_head(rows).argmax(-1).tolist()
    # The selector really re-ranked somewhere, so the walk itself was compared.
    assert differs_from_argmax
