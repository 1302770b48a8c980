"""The engine demo's shape, and a planted-pattern target + drafts for the tests that need exact answers.

numpy only (no torch): the files are ordinary checkpoints, a Hugging Face Qwen3 target folder and
draft folders in any supported dialect, that the reference engine, transformers or vLLM can load.

The bundled `example:engine-demo` pair has this module's shape (`PATTERN`'s dimensions,
`draft_spec`, `target_config`) but is trained, not planted (`bundle.py`, `training.py`). The
planted pair below is written where a test runs, for the answers it knows in advance.

The pattern: the target's vocabulary is split into cycles of a permutation T (a few fixed points,
then cycles of length 2..8), and the target's greedy continuation of token t is T(t). Each token's
embedding is a unit vector made of a constant component `z`, a code for its cycle and a direction
of its own; the LM head scores token s by `alpha * <own(T^-1(s)), own(t)> + beta * [same cycle]`.
With the target's layers zeroed (`noise=0`) greedy decoding walks the cycle exactly.

The draft is built to copy the anchor. The mask token's embedding is a marker column that only the
queries read; in the first layer every mask row's query matches the anchor's key (the constant
`z` column, on the head dimension RoPE barely rotates) and nothing else, values and `o_proj` are
identities, and `fc` is zero (the context carries nothing). Every mask row therefore ends as the
anchor's normalized embedding and the shared head proposes T(anchor) at every position. That gives acceptance answers known in advance (see `expected_*`):

- plain DFlash (argmax per row) on a fixed point: all K drafts accepted; on a cycle of length
  >= 2: exactly 1 (T(anchor) is right at the first position only);
- DFlash2: the candidate selector's codebooks encode T (predecessor code = position in the cycle,
  successor code = position - 1), so the greedy walk from the anchor follows the cycle and all K
  drafts are accepted for every cycle that fits in `selector_top_k`. Swapping the two codebooks
  walks the cycle backwards: 0 accepted on cycles longer than 2.

`noise > 0` adds random weights everywhere (a target that mostly follows the pattern, drafts that
mostly copy), which the token-identity tests use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import dflash_tools_testing as testing
from dflash_tools.reading.local import examples_dir
from dflash_tools_testing.demos import checkpoints, corpus
from dflash_tools_testing.demos.checkpoints import DemoShape, normal

DEMO_DIR_NAME = "engine-demo"
DEMO_SEED = 20260901


@dataclass(frozen=True)
class PatternSpec(DemoShape):
    """Dimensions of the demo pair (DemoShape's: head_dim 16) and the planted pattern."""

    num_fixed_points: int = 4
    max_cycle: int = 8
    # Share of each unit embedding: z (constant), cycle code, own direction; squares sum to 1.
    z_weight: float = 0.51
    code_weight: float = 0.5
    own_weight: float = 0.7
    mask_marker: float = 1.0  # the mask token's embedding: this much on its own column
    attention_gain: float = 4.0  # q_norm / k_norm weight on the copy dimension: score 4 * gain^2 at head_dim 16
    alpha: float = 4.0  # logit bonus of T(t) over the rest of its cycle
    beta: float = 20.0  # logit bonus of t's cycle over other tokens
    tau: float = 10.0  # selector transition score of the right successor


PATTERN = PatternSpec()


def cycles(spec: PatternSpec = PATTERN) -> list[list[int]]:
    """The permutation's cycles in order: fixed points, then lengths max_cycle, ..., 2 repeating.

    The mask token and the EOS token are fixed points of their own that no prompt reaches.
    """
    out: list[list[int]] = [[t] for t in range(spec.num_fixed_points)]
    token = spec.num_fixed_points
    last = spec.vocab_size - 2
    lengths = list(range(spec.max_cycle, 1, -1))
    index = 0
    while token < last:
        length = min(lengths[index % len(lengths)], last - token)
        out.append(list(range(token, token + length)))
        token += length
        index += 1
    out.append([spec.eos_token_id])
    out.append([spec.mask_token_id])
    return out


def successor_table(spec: PatternSpec = PATTERN) -> np.ndarray:
    """T as an array: successor[t] = T(t)."""
    return checkpoints.successor_table(cycles(spec), spec.vocab_size)


def pattern_continuation(last_token: int, length: int, spec: PatternSpec = PATTERN) -> list[int]:
    """What an exact (noise-free) target generates after a prompt ending in `last_token`."""
    table = successor_table(spec)
    out, token = [], last_token
    for _ in range(length):
        token = int(table[token])
        out.append(token)
    return out


def cycle_length(token: int, spec: PatternSpec = PATTERN) -> int:
    return next(len(c) for c in cycles(spec) if token in c)


def _code_groups(spec: PatternSpec) -> dict[int, int]:
    """Token -> cycle-code index. Fixed points share one code (their own direction separates them)."""
    groups: dict[int, int] = {}
    code = 0
    for cycle in cycles(spec):
        if len(cycle) == 1:
            continue
        for token in cycle:
            groups[token] = code + 1
        code += 1
    for cycle in cycles(spec):
        if len(cycle) == 1:
            groups[cycle[0]] = 0
    return groups


# Embedding columns: 0 the constant z, 1 the mask marker, then one per cycle code, then the
# tokens' own directions.
Z_COLUMN, MASK_COLUMN, FIRST_CODE_COLUMN = 0, 1, 2


def _layout(spec: PatternSpec) -> tuple[int, int, int]:
    """(number of cycle codes, first own-direction column, own-direction width)."""
    num_codes = max(_code_groups(spec).values()) + 1
    own_start = FIRST_CODE_COLUMN + num_codes
    own_width = spec.hidden_size - own_start
    if own_width < spec.max_cycle:
        raise ValueError(f"hidden_size {spec.hidden_size} too small for {num_codes} cycle codes")
    return num_codes, own_start, own_width


def _own_directions(spec: PatternSpec, rng: np.random.Generator) -> np.ndarray:
    """Unit own-directions, orthonormal within each cycle (so a cycle's members never compete)."""
    _, _, width = _layout(spec)
    own = np.zeros((spec.vocab_size, width))
    for cycle in cycles(spec):
        basis, _ = np.linalg.qr(rng.standard_normal((width, len(cycle))))
        for position, token in enumerate(cycle):
            own[token] = basis[:, position]
    return own


def pattern_embeddings(spec: PatternSpec = PATTERN, seed: int = DEMO_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(embeddings [V, H], LM head [V, H]) that plant T. Rows have RMS 1; the mask token's row is
    its marker alone, which the head ignores."""
    rng = np.random.default_rng(seed)
    groups = _code_groups(spec)
    _, own_start, _ = _layout(spec)
    own = _own_directions(spec, rng)
    root = np.sqrt(spec.hidden_size)
    embed = np.zeros((spec.vocab_size, spec.hidden_size))
    for token in range(spec.vocab_size):
        embed[token, Z_COLUMN] = spec.z_weight
        embed[token, FIRST_CODE_COLUMN + groups[token]] = spec.code_weight
        embed[token, own_start:] = spec.own_weight * own[token]
    embed *= root
    embed[spec.mask_token_id] = 0.0
    embed[spec.mask_token_id, MASK_COLUMN] = spec.mask_marker
    successor = successor_table(spec)
    predecessor = np.argsort(successor)
    # RMSNorm scales a row to norm sqrt(H); divide that out so alpha and beta are logits.
    head = np.zeros((spec.vocab_size, spec.hidden_size))
    for token in range(spec.vocab_size):
        head[token, FIRST_CODE_COLUMN + groups[token]] = spec.beta / (spec.code_weight * root)
        head[token, own_start:] = spec.alpha / (spec.own_weight * root) * own[predecessor[token]]
    head[spec.mask_token_id] = 0.0
    return embed, head


def target_config(spec: PatternSpec = PATTERN) -> dict[str, Any]:
    """A complete Hugging Face Qwen3 config.json (transformers 4.56+ and 5.x read it)."""
    return checkpoints.target_config(spec, dtype="bfloat16", max_position_embeddings=4096)


def target_tensors(spec: PatternSpec = PATTERN, *, noise: float = 0.0, seed: int = DEMO_SEED) -> dict[str, np.ndarray]:
    """Qwen3ForCausalLM weights. `noise` is the scale of the (otherwise zero) attention and MLP."""
    rng = np.random.default_rng(seed + 1)
    embed, head = pattern_embeddings(spec, seed)
    return checkpoints.target_tensors(spec, embed, head, rng, noise=noise)


def draft_spec(
    algorithm: str = "dflash", *, sample_from_anchor: bool = False, spec: PatternSpec = PATTERN
) -> testing.DraftSpec:
    """The draft's shape: K = 7 in both layouts (block 8 bonus-anchor, block 7 anchor-first)."""
    return checkpoints.draft_spec(
        spec,
        algorithm=algorithm,
        sample_from_anchor=sample_from_anchor,
        num_speculative_tokens=7,
        dtype="BF16",
        verifier="dflash-tools/engine-demo-target",
        conv_kernel_size=2,
        conv_group_size=16,
        selector_rank=spec.max_cycle,
        selector_top_k=spec.max_cycle,
    )


def draft_tensors(
    dspec: testing.DraftSpec,
    spec: PatternSpec = PATTERN,
    *,
    noise: float = 0.0,
    swap_codebooks: bool = False,
    seed: int = DEMO_SEED,
) -> dict[str, np.ndarray]:
    """Weights for every tensor `testing.tensor_table(dspec)` names: the copy construction plus noise."""
    rng = np.random.default_rng(seed + 2)
    h, d = dspec.hidden_size, dspec.head_dim
    q, kv, inter = dspec.num_attention_heads * d, dspec.num_key_value_heads * d, dspec.intermediate_size
    if q != h or kv != h:
        raise ValueError(
            "the copy construction needs num_attention_heads * head_dim == num_key_value_heads * head_dim == hidden_size"
        )
    eye = np.eye(h)
    # Copy dimension: the last of the first half of each head, the pair RoPE rotates slowest, so the
    # score between a mask row and the anchor barely depends on their distance.
    copy_dim = d // 2 - 1
    select_query = np.zeros((q, h))
    select_key = np.zeros((kv, h))
    for head in range(dspec.num_attention_heads):
        select_query[head * d + copy_dim, MASK_COLUMN] = 1.0
    for head in range(dspec.num_key_value_heads):
        select_key[head * d + copy_dim, Z_COLUMN] = 1.0
    gain = np.ones(d)
    gain[copy_dim] = spec.attention_gain
    tensors: dict[str, np.ndarray] = {}
    for layer in range(dspec.num_hidden_layers):
        p = f"layers.{layer}."
        copy = layer == 0
        tensors.update(
            {
                p + "input_layernorm.weight": np.ones(h),
                p + "post_attention_layernorm.weight": np.ones(h),
                p + "self_attn.q_proj.weight": (select_query if copy else 0.0)
                + normal(rng, (q, h), noise / np.sqrt(h)),
                p + "self_attn.k_proj.weight": (select_key if copy else 0.0) + normal(rng, (kv, h), noise / np.sqrt(h)),
                p + "self_attn.v_proj.weight": (eye if copy else 0.0) + normal(rng, (kv, h), noise / np.sqrt(h)),
                p + "self_attn.o_proj.weight": (eye if copy else 0.0) + normal(rng, (h, q), noise / np.sqrt(q)),
                p + "self_attn.q_norm.weight": gain,
                p + "self_attn.k_norm.weight": gain,
                p + "mlp.gate_proj.weight": normal(rng, (inter, h), 1 / np.sqrt(h)),
                p + "mlp.up_proj.weight": normal(rng, (inter, h), 1 / np.sqrt(h)),
                p + "mlp.down_proj.weight": normal(rng, (h, inter), noise / np.sqrt(inter)),
            }
        )
        if dspec.algorithm == "dflash2":
            taps, groups = dspec.conv_kernel_size, h // dspec.conv_group_size
            for conv in ("attention_conv", "mlp_conv"):
                base = np.zeros((2, taps, h))
                base[:, 0] = 1.0  # identity: tap 0 passes the row through, later taps add nothing
                tensors[f"{p}{conv}.base_kernel"] = base + normal(rng, base.shape, noise * 0.1)
                tensors[f"{p}{conv}.kernel_projection.weight"] = normal(
                    rng, (2 * taps * groups, h), noise * 0.1 / np.sqrt(h)
                )
    width = len(dspec.target_layer_ids) * h
    tensors["fc.weight"] = normal(rng, (h, width), noise / np.sqrt(width))
    # The context features never carry the z column, so no context key can match a mask row's
    # query the way the anchor's key does.
    hidden_norm = np.ones(h)
    hidden_norm[Z_COLUMN] = 0.0
    tensors["hidden_norm.weight"] = hidden_norm
    tensors["norm.weight"] = np.ones(h)
    if not dspec.full_vocab:
        # speculators' reduced vocabulary: its own head over a subset, d2t = target id - draft id.
        kept = reduced_vocabulary(dspec, spec)
        _, target_head = pattern_embeddings(spec, seed)
        tensors["lm_head.weight"] = target_head[kept]
        tensors["d2t"] = kept - np.arange(len(kept))
        t2d = np.zeros(dspec.vocab_size, dtype=bool)
        t2d[kept] = True
        tensors["t2d"] = t2d
    if dspec.algorithm == "dflash2":
        rank = dspec.selector_rank
        if rank < spec.max_cycle:
            raise ValueError("selector_rank must be at least the longest cycle")
        predecessor = np.zeros((dspec.vocab_size, rank))
        successor = np.zeros((dspec.vocab_size, rank))
        for cycle in cycles(spec):
            for position, token in enumerate(cycle):
                predecessor[token, position] = 1.0
                successor[token, (position - 1) % len(cycle)] = 1.0
        if swap_codebooks:
            predecessor, successor = successor, predecessor
        # h = hidden_projection(final row) reads the constant z column: the same positive value
        # for every anchor, so the transition score is tau for the right successor, 0 otherwise.
        projection = np.zeros((rank, h))
        projection[:, Z_COLUMN] = spec.tau / (spec.z_weight * np.sqrt(h))
        tensors["candidate_selector.hidden_projection.weight"] = projection + normal(rng, (rank, h), noise * 0.1)
        tensors["candidate_selector.predecessor_codebook"] = predecessor
        tensors["candidate_selector.successor_codebook"] = successor
    return tensors


def reduced_vocabulary(dspec: testing.DraftSpec, spec: PatternSpec = PATTERN, keep_below: int = 30) -> np.ndarray:
    """Target ids a reduced-vocabulary draft keeps, ascending: every token below `keep_below`
    (whole cycles, so the pattern stays predictable there), then tokens from the top down."""
    size = dspec.draft_vocab_size or dspec.vocab_size
    if size < keep_below:
        raise ValueError(f"draft_vocab_size {size} is below {keep_below}")
    top = list(range(spec.vocab_size - 1, keep_below - 1, -1))[: size - keep_below]
    return np.array(sorted(range(keep_below)) + sorted(top), dtype=np.int64)


def write_target(
    folder: Path, spec: PatternSpec = PATTERN, *, noise: float = 0.0, dtype: str = "BF16", seed: int = DEMO_SEED
) -> Path:
    """A Hugging Face Qwen3ForCausalLM folder: config.json, model.safetensors, a character tokenizer."""
    config = target_config(spec)
    config["dtype"] = {"BF16": "bfloat16", "F32": "float32", "F16": "float16"}[dtype]
    return checkpoints.write_target(folder, spec, target_tensors(spec, noise=noise, seed=seed), config, dtype=dtype)


def write_draft(
    folder: Path,
    dialect: str,
    dspec: testing.DraftSpec,
    spec: PatternSpec = PATTERN,
    *,
    noise: float = 0.0,
    swap_codebooks: bool = False,
    seed: int = DEMO_SEED,
) -> Path:
    """A draft checkpoint in `dialect`'s own config form with the copy-construction weights."""
    tensors = draft_tensors(dspec, spec, noise=noise, swap_codebooks=swap_codebooks, seed=seed)
    return checkpoints.write_draft(folder, dialect, dspec, tensors)


# The bundled drafts (trained: `bundle.py`): name -> (dialect, algorithm, sample_from_anchor).
DEMO_DRAFTS: dict[str, tuple[str, str, bool]] = {
    "zlab-dflash": ("zlab-dflash", "dflash", False),
    "zlab-dflash-anchor-first": ("zlab-dflash", "dflash", True),
    "zlab-dflash2": ("zlab-dflash2", "dflash2", False),
    "zlab-dflash2-anchor-first": ("zlab-dflash2", "dflash2", True),
}
# The planted pair with noise: a target that mostly follows the pattern, drafts that mostly copy.
DEMO_TARGET_NOISE = 0.6
DEMO_DRAFT_NOISE = 0.1


def write_planted_demo(
    root: Path, *, target_noise: float = DEMO_TARGET_NOISE, draft_noise: float = DEMO_DRAFT_NOISE
) -> dict[str, Path]:
    """The planted pair: `target/` and one folder per entry of DEMO_DRAFTS under `root`; deterministic."""
    written = {"target": write_target(root / "target", noise=target_noise)}
    for name, (dialect, algorithm, sfa) in DEMO_DRAFTS.items():
        dspec = draft_spec(algorithm, sample_from_anchor=sfa)
        written[name] = write_draft(root / name, dialect, dspec, noise=draft_noise)
    return written


def demo_prompts(count: int = 4, length: int = 12) -> list[list[int]]:
    """Prompt token ids inside the vocabulary (never the EOS or mask token): the last `length`
    characters of the first `count` default prompts (`corpus.PROMPTS`, what the trained target
    answers), through the character tokenizer."""
    if count > len(corpus.PROMPTS):
        raise ValueError(f"{count} prompts asked, {len(corpus.PROMPTS)} available")
    return [[ord(c) for c in prompt[-length:]] for prompt in corpus.PROMPTS[:count]]


def bundled_demo_dir() -> Path:
    return examples_dir() / DEMO_DIR_NAME
