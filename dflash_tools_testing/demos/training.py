"""Train the CPU demos' target and drafts: a minimal loop in torch, reproducible from a seed.

torch is imported inside the functions: the package, `inspect` and `--help` never import it.

The target is a Qwen3ForCausalLM (the demo's shape) trained as a character language model on the
synthetic word-problem corpus (`corpus.py`). Each draft is trained against that target with the
DFlash objective in its own layout (docs/reference-engine.md, "The trained demos"):

- data: windows of corpus text with the target's hidden states at the draft's
  `target_layer_ids` (z-lab convention: layer id t reads hidden state t + 1), computed once with
  the target frozen, from the weights as they are written (bf16 for the engine demo);
- a training block: an anchor position P in a window; the block's rows are the anchor's token and
  the mask token at positions P .. P + Q - 1 (Q = K + 1 bonus-anchor, K anchor-first); the rows
  attend to the context features of positions < P and to every row of their own block, as the
  reference engine's draft does at inference (`reference_engine/draft.py`);
- the loss: cross-entropy of the K drafting rows (rows 1 .. K bonus-anchor, 0 .. K - 1
  anchor-first) against the text's tokens at P + 1 .. P + K, through the target's frozen LM head,
  weighted by exp(-j / gamma) at draft position j (the DFlash position decay); a DFlash2 draft's
  candidate selector adds the cross-entropy of its walk score over the top-k candidates, with the
  text's previous token as the predecessor (teacher forcing).

The forward passes here are the reference engine's arithmetic, batched over blocks (the engine
runs one block at a time); `ops` is shared, and the tests compare the trained drafts' acceptance
through the engine itself, so a drift between the two shows up as lost acceptance.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import dflash_tools_testing as testing
from dflash_tools_testing.demos.checkpoints import DemoShape

if TYPE_CHECKING:
    import torch

Params = dict[str, "torch.Tensor"]


@dataclass(frozen=True)
class Recipe:
    """Steps, batch shapes and learning rates of one demo's training (the seed is the demo's)."""

    corpus_problems: int = 3000
    target_steps: int = 900
    target_batch: int = 6
    target_window: int = 384
    target_lr: float = 6e-3
    draft_steps: int = 500
    draft_batch: int = 8
    draft_window: int = 384
    draft_pool: int = 128
    anchors_per_window: int = 16
    draft_lr: float = 3e-3
    position_decay_gamma: float = 4.0
    selector_loss_weight: float = 0.5
    threads: int = 1


RECIPE = Recipe()
# Embedding scale at initialization (Hugging Face Qwen3: 0.02): the layers, not the embeddings,
# dominate the residual stream, so the hidden states of different layers differ.
EMBED_STD = 0.02


def encode_text(text: str, shape: DemoShape) -> list[int]:
    """The demos' character tokenizer: token id = code point, anything at or above EOS reads as "?"."""
    unknown = ord("?")
    return [ord(c) if ord(c) < shape.eos_token_id else unknown for c in text]


# --- shared arithmetic ---------------------------------------------------------------------------


def _rope(x: torch.Tensor, positions: torch.Tensor, head_dim: int, theta: float) -> torch.Tensor:
    """Rotate-half RoPE of x [..., heads, n, d] at positions [..., n] (the engine's `ops` formula)."""
    import torch

    from dflash_tools.reference_engine import ops

    inverse, scale = ops.rope_inverse_frequencies(head_dim, {"rope_theta": theta}, "training")
    freqs = positions.to(torch.float32)[..., None] * scale * inverse
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().unsqueeze(-3), emb.sin().unsqueeze(-3)
    return x * cos + ops.rotate_half(x) * sin


def _heads(x: torch.Tensor, count: int, head_dim: int) -> torch.Tensor:
    """[..., n, count * d] -> [..., count, n, d]."""
    return x.view(*x.shape[:-1], count, head_dim).transpose(-2, -3)


