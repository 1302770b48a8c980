"""The reference engine end to end on tiny real checkpoints (CPU).

Two kinds of pairs, both written by `dflash_tools_testing.demos.engine_demo`:
- exact (noise 0): the target walks a planted permutation and the drafts copy the anchor, so the
  acceptance of every step is known in advance (see the demo module's docstring);
- noisy: random weights on top, for token identity under partial acceptance.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dflash_tools_testing.demos import bundle as bundles
from dflash_tools_testing.demos import engine_demo as demo
from tests.torch_extra import require_torch_extra

torch = require_torch_extra()

from dflash_tools.reference_engine import run_request  # noqa: E402

K = 7
DIALECTS = ("zlab-dflash", "zlab-dflash2", "speculators-dflash", "speculators-dflash2")
FIXED_POINT = 2  # T(2) = 2
LONG_CYCLE = 7  # in the cycle 4 -> 5 -> ... -> 11 -> 4 (length 8)
THREE_CYCLE = 35  # in the cycle 34 -> 35 -> 36 -> 34


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Exact and noisy targets, and drafts written on demand per (dialect, layout, variant)."""
    root = tmp_path_factory.mktemp("engine")
    written: dict[str, Any] = {
        "root": root,
        "exact_target": demo.write_target(root / "exact-target"),
        "noisy_target": demo.write_target(root / "noisy-target", noise=demo.DEMO_TARGET_NOISE),
    }
    return written


def draft_folder(pairs: dict[str, Any], dialect: str, sfa: bool, *, noise: float = 0.0, **kwargs: Any) -> Path:
    algorithm = "dflash2" if "dflash2" in dialect else "dflash"
    dspec = demo.draft_spec(algorithm, sample_from_anchor=sfa)
    if "draft_vocab_size" in kwargs:
        dspec = replace(dspec, draft_vocab_size=kwargs.pop("draft_vocab_size"))
    name = f"{dialect}-{sfa}-{noise}-{sorted(kwargs.items())}-{dspec.draft_vocab_size}"
    folder = pairs["root"] / name
    if not folder.exists():
        demo.write_draft(folder, dialect, dspec, noise=noise, **kwargs)
    return folder


def make_request(
    target: Path | str,
    draft: Path | str,
    *,
    algorithm: str,
    sfa: bool,
    prompts: list[list[int]],
    max_tokens: int = 30,
    **extra: Any,
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "schema_version": 1,
        "engine": "torch",
        "target": str(target),
        "draft": str(draft),
        "algorithm": algorithm,
        "num_speculative_tokens": K,
        "block_size": K if sfa else K + 1,
        "sample_from_anchor": sfa,
        "num_query_tokens": K if sfa else K + 1,
        "prompts": [],
        "prompt_token_ids": prompts,
        "max_tokens": max_tokens,
        "baseline": True,
        "seed": 0,
        "dtype": None,
        "device": "cpu",
        "engine_args": {"target_impl": "builtin", "warmup": False},
        "env": {},
        "revision": None,
    }
    request.update(extra)
    return request


def run(request: dict[str, Any]) -> dict[str, Any]:
    result = run_request(request)
    assert result["ok"], result["error"]
    return result


def steps_for(accepted_per_step: int, max_tokens: int) -> int:
    """Draft steps to produce max_tokens when every step keeps `accepted_per_step` drafts + 1 bonus
    (the first token comes from the prompt's forward)."""
    return math.ceil((max_tokens - 1) / (accepted_per_step + 1))


def assert_accounting(result: dict[str, Any], sfa: bool) -> None:
    """Invariants of the counters in vLLM's definitions."""
    drafts = result["num_drafts"]
    per_position = result["accepted_per_position"]
    assert len(per_position) == K
    assert result["num_draft_tokens"] == K * drafts
    assert sum(per_position) == result["num_accepted_tokens"]
    assert all(a >= b for a, b in zip(per_position, per_position[1:], strict=False)), per_position
    assert result["query_positions_per_step"] == [K if sfa else K + 1] * drafts
    assert result["acceptance_rate_per_position"] == pytest.approx([c / drafts for c in per_position])
    assert result["mean_acceptance_length"] == pytest.approx(1 + result["num_accepted_tokens"] / drafts)
    assert result["engine_details"]["context_consistent"]
    assert result["output_tokens"] == sum(len(o) for o in result["outputs"])


# --- token identity on every dialect and both layouts ------------------------------------------


