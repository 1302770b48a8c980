"""The `vllm-cpu-demo` shape, and a planted pair of the same shape for the tests that need exact answers.

numpy only (no torch). Same shape class as `engine-demo` (a 4-layer Qwen3ForCausalLM target with a
character tokenizer, z-lab DFlash drafts with K = 7), but head_dim 64, because vLLM's CPU attention
refuses head_dim 16; weights are float32 so vLLM and the reference engine compute in the same
dtype from the same bytes.

The bundled `example:vllm-cpu-demo` pair has this shape but is trained (`bundle.py`,
`training.py`). The planted pair below (target, DFlash and DFlash2 drafts) is written where a test
runs: the V2 tier (tests/real_vllm_v2) and the construction tests need its exact answers.

The planted pattern: tokens 0..125 form 14 cycles of length L = 9 of a permutation T, and the
target's greedy continuation of t is T(t) (its head scores s by `alpha * <own(T^-1(s)), own(t)> +
beta * [same cycle]`; with `target_noise` the layers add a little context, so it mostly follows T).
After a walk along a cycle, the token D positions back is known: T^j(anchor) sits L positions
before P + j. The drafts exploit that with RoPE alone:

- each query row (anchor or mask) asks the same constant question; each context key (target
  features, never a block row) answers with a constant rotated so that, after RoPE, the score
  peaks where key position = query position - D (the phases are a least-squares-free LP design:
  weights over the fastest rotating pairs that keep every other offset up to 1200 well below);
- the value is the context token's own features, `o_proj` adds it 4x over the row's embedding,
  and the target's head turns "token x" into T(x).

So row r of the block proposes T(token at P + r - D). The bonus-anchor draft (rows 1..K predict
P + 1..P + K) uses D = L + 1; the anchor-first draft (rows 0..K-1 predict P + 1..P + K) uses D = L.
Served in its own layout, each draft proposes T^j(anchor) at position j once the last L + 1 tokens
walk one cycle; served in the other layout every proposal is one step off: acceptance collapses.
That is what `--compare-layouts` must see, and what stock V1 does to the anchor-first draft.

`write_planted_demo(FOLDER)` writes the planted target and DFlash drafts; deterministic (same bytes
every time).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import dflash_tools_testing as testing
from dflash_tools.reading.local import examples_dir
from dflash_tools_testing.demos import checkpoints
from dflash_tools_testing.demos.checkpoints import DemoShape, normal

DEMO_DIR_NAME = "vllm-cpu-demo"
DEMO_SEED = 20261203


@dataclass(frozen=True)
class CpuDemoSpec(DemoShape):
    """DemoShape with head_dim 64 and rope_theta 10000 (the offset weights are fitted to both)."""

    head_dim: int = 64
    rope_theta: float = 10_000.0
    cycle_length: int = 9
    num_speculative_tokens: int = 7
    max_position_embeddings: int = 1024
    # Share of each unit embedding: constant, cycle code, own direction; squares sum to 1.
    const_weight: float = 0.5
    code_weight: float = 0.5
    own_weight: float = 0.5**0.5
    alpha: float = 4.0  # logit bonus of T(t) over the rest of its cycle
    beta: float = 20.0  # logit bonus of t's cycle over other tokens
    query_gain: float = 4.0  # q_norm / k_norm weight: peak score 8 * gain^2 = 128 at head_dim 64
    value_gain: float = 4.0  # o_proj: the copied context token outweighs the row's own embedding
    target_noise: float = 0.35  # scale of the target's o_proj / down_proj (0: exactly T)
    draft_noise: float = 0.05

    @property
    def num_cycles(self) -> int:
        return (self.vocab_size - 2) // self.cycle_length


SPEC = CpuDemoSpec()

# Embedding columns: a constant, the mask marker, the context-key marker (never in an embedding,
# only in the draft's context features), one per cycle, then the tokens' own directions.
CONST_COLUMN, MASK_COLUMN, KEY_COLUMN, FIRST_CODE_COLUMN = 0, 1, 2, 3


def cycles(spec: CpuDemoSpec = SPEC) -> list[list[int]]:
    length = spec.cycle_length
    return [list(range(c * length, (c + 1) * length)) for c in range(spec.num_cycles)]


def successor_table(spec: CpuDemoSpec = SPEC) -> np.ndarray:
    """T: successor[t] = T(t); EOS and the mask token are fixed points no prompt reaches."""
    return checkpoints.successor_table(cycles(spec), spec.vocab_size)


def _own_start(spec: CpuDemoSpec) -> int:
    start = FIRST_CODE_COLUMN + spec.num_cycles
    if spec.hidden_size - start < spec.cycle_length:
        raise ValueError(f"hidden_size {spec.hidden_size} too small for {spec.num_cycles} cycle codes")
    return start


def embeddings_and_head(spec: CpuDemoSpec = SPEC, seed: int = DEMO_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(embed [V, H], lm_head [V, H]) planting T; rows have RMS 1. EOS and mask score 0."""
    rng = np.random.default_rng(seed)
    h = spec.hidden_size
    own_start = _own_start(spec)
    width = h - own_start
    own = np.zeros((spec.vocab_size, width))
    for cycle in cycles(spec):
        basis, _ = np.linalg.qr(rng.standard_normal((width, len(cycle))))
        own[cycle] = basis.T
    for token in (spec.eos_token_id, spec.mask_token_id):
        vector = rng.standard_normal(width)
        own[token] = vector / np.linalg.norm(vector)
    code = np.full(spec.vocab_size, -1)
    for index, cycle in enumerate(cycles(spec)):
        code[cycle] = index
    root = np.sqrt(h)
    embed = np.zeros((spec.vocab_size, h))
    embed[:, CONST_COLUMN] = spec.const_weight
    for token in range(spec.vocab_size):
        if code[token] >= 0:
            embed[token, FIRST_CODE_COLUMN + code[token]] = spec.code_weight
        embed[token, own_start:] = spec.own_weight * own[token]
    embed[spec.mask_token_id] = 0.0
    embed[spec.mask_token_id, CONST_COLUMN] = spec.const_weight
    embed[spec.mask_token_id, MASK_COLUMN] = (1 - spec.const_weight**2) ** 0.5
    embed *= root
    predecessor = np.argsort(successor_table(spec))
    head = np.zeros((spec.vocab_size, h))
    for token in range(spec.vocab_size - 2):
        head[token, FIRST_CODE_COLUMN + code[token]] = spec.beta / (spec.code_weight * root)
        head[token, own_start:] = spec.alpha / (spec.own_weight * root) * own[predecessor[token]]
    return embed, head