def _attend(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Grouped-query attention in float32: queries [B, h, q, d], keys/values [B, kv, n, d], allowed
    [B, q, n] or [q, n]; returns [B, q, h * d]."""
    import torch

    heads, kv = queries.shape[1], keys.shape[1]
    if heads != kv:
        keys = keys.repeat_interleave(heads // kv, dim=1)
        values = values.repeat_interleave(heads // kv, dim=1)
    mask = allowed[:, None] if allowed.dim() == 3 else allowed
    out = torch.nn.functional.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
    return out.transpose(1, 2).reshape(*queries.shape[:1], queries.shape[2], heads * queries.shape[3])


def _to_numpy(params: Params) -> dict[str, np.ndarray]:
    return {name: value.detach().to("cpu").double().numpy() for name, value in params.items()}


def round_like_stored(tensors: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The values a checkpoint written in `dtype` holds (bf16 rounds; F32 keeps float32)."""
    from dflash_tools_testing.demos.checkpoints import to_bf16_bytes

    out = {}
    for name, value in tensors.items():
        if dtype == "BF16":
            raw = np.frombuffer(to_bf16_bytes(value), dtype="<u2").astype(np.uint32) << 16
            out[name] = raw.view(np.float32).reshape(value.shape).astype(np.float64)
        else:
            out[name] = value.astype(np.float32).astype(np.float64)
    return out


# --- the target ----------------------------------------------------------------------------------


def _decoder_layer(
    p: str, h: int, d: int, q: int, kv: int, inter: int, depth: float, normal: Callable[..., torch.Tensor]
) -> Params:
    """One Qwen3 decoder layer's initial weights, target and draft alike: unit norms, projections
    scaled by their fan-in, the residual outputs by `depth` as well. The draws happen in this
    order, which the seeded bundles' checksums depend on."""
    import torch

    return {
        p + "input_layernorm.weight": torch.ones(h),
        p + "post_attention_layernorm.weight": torch.ones(h),
        p + "self_attn.q_proj.weight": normal(q, h, std=h**-0.5),
        p + "self_attn.k_proj.weight": normal(kv, h, std=h**-0.5),
        p + "self_attn.v_proj.weight": normal(kv, h, std=h**-0.5),
        p + "self_attn.o_proj.weight": normal(h, q, std=depth * q**-0.5),
        p + "self_attn.q_norm.weight": torch.ones(d),
        p + "self_attn.k_norm.weight": torch.ones(d),
        p + "mlp.gate_proj.weight": normal(inter, h, std=h**-0.5),
        p + "mlp.up_proj.weight": normal(inter, h, std=h**-0.5),
        p + "mlp.down_proj.weight": normal(h, inter, std=depth * inter**-0.5),
    }


def _init_target(shape: DemoShape, generator: torch.Generator) -> Params:
    import torch

    h, d = shape.hidden_size, shape.head_dim
    q, kv, inter = shape.target_heads * d, shape.target_kv_heads * d, shape.target_intermediate

    def normal(*size: int, std: float) -> torch.Tensor:
        return torch.randn(*size, generator=generator) * std

    params: Params = {"model.embed_tokens.weight": normal(shape.vocab_size, h, std=EMBED_STD)}
    depth = 1 / math.sqrt(2 * shape.target_layers)
    for layer in range(shape.target_layers):
        params.update(_decoder_layer(f"model.layers.{layer}.", h, d, q, kv, inter, depth, normal))
    params["model.norm.weight"] = torch.ones(h)
    params["lm_head.weight"] = normal(shape.vocab_size, h, std=h**-0.5)
    return params


def target_forward(
    params: Params, shape: DemoShape, ids: torch.Tensor, capture: tuple[int, ...] = ()
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Causal forward of token windows ids [B, N]: logits [B, N, V] and the hidden states at the
    `capture` indices (0 = embeddings, i = after layer i - 1) concatenated [B, N, len * H]."""
    import torch

    from dflash_tools.reference_engine import ops

    eps, d = 1e-6, shape.head_dim
    count = ids.shape[1]
    positions = torch.arange(count)
    causal = positions[None, :] <= positions[:, None]
    hidden = params["model.embed_tokens.weight"][ids]
    states = {0: hidden}
    for layer in range(shape.target_layers):
        p = f"model.layers.{layer}."
        rows = ops.rms_norm(hidden, params[p + "input_layernorm.weight"], eps)
        queries = _heads(ops.linear(rows, params[p + "self_attn.q_proj.weight"]), shape.target_heads, d)
        keys = _heads(ops.linear(rows, params[p + "self_attn.k_proj.weight"]), shape.target_kv_heads, d)
        values = _heads(ops.linear(rows, params[p + "self_attn.v_proj.weight"]), shape.target_kv_heads, d)
        queries = _rope(
            ops.rms_norm(queries, params[p + "self_attn.q_norm.weight"], eps), positions, d, shape.rope_theta
        )
        keys = _rope(ops.rms_norm(keys, params[p + "self_attn.k_norm.weight"], eps), positions, d, shape.rope_theta)
        hidden = hidden + ops.linear(_attend(queries, keys, values, causal), params[p + "self_attn.o_proj.weight"])
        rows = ops.rms_norm(hidden, params[p + "post_attention_layernorm.weight"], eps)
        hidden = hidden + ops.silu_mlp(
            rows,
            params[p + "mlp.gate_proj.weight"],
            params[p + "mlp.up_proj.weight"],
            params[p + "mlp.down_proj.weight"],
        )
        states[layer + 1] = hidden
    final = ops.rms_norm(hidden, params["model.norm.weight"], eps)
    states[shape.target_layers] = final  # the engine's convention for the last index: final-normed
    logits = ops.linear(final, params["lm_head.weight"])
    captured = torch.cat([states[i] for i in capture], dim=-1) if capture else None
    return logits, captured


class Windows:
    """Token windows of the corpus that start where a problem starts, as a prompt does."""

    def __init__(self, problems: list[str], shape: DemoShape, length: int) -> None:
        import torch

        starts, offset = [], 0
        for problem in problems:
            starts.append(offset)
            offset += len(problem)
        self.tokens = torch.tensor(encode_text("".join(problems), shape), dtype=torch.long)
        self.starts = torch.tensor([s for s in starts if s + length <= offset], dtype=torch.long)
        self.length = length

    def sample(self, count: int, generator: torch.Generator) -> torch.Tensor:
        import torch

        picks = self.starts[torch.randint(0, self.starts.shape[0], (count,), generator=generator)]
        return torch.stack([self.tokens[s : s + self.length] for s in picks.tolist()])


def _cosine_lr(step: int, steps: int, peak: float) -> float:
    warmup = max(1, steps // 20)
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def train_target(
    shape: DemoShape, problems: list[str], recipe: Recipe, seed: int
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(Qwen3ForCausalLM tensors by Hugging Face name, a training record)."""
    import torch

    torch.set_num_threads(recipe.threads)
    generator = torch.Generator().manual_seed(seed)
    windows = Windows(problems, shape, recipe.target_window + 1)
    params = _init_target(shape, generator)
    for value in params.values():
        value.requires_grad_(True)
    optimizer = torch.optim.AdamW(list(params.values()), lr=recipe.target_lr, weight_decay=0.0)
    started, losses = time.process_time(), []
    for step in range(recipe.target_steps):
        for group in optimizer.param_groups:
            group["lr"] = _cosine_lr(step, recipe.target_steps, recipe.target_lr)
        batch = windows.sample(recipe.target_batch, generator)
        logits, _ = target_forward(params, shape, batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, shape.vocab_size), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    record = {
        "steps": recipe.target_steps,
        "tokens_per_step": recipe.target_batch * recipe.target_window,
        "final_loss": round(sum(losses[-50:]) / len(losses[-50:]), 4),
        "cpu_seconds": round(time.process_time() - started, 1),
    }
    return _to_numpy(params), record


# --- the draft -----------------------------------------------------------------------------------


def _init_draft(dspec: testing.DraftSpec, generator: torch.Generator) -> Params:
    import torch

    h, d = dspec.hidden_size, dspec.head_dim
    q, kv, inter = dspec.num_attention_heads * d, dspec.num_key_value_heads * d, dspec.intermediate_size

    def normal(*size: int, std: float) -> torch.Tensor:
        return torch.randn(*size, generator=generator) * std

    params: Params = {}
    depth = 1 / math.sqrt(2 * dspec.num_hidden_layers)
    for layer in range(dspec.num_hidden_layers):
        p = f"layers.{layer}."
        params.update(_decoder_layer(p, h, d, q, kv, inter, depth, normal))
        if dspec.algorithm == "dflash2":
            taps, groups = dspec.conv_kernel_size, h // dspec.conv_group_size
            for conv in ("attention_conv", "mlp_conv"):
                base = torch.zeros(2, taps, h)
                base[:, 0] = 1.0  # start as the identity: tap 0 passes each row through
                params[f"{p}{conv}.base_kernel"] = base
                params[f"{p}{conv}.kernel_projection.weight"] = normal(2 * taps * groups, h, std=0.01 * h**-0.5)
    width = len(dspec.target_layer_ids) * h
    params["fc.weight"] = normal(h, width, std=width**-0.5)
    params["hidden_norm.weight"] = torch.ones(h)
    params["norm.weight"] = torch.ones(h)
    if dspec.algorithm == "dflash2":
        rank = dspec.selector_rank
        params["candidate_selector.hidden_projection.weight"] = normal(rank, h, std=0.1 * h**-0.5)
        params["candidate_selector.predecessor_codebook"] = normal(dspec.vocab_size, rank, std=0.1)
        params["candidate_selector.successor_codebook"] = normal(dspec.vocab_size, rank, std=0.1)
    return params


def _block_conv(rows: torch.Tensor, base: torch.Tensor, dynamic: torch.Tensor, group_size: int) -> torch.Tensor:
    """`reference_engine.draft.grouped_conv` over blocks: rows [..., Q, H], base [T, H], dynamic
    [..., Q, T, G]; no tap reaches across a block's first row."""
    import torch

    count = rows.shape[-2]
    out = torch.zeros_like(rows)
    for tap in range(min(base.shape[0], count)):
        coefficients = base[tap] + dynamic[..., tap, :].repeat_interleave(group_size, dim=-1)
        shifted = torch.nn.functional.pad(rows[..., : count - tap, :], (0, 0, tap, 0))
        out = out + coefficients * shifted
    return out


def _conv(
    params: Params, name: str, dspec: testing.DraftSpec, rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if dspec.algorithm != "dflash2":
        return rows, None
    base, projection = params[name + ".base_kernel"], params[name + ".kernel_projection.weight"]
    taps, group_size = base.shape[1], dspec.conv_group_size
    from dflash_tools.reference_engine import ops

    dynamic = ops.linear(rows, projection).view(*rows.shape[:-1], 2, taps, -1)
    return _block_conv(rows, base[0], dynamic[..., 0, :, :], group_size), dynamic[..., 1, :, :]


def _conv_finish(
    params: Params, name: str, dspec: testing.DraftSpec, rows: torch.Tensor, dynamic: torch.Tensor | None
) -> torch.Tensor:
    if dynamic is None:
        return rows
    return _block_conv(rows, params[name + ".base_kernel"][1], dynamic, dspec.conv_group_size)


def draft_rows(
    params: Params,
    dspec: testing.DraftSpec,
    embeddings: torch.Tensor,
    captured: torch.Tensor,
    ids: torch.Tensor,
    anchors: torch.Tensor,
) -> torch.Tensor:
    """Final-normed drafting rows [B, A, K, H] for windows ids [B, N] with the target's captured
    features [B, N, L * H] and anchor positions [B, A] (context: positions < anchor)."""
    import torch

    from dflash_tools.reference_engine import ops

    eps, d = 1e-6, dspec.head_dim
    k = dspec.k_max
    anchor_first = bool(dspec.sample_from_anchor)
    rows_per_block = k if anchor_first else k + 1
    batch, count = ids.shape
    blocks = anchors.shape[1]
    offsets = torch.arange(rows_per_block)
    block_positions = anchors[..., None] + offsets  # [B, A, Q]
    block_ids = torch.full((batch, blocks, rows_per_block), dspec.mask_token_id, dtype=torch.long)
    block_ids[..., 0] = ids.gather(1, anchors)
    hidden = embeddings[block_ids].reshape(batch, blocks * rows_per_block, -1)
    query_positions = block_positions.reshape(batch, -1)
    # Which keys each row sees: context positions before its anchor, and its own block's rows.
    context_seen = torch.arange(count)[None, None, :] < anchors.repeat_interleave(rows_per_block, 1)[..., None]
    block_of_row = torch.arange(blocks).repeat_interleave(rows_per_block)
    same_block = (block_of_row[:, None] == block_of_row[None, :]).expand(batch, -1, -1)
    allowed = torch.cat((context_seen, same_block), dim=-1)
    features = ops.rms_norm(ops.linear(captured, params["fc.weight"]), params["hidden_norm.weight"], eps)
    context_positions = torch.arange(count)
    heads, kv_heads = dspec.num_attention_heads, dspec.num_key_value_heads
    theta = dspec.rope_theta
    for layer in range(dspec.num_hidden_layers):
        p = f"layers.{layer}."
        context_keys = _heads(ops.linear(features, params[p + "self_attn.k_proj.weight"]), kv_heads, d)
        context_keys = _rope(
            ops.rms_norm(context_keys, params[p + "self_attn.k_norm.weight"], eps), context_positions, d, theta
        )
        context_values = _heads(ops.linear(features, params[p + "self_attn.v_proj.weight"]), kv_heads, d)
        rows = ops.rms_norm(hidden, params[p + "input_layernorm.weight"], eps)
        rows, kernel = _conv(params, p + "attention_conv", dspec, rows.view(batch, blocks, rows_per_block, -1))
        rows = rows.reshape(batch, blocks * rows_per_block, -1)
        queries = _heads(ops.linear(rows, params[p + "self_attn.q_proj.weight"]), heads, d)
        queries = _rope(ops.rms_norm(queries, params[p + "self_attn.q_norm.weight"], eps), query_positions, d, theta)
        keys = _heads(ops.linear(rows, params[p + "self_attn.k_proj.weight"]), kv_heads, d)
        keys = _rope(ops.rms_norm(keys, params[p + "self_attn.k_norm.weight"], eps), query_positions, d, theta)
        values = _heads(ops.linear(rows, params[p + "self_attn.v_proj.weight"]), kv_heads, d)
        attended = _attend(
            queries, torch.cat((context_keys, keys), dim=2), torch.cat((context_values, values), dim=2), allowed
        )
        out = ops.linear(attended, params[p + "self_attn.o_proj.weight"]).view(batch, blocks, rows_per_block, -1)
        hidden = hidden + _conv_finish(params, p + "attention_conv", dspec, out, kernel).reshape(hidden.shape)
        rows = ops.rms_norm(hidden, params[p + "post_attention_layernorm.weight"], eps)
        rows, kernel = _conv(params, p + "mlp_conv", dspec, rows.view(batch, blocks, rows_per_block, -1))
        out = ops.silu_mlp(
            rows,
            params[p + "mlp.gate_proj.weight"],
            params[p + "mlp.up_proj.weight"],
            params[p + "mlp.down_proj.weight"],
        )
        hidden = hidden + _conv_finish(params, p + "mlp_conv", dspec, out, kernel).reshape(hidden.shape)
    final = ops.rms_norm(hidden, params["norm.weight"], eps).view(batch, blocks, rows_per_block, -1)
    first = 0 if anchor_first else 1
    return final[:, :, first : first + k]


def _selector_loss(
    params: Params,
    dspec: testing.DraftSpec,
    rows: torch.Tensor,
    logits: torch.Tensor,
    previous: torch.Tensor,
    labels: torch.Tensor,
) -> torch.Tensor:
    """Cross-entropy of the DFlash2 walk score (unary logit + codebook transition from the text's
    previous token) over each row's top-k candidates, where the right token is among them."""
    import torch

    from dflash_tools.reference_engine import ops

    top_k = min(dspec.selector_top_k, logits.shape[-1])
    candidates = torch.topk(logits.detach(), top_k, dim=-1).indices
    unary = logits.gather(-1, candidates)
    context = ops.linear(rows, params["candidate_selector.hidden_projection.weight"])
    predecessor = params["candidate_selector.predecessor_codebook"][previous]
    successor = params["candidate_selector.successor_codebook"][candidates]
    score = unary + (successor * (predecessor * context)[..., None, :]).sum(-1)
    hit = candidates == labels[..., None]
    present = hit.any(-1)
    if not bool(present.any()):
        return score.sum() * 0.0
    return torch.nn.functional.cross_entropy(score[present], hit[present].float().argmax(-1))


@dataclass
class DraftData:
    """What every draft of a demo trains on: the target's own greedy answers to corpus questions.

    `ids` [P, N]: a question (the prompt) then the target's greedy continuation, N tokens in all;
    `answer_starts` [P]: where each continuation starts. As at inference, a draft's context is the
    target's hidden states of the prompt and of the target's own tokens (DFlash trains on data
    the target regenerated; the corpus answers would teach the corpus's numbers, not the target's).
    """

    ids: torch.Tensor
    answer_starts: torch.Tensor
    cpu_seconds: float


def target_answers(target_folder: Path, shape: DemoShape, problems: list[str], recipe: Recipe, seed: int) -> DraftData:
    """Greedy continuations of `recipe.draft_pool` corpus questions by the written target, through the
    reference engine's own target and greedy loop (float32, CPU)."""
    import random

    import torch

    from dflash_tools.reference_engine.loop import greedy_generate
    from dflash_tools.reference_engine.target import BuiltinTarget

    torch.set_num_threads(recipe.threads)
    started = time.process_time()
    target = BuiltinTarget(target_folder, device=torch.device("cpu"), dtype=torch.float32)
    questions = [problem.split("\n", 1)[0] for problem in random.Random(seed).sample(problems, recipe.draft_pool)]
    prompts = [encode_text(question, shape)[: recipe.draft_window // 2] for question in questions]
    rows, starts = [], []
    for prompt in prompts:
        generated = greedy_generate(target, [prompt], recipe.draft_window - len(prompt), ignore_eos=True)
        rows.append(prompt + generated.outputs[0])
        starts.append(len(prompt))
    return DraftData(
        torch.tensor(rows, dtype=torch.long),
        torch.tensor(starts, dtype=torch.long),
        round(time.process_time() - started, 1),
    )


def train_draft(
    dspec: testing.DraftSpec,
    shape: DemoShape,
    target: dict[str, np.ndarray],
    data: DraftData,
    recipe: Recipe,
    seed: int,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(draft tensors by checkpoint name, a training record) for `dspec`'s layout against `target`
    (its tensors as stored), on the target's own answers `data`."""
    import torch

    torch.set_num_threads(recipe.threads)
    generator = torch.Generator().manual_seed(seed)
    frozen = {name: torch.tensor(value, dtype=torch.float32) for name, value in target.items()}
    embeddings, head = frozen["model.embed_tokens.weight"], frozen["lm_head.weight"]
    capture = tuple(t + 1 for t in dspec.target_layer_ids)
    started, losses = time.process_time(), []
    # The target's hidden states, once (the target is frozen).
    with torch.no_grad():
        features = torch.cat([target_forward(frozen, shape, chunk, capture)[1] for chunk in data.ids.split(16)])  # type: ignore[misc]
    params = _init_draft(dspec, generator)
    for value in params.values():
        value.requires_grad_(True)
    optimizer = torch.optim.AdamW(list(params.values()), lr=recipe.draft_lr, weight_decay=0.0)
    k = dspec.k_max
    weights = torch.exp(-torch.arange(k, dtype=torch.float32) / recipe.position_decay_gamma)
    weights = weights / weights.sum()
    count, length = data.ids.shape
    for step in range(recipe.draft_steps):
        for group in optimizer.param_groups:
            group["lr"] = _cosine_lr(step, recipe.draft_steps, recipe.draft_lr)
        picks = torch.randint(0, count, (recipe.draft_batch,), generator=generator)
        ids, captured = data.ids[picks], features[picks]
        # Anchors where inference puts them: on the target's own tokens, the first one included.
        low = data.answer_starts[picks][:, None].float()
        span = (length - k) - low
        anchors = (low + torch.rand(recipe.draft_batch, recipe.anchors_per_window, generator=generator) * span).long()
        rows = draft_rows(params, dspec, embeddings, captured, ids, anchors)
        logits = ops_logits(rows, head)
        label_positions = anchors[..., None] + 1 + torch.arange(k)
        labels = ids.gather(1, label_positions.reshape(recipe.draft_batch, -1)).view_as(label_positions)
        per_row = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none"
        ).view_as(labels)
        loss = (per_row.mean(dim=(0, 1)) * weights).sum()
        if dspec.algorithm == "dflash2":
            previous = torch.cat((ids.gather(1, anchors)[..., None], labels[..., :-1]), dim=-1)
            loss = loss + recipe.selector_loss_weight * _selector_loss(params, dspec, rows, logits, previous, labels)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    record = {
        "steps": recipe.draft_steps,
        "blocks_per_step": recipe.draft_batch * recipe.anchors_per_window,
        "final_loss": round(sum(losses[-50:]) / len(losses[-50:]), 4),
        "cpu_seconds": round(time.process_time() - started, 1),
    }
    return _to_numpy(params), record


def ops_logits(rows: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
    from dflash_tools.reference_engine import ops

    return ops.linear(rows, head)