@pytest.mark.parametrize("sfa", [False, True], ids=["bonus-anchor", "anchor-first"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_speculation_is_token_identical_to_the_target_alone(pairs: dict[str, Any], dialect: str, sfa: bool) -> None:
    draft = draft_folder(pairs, dialect, sfa, noise=1.0)
    algorithm = "dflash2" if "dflash2" in dialect else "dflash"
    prompts = demo.demo_prompts(3, 10)
    result = run(
        make_request(pairs["noisy_target"], draft, algorithm=algorithm, sfa=sfa, prompts=prompts, max_tokens=40)
    )
    assert result["token_identical"] is True
    assert result["outputs"] == result["baseline"]["outputs"]
    assert [len(o) for o in result["outputs"]] == [40, 40, 40]
    assert_accounting(result, sfa)
    # Partial acceptance, so rejection and commit paths both ran.
    assert 0 < result["num_accepted_tokens"] < result["num_draft_tokens"]


# --- acceptance against answers known by construction ------------------------------------------


@pytest.mark.parametrize("sfa", [False, True], ids=["bonus-anchor", "anchor-first"])
@pytest.mark.parametrize("dialect", ["zlab-dflash", "speculators-dflash"])
def test_dflash_copy_draft_accepts_everything_on_a_fixed_point_and_one_on_a_cycle(
    pairs: dict[str, Any], dialect: str, sfa: bool
) -> None:
    draft = draft_folder(pairs, dialect, sfa)
    max_tokens = 33
    fixed = run(
        make_request(
            pairs["exact_target"],
            draft,
            algorithm="dflash",
            sfa=sfa,
            prompts=[[40, 9, FIXED_POINT]],
            max_tokens=max_tokens,
        )
    )
    steps = steps_for(K, max_tokens)
    assert fixed["outputs"] == [[FIXED_POINT] * max_tokens]
    assert fixed["num_drafts"] == steps
    assert fixed["accepted_per_position"] == [steps] * K
    assert_accounting(fixed, sfa)

    cycle = run(
        make_request(
            pairs["exact_target"], draft, algorithm="dflash", sfa=sfa, prompts=[[3, LONG_CYCLE]], max_tokens=max_tokens
        )
    )
    steps = steps_for(1, max_tokens)
    assert cycle["outputs"] == [demo.pattern_continuation(LONG_CYCLE, max_tokens)]
    assert cycle["num_drafts"] == steps
    assert cycle["accepted_per_position"] == [steps] + [0] * (K - 1)
    assert cycle["mean_acceptance_length"] == pytest.approx(2.0)
    assert cycle["token_identical"] is True


@pytest.mark.parametrize("sfa", [False, True], ids=["bonus-anchor", "anchor-first"])
@pytest.mark.parametrize("dialect", ["zlab-dflash2", "speculators-dflash2"])
def test_dflash2_selector_walk_follows_the_cycle(pairs: dict[str, Any], dialect: str, sfa: bool) -> None:
    draft = draft_folder(pairs, dialect, sfa)
    max_tokens = 41
    prompts = [[3, LONG_CYCLE], [5, THREE_CYCLE], [FIXED_POINT]]
    result = run(
        make_request(pairs["exact_target"], draft, algorithm="dflash2", sfa=sfa, prompts=prompts, max_tokens=max_tokens)
    )
    steps = 3 * steps_for(K, max_tokens)
    assert result["num_drafts"] == steps
    assert result["accepted_per_position"] == [steps] * K
    assert result["mean_acceptance_length"] == pytest.approx(K + 1)
    assert result["outputs"] == [demo.pattern_continuation(p[-1], max_tokens) for p in prompts]
    assert_accounting(result, sfa)

    # The same checkpoint without the selector (per-position argmax): one draft a step on a cycle.
    plain = run(
        make_request(
            pairs["exact_target"], draft, algorithm="dflash", sfa=sfa, prompts=prompts[:1], max_tokens=max_tokens
        )
    )
    assert plain["engine_details"]["selector"] is False
    assert plain["accepted_per_position"] == [steps_for(1, max_tokens)] + [0] * (K - 1)


def test_swapped_codebooks_walk_backwards_and_collapse_acceptance(pairs: dict[str, Any]) -> None:
    draft = draft_folder(pairs, "zlab-dflash2", False, swap_codebooks=True)
    max_tokens = 20
    result = run(
        make_request(
            pairs["exact_target"],
            draft,
            algorithm="dflash2",
            sfa=False,
            prompts=[[3, LONG_CYCLE], [FIXED_POINT]],
            max_tokens=max_tokens,
        )
    )
    # Long cycle: T^-1(anchor) != T(anchor), nothing accepted. Fixed point: everything.
    assert result["num_drafts"] == (max_tokens - 1) + steps_for(K, max_tokens)
    assert result["accepted_per_position"] == [steps_for(K, max_tokens)] * K
    assert result["token_identical"] is True


def test_reduced_vocabulary_maps_draft_ids_through_d2t(pairs: dict[str, Any]) -> None:
    vocab = 48
    draft = draft_folder(pairs, "speculators-dflash", False, draft_vocab_size=vocab)
    kept = demo.reduced_vocabulary(replace(demo.draft_spec(), draft_vocab_size=vocab))
    assert list(kept[:30]) == list(range(30)) and kept[-1] == demo.PATTERN.vocab_size - 1
    max_tokens = 17
    result = run(
        make_request(
            pairs["exact_target"],
            draft,
            algorithm="dflash",
            sfa=False,
            prompts=[[FIXED_POINT], [LONG_CYCLE]],
            max_tokens=max_tokens,
        )
    )
    assert result["accepted_per_position"] == [steps_for(K, max_tokens) + steps_for(1, max_tokens)] + [
        steps_for(K, max_tokens)
    ] * (K - 1)


def test_wrong_mask_token_collapses_acceptance_but_not_the_output(pairs: dict[str, Any]) -> None:
    draft = draft_folder(pairs, "zlab-dflash", False)
    request = make_request(
        pairs["exact_target"],
        draft,
        algorithm="dflash",
        sfa=False,
        prompts=[[FIXED_POINT]],
        max_tokens=9,
        draft_config_overrides={"dflash_config.mask_token_id": 5},
    )
    result = run(request)
    assert result["num_accepted_tokens"] == 0
    assert result["num_drafts"] == 8
    assert result["outputs"] == [[FIXED_POINT] * 9]
    assert result["token_identical"] is True


def test_bundled_demo_runs_from_example_sources() -> None:
    """The trained bundle, named as a user names it: two default prompts, what its target answers."""
    prompts = bundles.prompt_ids(bundles.ENGINE_DEMO, 2)
    result = run(
        make_request(
            "example:engine-demo/target",
            "example:engine-demo/zlab-dflash2",
            algorithm="dflash2",
            sfa=False,
            prompts=prompts,
            max_tokens=24,
        )
    )
    assert result["token_identical"] is True
    assert result["mean_acceptance_length"] > 2.5
    assert_accounting(result, False)


# --- the draft's pieces -------------------------------------------------------------------------


def test_grouped_conv_stays_inside_the_block() -> None:
    from dflash_tools.reference_engine.draft import grouped_conv

    rows = torch.arange(1.0, 13.0).view(3, 4)  # Q = 3 rows, H = 4
    base = torch.tensor([[1.0, 1.0, 1.0, 1.0], [10.0, 10.0, 10.0, 10.0]])  # 2 taps
    dynamic = torch.zeros(3, 2, 2)  # groups of 2 channels
    dynamic[:, 1, 1] = 1.0  # tap 1 of group 1 (channels 2, 3) gets +1
    out = grouped_conv(rows, base, dynamic, group_size=2)
    expected = rows.clone()
    expected[1:, :2] += 10 * rows[:-1, :2]
    expected[1:, 2:] += 11 * rows[:-1, 2:]
    assert torch.equal(out, expected)
    # Row 0 has no predecessor: the block boundary zeroes every tap past 0.
    assert torch.equal(out[0], rows[0])
    # More taps than rows: the extra taps have nothing to read.
    assert torch.equal(grouped_conv(rows[:1], base, dynamic[:1], 2), rows[:1])


def _draft_model(folder: Path, target_folder: Path, **overrides: Any) -> Any:
    from dflash_tools.reference_engine.draft import DraftModel
    from dflash_tools.reference_engine.target import BuiltinTarget
    from dflash_tools.reference_engine.weights import load_draft

    checkpoint = load_draft(str(folder), overrides=overrides)
    target = BuiltinTarget(target_folder, device=torch.device("cpu"), dtype=torch.float32)
    model = DraftModel(
        checkpoint.description,
        checkpoint.tensors,
        target_embeddings=target.embedding_weight(),
        target_lm_head=target.lm_head_weight(),
        device=torch.device("cpu"),
        dtype=torch.float32,
    )
    return model, target


def test_causal_layers_do_not_see_later_block_rows(pairs: dict[str, Any]) -> None:
    folder = draft_folder(pairs, "zlab-dflash2", True, noise=1.0)
    for causal in (True, False):
        model, target = _draft_model(folder, pairs["noisy_target"], is_causal=causal)
        state = model.new_state()
        prompt = [3, 14, 15, 92, 65]
        _, captured = target.forward(prompt, [t + 1 for t in model.desc.target_layer_ids])
        model.append_context(state, captured, torch.arange(len(prompt)))
        short = model.block_hidden(state, anchor=35, position=len(prompt), num_query_tokens=4)
        long = model.block_hidden(state, anchor=35, position=len(prompt), num_query_tokens=7)
        same = torch.allclose(short, long[:4], atol=1e-5)
        assert same is causal


def test_layer_attention_per_dialect() -> None:
    import dflash_tools_testing as testing
    from dflash_tools.inspect import describe
    from dflash_tools.reference_engine.draft import LayerAttention, layer_attention

    spec = replace(testing.TINY, layer_types=("sliding_attention", "full_attention"), sliding_window=64)
    sliding_causal, sliding_open, full = (
        LayerAttention(True, 64),
        LayerAttention(False, 64),
        LayerAttention(False, None),
    )

    def modes(dialect: str, **top: Any) -> list[LayerAttention]:
        config = testing.make_config(dialect, replace(spec, algorithm="dflash2" if "dflash2" in dialect else "dflash"))
        config.update(top)
        desc, _ = describe(config)
        assert desc is not None
        return layer_attention(desc)

    assert modes("zlab-dflash") == [sliding_causal, full]
    assert modes("zlab-dflash2") == [sliding_open, full]  # is_causal: false
    assert modes("zlab-dflash", is_causal=True) == [sliding_causal, LayerAttention(True, None)]
    assert modes("speculators-dflash") == [sliding_causal, full]  # sliding_window_non_causal false
    assert modes("speculators-dflash", sliding_window_non_causal=True) == [sliding_open, full]
    assert modes("speculators-dflash2") == [sliding_open, full]


def test_sliding_window_limits_the_context(pairs: dict[str, Any]) -> None:
    folder = draft_folder(pairs, "zlab-dflash", False, noise=1.0)
    prompt = list(range(40, 70))
    hidden = {}
    for window in (4, 4096):
        model, target = _draft_model(
            folder,
            pairs["noisy_target"],
            layer_types=["sliding_attention", "sliding_attention"],
            sliding_window=window,
            is_causal=False,
        )
        state = model.new_state()
        _, captured = target.forward(prompt, [t + 1 for t in model.desc.target_layer_ids])
        model.append_context(state, captured, torch.arange(len(prompt)))
        # Only the last few context rows are visible with window 4: dropping the rest changes nothing.
        hidden[window] = model.block_hidden(state, anchor=35, position=len(prompt), num_query_tokens=8)
        state.keys = [k[:, -4:] for k in state.keys]
        state.values = [v[:, -4:] for v in state.values]
        state.positions = state.positions[-4:]
        trimmed = model.block_hidden(state, anchor=35, position=len(prompt), num_query_tokens=8)
        assert torch.allclose(trimmed, hidden[window], atol=1e-5) is (window == 4)


def test_served_key_mask_known_answers() -> None:
    from dflash_tools.reference_engine.draft import LayerAttention, served_key_mask

    # Context 0..5, block 6..8, window 3 (docs/sliding-window.md): each row's window is its own.
    queries, keys = torch.arange(6, 9), torch.arange(9)
    open_rows = served_key_mask(queries, keys, LayerAttention(causal=False, window=3))
    assert [torch.nonzero(row).flatten().tolist() for row in open_rows] == [[4, 5, 6, 7, 8], [5, 6, 7, 8], [6, 7, 8]]
    causal_rows = served_key_mask(queries, keys, LayerAttention(causal=True, window=3))
    assert [torch.nonzero(row).flatten().tolist() for row in causal_rows] == [[4, 5, 6], [5, 6, 7], [6, 7, 8]]
    full = served_key_mask(queries, keys, LayerAttention(causal=False, window=None))
    assert bool(full.all())


def test_each_block_row_windows_from_its_own_position(pairs: dict[str, Any]) -> None:
    """Row r sees the context keys P + r - W + 1 .. P - 1 (served), not P - W .. P - 1 (trained)."""
    folder = draft_folder(pairs, "zlab-dflash", False, noise=1.0)
    model, target = _draft_model(
        folder, pairs["noisy_target"], layer_types=["sliding_attention"] * 2, sliding_window=4, is_causal=False
    )
    prompt = list(range(40, 60))
    _, captured = target.forward(prompt, [t + 1 for t in model.desc.target_layer_ids])

    def one_row(keep: int) -> Any:
        state = model.new_state()
        model.append_context(state, captured[-keep:], torch.arange(len(prompt) - keep, len(prompt)))
        return model.block_hidden(state, anchor=35, position=len(prompt), num_query_tokens=1)

    # One row at P: it sees P - 3 .. P - 1. A fourth key (the trained rule's P - 4) changes nothing.
    assert torch.allclose(one_row(3), one_row(20), atol=1e-6)
    assert not torch.allclose(one_row(2), one_row(20), atol=1e-3)


# --- the target side ----------------------------------------------------------------------------


def test_builtin_target_matches_transformers(pairs: dict[str, Any]) -> None:
    pytest.importorskip("transformers")
    from dflash_tools.reference_engine.target import BuiltinTarget, TransformersTarget

    cpu, f32 = torch.device("cpu"), torch.float32
    builtin = BuiltinTarget(pairs["noisy_target"], device=cpu, dtype=f32)
    reference = TransformersTarget(str(pairs["noisy_target"]), device=cpu, dtype=f32)
    capture = [0, 2, 3, 4]
    prompt = [5, 17, 99, 3, 64, 12]
    for target in (builtin, reference):
        target.reset()
    first = [t.forward(prompt, capture) for t in (builtin, reference)]
    for target in (builtin, reference):
        target.crop(4)
    second = [t.forward([8, 9, 10], capture) for t in (builtin, reference)]
    for (logits_a, hidden_a), (logits_b, hidden_b) in (first, second):
        assert torch.allclose(logits_a, logits_b, atol=1e-4)
        assert hidden_a is not None and hidden_b is not None
        assert torch.allclose(hidden_a, hidden_b, atol=1e-4)
    assert builtin.eos_token_ids == reference.eos_token_ids == frozenset({demo.PATTERN.eos_token_id})


def test_transformers_target_gives_the_same_run(pairs: dict[str, Any]) -> None:
    pytest.importorskip("transformers")
    draft = draft_folder(pairs, "zlab-dflash2", False, noise=1.0)
    prompts = demo.demo_prompts(2, 6)
    results = [
        run(
            make_request(
                pairs["noisy_target"],
                draft,
                algorithm="dflash2",
                sfa=False,
                prompts=prompts,
                max_tokens=20,
                engine_args={"target_impl": impl, "warmup": False},
            )
        )
        for impl in ("builtin", "transformers")
    ]
    assert results[1]["engine_details"]["target_impl"] == "transformers"
    for key in ("outputs", "num_drafts", "accepted_per_position", "query_positions_per_step"):
        assert results[0][key] == results[1][key]


# --- failures are one-line results, never exceptions ----------------------------------------------


def test_failures_come_back_as_results(pairs: dict[str, Any], make_checkpoint: Any, tmp_path: Path) -> None:
    draft = draft_folder(pairs, "zlab-dflash", False)
    target = pairs["exact_target"]
    untokenized = tmp_path / "no-tokenizer"
    shutil.copytree(target, untokenized, ignore=shutil.ignore_patterns("tokenizer*"))
    cases = {
        "dflash2 requested": make_request(target, draft, algorithm="dflash2", sfa=False, prompts=[[1]]),
        "not implemented in the torch engine": make_request(
            target, make_checkpoint("dspark-native"), algorithm="dspark", sfa=False, prompts=[[1]]
        ),
        "num_query_tokens": {
            **make_request(target, draft, algorithm="dflash", sfa=False, prompts=[[1]]),
            "num_query_tokens": K,
        },
        "text prompts need": {
            **make_request(untokenized, draft, algorithm="dflash", sfa=False, prompts=[[1]]),
            "prompts": ["hi"],
            "prompt_token_ids": None,
        },
        "no such folder": make_request(pairs["root"] / "absent", draft, algorithm="dflash", sfa=False, prompts=[[1]]),
    }
    for needle, request in cases.items():
        result = run_request(request)
        assert result["ok"] is False, needle
        assert needle in result["error"], (needle, result["error"])
        assert "\n" not in result["error"]


def test_text_prompts_go_through_the_targets_tokenizer(pairs: dict[str, Any]) -> None:
    pytest.importorskip("transformers")
    draft = draft_folder(pairs, "zlab-dflash", False)
    # The demo tokenizer is character-level: token id = code point.
    prompts = ["(\t" + chr(FIXED_POINT), chr(3) + chr(LONG_CYCLE)]
    for chat in (False, True):
        request = {
            **make_request(pairs["exact_target"], draft, algorithm="dflash", sfa=False, prompts=[[0]], max_tokens=5),
            "prompts": prompts,
            "prompt_token_ids": None,
            "chat": chat,
        }
        result = run(request)
        expected = [[FIXED_POINT] * 5, demo.pattern_continuation(LONG_CYCLE, 5)]
        assert result["outputs"] == expected
        assert result["output_texts"] == ["".join(map(chr, o)) for o in expected]