def rope_frequencies(spec: CpuDemoSpec = SPEC) -> np.ndarray:
    pairs = spec.head_dim // 2
    return spec.rope_theta ** (-np.arange(pairs) / pairs)


# Weights over RoPE pairs for the offset detector, found once with a linear program (maximize t
# subject to sum_i w_i (1 - cos(x theta_i)) >= t for every offset 0 < |x| <= 1200, sum w = 1) at
# rope_theta 10000 and head_dim 64, then rounded; `offset_profile` checks the margin they keep.
OFFSET_WEIGHTS = (
    0.602, 0.049, 0.048, 0.038, 0.015, 0.019, 0.029, 0.011, 0.027, 0.031, 0.021,
    0.022, 0.0, 0.018, 0.011, 0.023, 0.0, 0.019, 0.0, 0.014, 0.005,
)  # fmt: skip


def _pair_weights(spec: CpuDemoSpec) -> np.ndarray:
    weights = np.zeros(spec.head_dim // 2)
    weights[: len(OFFSET_WEIGHTS)] = OFFSET_WEIGHTS
    return weights / weights.sum()


def query_and_key(spec: CpuDemoSpec, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Head-dim vectors q, k (before the norms' gain) whose RoPE score peaks at key = query - offset.

    Pair i of q is (sqrt(w_i), 0); pair i of k is sqrt(w_i) (cos(offset * theta_i), sin(...)), so
    after rotating q by m * theta and k by n * theta their product is sum_i w_i cos((n - m + offset) theta_i).
    """
    pairs = spec.head_dim // 2
    root = np.sqrt(_pair_weights(spec))
    theta = rope_frequencies(spec)
    q = np.zeros(spec.head_dim)
    k = np.zeros(spec.head_dim)
    q[:pairs] = root
    k[:pairs] = root * np.cos(offset * theta)
    k[pairs:] = root * np.sin(offset * theta)
    return q, k


def offset_profile(spec: CpuDemoSpec = SPEC, max_distance: int = 1200) -> tuple[float, float]:
    """(score at the planted offset, best score elsewhere) for unit-RMS q and k times the gains."""
    theta = rope_frequencies(spec)
    weights = _pair_weights(spec)
    scale = spec.head_dim * spec.query_gain**2 / np.sqrt(spec.head_dim)
    xs = np.concatenate([np.arange(-max_distance, 0), np.arange(1, max_distance + 1)])
    elsewhere = (np.cos(np.outer(xs, theta)) @ weights).max()
    return float(scale * weights.sum()), float(scale * elsewhere)


def target_config(spec: CpuDemoSpec = SPEC) -> dict[str, Any]:
    return checkpoints.target_config(spec, dtype="float32", max_position_embeddings=spec.max_position_embeddings)


def target_tensors(spec: CpuDemoSpec = SPEC, seed: int = DEMO_SEED) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    embed, head = embeddings_and_head(spec, seed)
    return checkpoints.target_tensors(spec, embed, head, rng, noise=spec.target_noise)


def draft_spec(*, sample_from_anchor: bool, spec: CpuDemoSpec = SPEC) -> testing.DraftSpec:
    """K = 7 in both layouts: block 8 bonus-anchor, block 7 anchor-first. One head of head_dim =
    hidden_size, so values and o_proj can be exact (scaled) identities."""
    return checkpoints.draft_spec(
        spec,
        algorithm="dflash",
        sample_from_anchor=sample_from_anchor,
        num_speculative_tokens=spec.num_speculative_tokens,
        dtype="F32",
        verifier="dflash-tools/vllm-cpu-demo-target",
    )


def draft_offset(sample_from_anchor: bool, spec: CpuDemoSpec = SPEC) -> int:
    """How far back (in positions) each query row of the draft reads: L anchor-first, L + 1 bonus."""
    return spec.cycle_length if sample_from_anchor else spec.cycle_length + 1


def draft_tensors(sample_from_anchor: bool, spec: CpuDemoSpec = SPEC, seed: int = DEMO_SEED) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 2 + int(sample_from_anchor))
    h, d, inter = spec.hidden_size, spec.head_dim, spec.draft_intermediate
    noise = spec.draft_noise
    q_vector, k_vector = query_and_key(spec, draft_offset(sample_from_anchor, spec))
    copy_q = np.zeros((d, h))
    copy_q[:, CONST_COLUMN] = q_vector
    copy_k = np.zeros((d, h))
    copy_k[:, KEY_COLUMN] = k_vector
    tensors: dict[str, np.ndarray] = {}
    for layer in range(spec.draft_layers):
        p = f"layers.{layer}."
        copy = layer == 0
        tensors.update(
            {
                p + "input_layernorm.weight": np.ones(h),
                p + "post_attention_layernorm.weight": np.ones(h),
                p + "self_attn.q_proj.weight": copy_q if copy else normal(rng, (d, h), 1 / np.sqrt(h)),
                p + "self_attn.k_proj.weight": copy_k if copy else normal(rng, (d, h), 1 / np.sqrt(h)),
                p + "self_attn.v_proj.weight": np.eye(h) if copy else normal(rng, (d, h), 1 / np.sqrt(h)),
                p + "self_attn.o_proj.weight": spec.value_gain * np.eye(h)
                if copy
                else normal(rng, (h, d), noise / np.sqrt(d)),
                p + "self_attn.q_norm.weight": np.full(d, spec.query_gain) if copy else np.ones(d),
                p + "self_attn.k_norm.weight": np.full(d, spec.query_gain) if copy else np.ones(d),
                p + "mlp.gate_proj.weight": normal(rng, (inter, h), 1 / np.sqrt(h)),
                p + "mlp.up_proj.weight": normal(rng, (inter, h), 1 / np.sqrt(h)),
                p + "mlp.down_proj.weight": normal(rng, (h, inter), noise / np.sqrt(inter)),
            }
        )
    # Context features: each captured layer's token representation (half from each), and the
    # constant column moved to the key marker, which only context rows therefore carry.
    pick = np.eye(h)
    pick[CONST_COLUMN, CONST_COLUMN] = 0.0
    pick[KEY_COLUMN, CONST_COLUMN] = 1.0
    layers = len(spec.target_layer_ids)
    tensors["fc.weight"] = np.concatenate([pick / layers] * layers, axis=1)
    tensors["hidden_norm.weight"] = np.ones(h)
    tensors["norm.weight"] = np.ones(h)
    return tensors


def write_target(folder: Path, spec: CpuDemoSpec = SPEC, seed: int = DEMO_SEED) -> Path:
    return checkpoints.write_target(folder, spec, target_tensors(spec, seed), target_config(spec), dtype="F32")


def write_draft(folder: Path, *, sample_from_anchor: bool, spec: CpuDemoSpec = SPEC, seed: int = DEMO_SEED) -> Path:
    dspec = draft_spec(sample_from_anchor=sample_from_anchor, spec=spec)
    config = testing.make_config("zlab-dflash", dspec)
    config["dtype"] = "float32"
    config["max_position_embeddings"] = spec.max_position_embeddings
    tensors = draft_tensors(sample_from_anchor, spec, seed)
    return checkpoints.write_draft(folder, "zlab-dflash", dspec, tensors, config=config)


@dataclass(frozen=True)
class Dflash2Extras:
    """What turns the demo's DFlash draft into a DFlash2 one (`write_dflash2_draft`)."""

    conv_kernel_size: int = 2
    conv_group_size: int = 16
    selector_top_k: int = 8
    # The previous row's weight on the first layer's attention output, for anchor rows only.
    anchor_tap_gain: float = 2.0
    conv_noise: float = 0.05  # every other tap and dynamic coefficient: small, never zero
    selector_tau: float = 10.0  # transition score of the right successor (before the final norm's scale)


DFLASH2 = Dflash2Extras()


def dflash2_draft_spec(
    *, sample_from_anchor: bool, spec: CpuDemoSpec = SPEC, extras: Dflash2Extras = DFLASH2
) -> testing.DraftSpec:
    return checkpoints.draft_spec(
        spec,
        algorithm="dflash2",
        sample_from_anchor=sample_from_anchor,
        num_speculative_tokens=spec.num_speculative_tokens,
        dtype="F32",
        verifier="dflash-tools/vllm-cpu-demo-target",
        conv_kernel_size=extras.conv_kernel_size,
        conv_group_size=extras.conv_group_size,
        selector_rank=spec.cycle_length,
        selector_top_k=extras.selector_top_k,
    )


def dflash2_draft_tensors(
    sample_from_anchor: bool, spec: CpuDemoSpec = SPEC, extras: Dflash2Extras = DFLASH2, seed: int = DEMO_SEED
) -> dict[str, np.ndarray]:
    """The DFlash draft's weights plus DFlash2's convolutions and candidate selector.

    The convolutions pass each row through (tap 0 is 1 plus noise) except in one place: in the first
    layer, an anchor row's dynamic tap-1 coefficient on the attention output is `anchor_tap_gain`
    (the kernel projection reads the constant column minus the mask marker, which cancel on mask
    rows). Served correctly the anchor is row 0 of its block and has no tap 1, so the draft behaves
    like the DFlash one; served with a convolution block that is not the per-request query count
    (K + 1 for an anchor-first draft), a later request's anchor is not row 0 of its block, reads the
    previous request's last row, and its proposal changes. The selector's codebooks encode T (one
    rank per position in a cycle), so its greedy walk from the anchor follows the cycle as the
    copying rows do.
    """
    rng = np.random.default_rng(seed + 4 + int(sample_from_anchor))
    tensors = draft_tensors(sample_from_anchor, spec, seed)
    h = spec.hidden_size
    taps, groups = extras.conv_kernel_size, h // extras.conv_group_size
    root = np.sqrt(h)
    const_value = spec.const_weight * root  # the constant column of every embedding row
    mask_value = (1 - spec.const_weight**2) ** 0.5 * root  # the mask marker of the mask row
    anchor_detector = np.zeros(h)
    anchor_detector[CONST_COLUMN] = extras.anchor_tap_gain / const_value
    anchor_detector[MASK_COLUMN] = -extras.anchor_tap_gain / mask_value
    for layer in range(spec.draft_layers):
        p = f"layers.{layer}."
        for conv in ("attention_conv", "mlp_conv"):
            base = normal(rng, (2, taps, h), extras.conv_noise)
            base[:, 0] += 1.0
            projection = normal(rng, (2 * taps * groups, h), extras.conv_noise / root)
            if layer == 0 and conv == "attention_conv":
                # Rows [side, tap, group] of the projection: side 1 (the attention output), tap 1.
                for group in range(groups):
                    projection[(1 * taps + 1) * groups + group] = anchor_detector
            tensors[f"{p}{conv}.base_kernel"] = base
            tensors[f"{p}{conv}.kernel_projection.weight"] = projection
    length = spec.cycle_length
    predecessor = np.zeros((spec.vocab_size, length))
    successor = np.zeros((spec.vocab_size, length))
    for cycle in cycles(spec):
        for position, token in enumerate(cycle):
            predecessor[token, position] = 1.0
            successor[token, (position - 1) % length] = 1.0
    projection = np.zeros((length, h))
    projection[:, CONST_COLUMN] = extras.selector_tau / const_value
    tensors["candidate_selector.hidden_projection.weight"] = projection
    tensors["candidate_selector.predecessor_codebook"] = predecessor
    tensors["candidate_selector.successor_codebook"] = successor
    return tensors


def write_dflash2_draft(
    folder: Path, *, sample_from_anchor: bool, spec: CpuDemoSpec = SPEC, extras: Dflash2Extras = DFLASH2
) -> Path:
    """A z-lab DFlash2 draft for the demo target (not bundled: the V2 tier writes it where it runs)."""
    dspec = dflash2_draft_spec(sample_from_anchor=sample_from_anchor, spec=spec, extras=extras)
    config = testing.make_config("zlab-dflash2", dspec)
    config["dtype"] = "float32"
    config["max_position_embeddings"] = spec.max_position_embeddings
    tensors = dflash2_draft_tensors(sample_from_anchor, spec, extras)
    return checkpoints.write_draft(folder, "zlab-dflash2", dspec, tensors, config=config)


# The bundled drafts (trained: `bundle.py`): name -> sample_from_anchor.
DEMO_DRAFTS: dict[str, bool] = {"zlab-dflash": False, "zlab-dflash-anchor-first": True}


def write_planted_demo(root: Path, spec: CpuDemoSpec = SPEC) -> dict[str, Path]:
    """The planted pair: `target/` and one folder per draft under `root`; deterministic."""
    written = {"target": write_target(root / "target", spec)}
    for name, sample_from_anchor in DEMO_DRAFTS.items():
        written[name] = write_draft(root / name, sample_from_anchor=sample_from_anchor, spec=spec)
    return written


def bundled_demo_dir() -> Path:
    return examples_dir() / DEMO_DIR_NAME
