"""Child process of the V2 tier: run vLLM's V2 DFlash / DFlash2 speculator on CPU, step by step.

Run as `python harness.py PLAN.json` under `TRITON_INTERPRET=1` (the parent, conftest.py, sets
the environment). Prints one JSON document (its last stdout line; vLLM logs to stdout too): per
case, what vLLM's speculator was (or the error that refused it); for each step of the scenario
the tensors its input kernel built, the draft tokens `propose()` returned and the torch reference
engine's draft tokens for the same context; for the cases listed under `generate`, the figures of
a greedy speculative generation through vLLM's target, verification and speculator.

What is vLLM's and what is this harness's (docs/tier-vllm-v2.md says the same):

- vLLM's (as installed, patched by our plugin when vLLM's plugin loader registers it):
  `EngineArgs(...).create_engine_config()`, the target model and its weight loader (the draft
  shares its embeddings and LM head), `init_speculator`, `DFlashSpeculator` / `DFlash2Speculator`
  with `load_model`, `set_attn`, `init_cudagraph_manager` and `propose()` (its Triton kernels
  `_prepare_dflash_inputs_kernel`, TRITON_ATTN's attention and cache-write kernels, DFlash2's
  `_selector_walk_kernel`, all run by Triton's interpreter), the draft models
  (`qwen3_dflash.py`, `qwen3_dflash2.py`), the KV-cache spec, grouping, layout and allocation
  functions, `BlockTables`, `InputBuffers`, `InputBatch`, `build_attn_metadata`; in the
  generation also the target's forward and `gather_draft_sampled` / `rejection_sample`.
- The harness's: the named work-arounds of `workarounds.py`; the steps of
  `GPUModelRunner.initialize_kv_cache` that set the KV cache up, rebuilt by hand (the runner
  itself needs CUDA streams); block tables written straight into `input_block_tables` and the
  target's slot mapping computed here (vLLM's kernels for both read raw pointers); the target
  batch (`InputBatch`) and the scheduler's bookkeeping (`num_rejected`, `num_sampled`,
  `last_sampled`, when a request is done). In the scenario the target's hidden states and the
  greedy verification come from the torch reference engine's target (`dflash_tools.reference_engine`,
  float32, same weights), so both drafters see exactly the same context.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import sys
import time
import traceback
from importlib.metadata import version
from pathlib import Path
from typing import Any

import workarounds  # same folder: the child runs as a script

KV_BLOCK_SIZE = 16
MAX_MODEL_LEN = 256
MAX_NUM_BATCHED_TOKENS = 64


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def build_config(case: dict[str, Any], max_num_seqs: int) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(
        model=case["target"],
        skip_tokenizer_init=True,
        max_model_len=MAX_MODEL_LEN,
        max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
        max_num_seqs=max_num_seqs,
        dtype="float32",
        block_size=KV_BLOCK_SIZE,
        enforce_eager=True,
        attention_backend="TRITON_ATTN",
        speculative_config={"method": "dflash", "model": case["draft"], "num_speculative_tokens": case["k"]},
    ).create_engine_config()


_distributed: dict[str, bool] = {}


def init_single_process_group(folder: Path) -> None:
    """A one-rank gloo group (vLLM's layers ask for the TP group); built once, inside a config."""
    if _distributed:
        return
    from vllm.distributed.parallel_state import init_distributed_environment, initialize_model_parallel

    init_distributed_environment(1, 0, f"file://{folder}/rendezvous", 0, backend="gloo")
    initialize_model_parallel(1, 1)
    _distributed["ready"] = True


@dataclasses.dataclass
class KvState:
    block_tables: Any
    kv_cache_config: Any
    group_id: int
    attn_groups: Any  # the runner's (target) attention groups


def set_up_kv_cache(config: Any, speculator: Any, num_blocks_per_req: int) -> KvState:
    """What `GPUModelRunner.initialize_kv_cache` does for the speculator, rebuilt by hand."""
    import torch
    from vllm.config.compilation import CUDAGraphMode
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_kv_cache_config_from_groups, get_kv_cache_groups
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec, init_attn_backend, init_kv_cache
    from vllm.v1.worker.gpu.block_table import BlockTables
    from vllm.v1.worker.gpu.input_batch import InputBuffers

    device = torch.device("cpu")
    specs = get_kv_cache_spec(config)
    layouts = [layout.name for layout in get_supported_kv_cache_layouts(get_current_attn_backends(config))]
    resolve_kv_cache_layout(config, [layouts], list(specs.values()))
    groups = get_kv_cache_groups(config, specs)
    page_bytes = max(spec.page_size_bytes for spec in specs.values())
    max_num_seqs = config.scheduler_config.max_num_seqs
    num_blocks = 1 + max_num_seqs * num_blocks_per_req  # block 0 is the null block
    kv_cache_config = get_kv_cache_config_from_groups(config, groups, num_blocks * page_bytes * len(specs))
    assert kv_cache_config.num_blocks >= num_blocks, (kv_cache_config.num_blocks, num_blocks)
    attn_groups, _, kernel_block_sizes = init_attn_backend(
        kv_cache_config, config, device, draft_layer_names=speculator.draft_attn_layer_names
    )
    block_tables = BlockTables(
        block_sizes=[group.kv_cache_spec.block_size for group in kv_cache_config.kv_cache_groups],
        max_num_reqs=max_num_seqs,
        max_num_batched_tokens=config.scheduler_config.max_num_batched_tokens,
        max_num_blocks_per_group=[num_blocks_per_req] * len(kv_cache_config.kv_cache_groups),
        device=device,
    )
    target_buffers = InputBuffers(max_num_seqs, config.scheduler_config.max_num_batched_tokens, device)
    # No model state: the speculator stores it, and nothing on the DFlash path reads it.
    speculator.set_attn(None, kv_cache_config, block_tables, target_buffers, attn_groups)
    speculator.init_cudagraph_manager(CUDAGraphMode.NONE)
    init_kv_cache(
        config.compilation_config.static_forward_context,
        kv_cache_config,
        device,
        kernel_block_sizes,
        config,
        block_tables=block_tables,
        attn_groups=(group for groups in attn_groups + speculator.attn_groups for group in groups),
    )
    return KvState(block_tables, kv_cache_config, speculator.draft_kv_cache_group_id, attn_groups)


@dataclasses.dataclass
class Row:
    """One request's part of the target batch vLLM just ran, and what the runner tells `propose()`
    about it: how many of those tokens the target rejected, how many it sampled, the last one."""

    tokens: list[int]
    positions: list[int]
    state_index: int  # vLLM's req_state_idx (not the batch row, on purpose)
    block_ids: list[int]
    num_rejected: int = 0
    num_sampled: int = 1  # the accepted drafts and the bonus token (the first token after a prompt)
    bonus: int = 0

    @property
    def anchor_position(self) -> int:
        """Where the bonus token goes: right after the last target token that was kept."""
        return self.positions[-1] + 1 - self.num_rejected


def write_block_tables(kv: KvState, rows: list[Row]) -> None:
    """The forward pass's block tables, one row per batch row (vLLM gathers them with a kernel
    that follows raw pointers, which the interpreter does not)."""
    import torch

    table = kv.block_tables.input_block_tables[kv.group_id]
    table.zero_()
    for batch_row, row in enumerate(rows):
        table[batch_row, : len(row.block_ids)] = torch.tensor(row.block_ids, dtype=torch.int32)


def make_input_batch(rows: list[Row], buffers: Any) -> Any:
    """The target batch of this step as vLLM's runner hands it to `propose()`."""
    import numpy as np
    import torch
    from vllm.v1.worker.gpu.input_batch import InputBatch

    num_tokens = sum(len(r.tokens) for r in rows)
    batch = InputBatch.make_dummy(len(rows), num_tokens, buffers, is_padding=False)
    scheduled = np.array([len(r.tokens) for r in rows], dtype=np.int32)
    query_start_loc = np.concatenate([[0], np.cumsum(scheduled)]).astype(np.int32)
    # The target's sequence length after this step, before any rejection: an upper bound.
    seq_lens = np.array([r.positions[-1] + 1 for r in rows], dtype=np.int32)
    state_indices = np.array([r.state_index for r in rows], dtype=np.intp)
    return dataclasses.replace(
        batch,
        idx_mapping=torch.from_numpy(state_indices.astype(np.int64)),
        idx_mapping_np=state_indices,
        expanded_idx_mapping=torch.from_numpy(state_indices.astype(np.int64)),
        num_scheduled_tokens=scheduled,
        query_start_loc=torch.from_numpy(query_start_loc.copy()),
        query_start_loc_np=query_start_loc,
        positions=torch.tensor([p for r in rows for p in r.positions], dtype=torch.int64),
        input_ids=torch.tensor([t for r in rows for t in r.tokens], dtype=torch.int32),
        seq_lens=torch.from_numpy(seq_lens.copy()),
        seq_lens_cpu_upper_bound=torch.from_numpy(seq_lens.copy()),
    )


def propose(speculator: Any, rows: list[Row], buffers: Any, hidden: Any, aux: list[Any]) -> list[list[int]]:
    """vLLM's `propose()` after the target ran `rows`, greedy: the K draft tokens of each row."""
    import torch

    max_num_reqs = speculator.max_num_reqs
    last_sampled = torch.zeros(max_num_reqs, 1, dtype=torch.int64)
    for row in rows:
        last_sampled[row.state_index, 0] = row.bonus
    drafts = speculator.propose(
        make_input_batch(rows, buffers),
        {},  # the target's attention metadata: DFlash builds its own
        {},
        hidden,
        aux,
        torch.tensor([r.num_sampled for r in rows], dtype=torch.int32),
        torch.tensor([r.num_rejected for r in rows], dtype=torch.int32),
        last_sampled,
        torch.zeros(max_num_reqs, dtype=torch.int32),  # next prefill tokens: no chunked prefill here
        torch.zeros(max_num_reqs, dtype=torch.float32),  # temperature 0: greedy
        torch.zeros(max_num_reqs, dtype=torch.int64),  # seeds
    )
    result: list[list[int]] = drafts[: len(rows)].tolist()
    return result


def kernel_outputs(speculator: Any, kv: KvState, num_target_tokens: int) -> dict[str, list[Any]]:
    """The buffers `_prepare_dflash_inputs_kernel` writes, as `propose()` left them."""
    buffers = speculator.input_buffers
    num_sample_slots = speculator.max_num_reqs * speculator.num_speculative_steps
    return {
        "input_ids": buffers.input_ids.tolist(),
        "positions": buffers.positions.tolist(),
        "is_padding": buffers.is_padding.tolist(),
        "query_start_loc": buffers.query_start_loc.tolist(),
        "seq_lens": buffers.seq_lens.tolist(),
        "query_slot_mapping": kv.block_tables.slot_mappings[kv.group_id].tolist(),
        "context_positions": speculator.context_positions[:num_target_tokens].tolist(),
        "context_slot_mapping": speculator._context_slot_mappings[0][:num_target_tokens].tolist(),
        "sample_indices": speculator.sample_indices[:num_sample_slots].tolist(),
        "sample_pos": speculator.sample_pos[:num_sample_slots].tolist(),
        "sample_idx_mapping": speculator.sample_idx_mapping[:num_sample_slots].tolist(),
    }


def run_case(name: str, case: dict[str, Any], plan: dict[str, Any], folder: Path) -> dict[str, Any]:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.v1.worker.gpu.input_batch import InputBuffers
    from vllm.v1.worker.gpu.spec_decode import init_speculator

    started = time.perf_counter()
    out: dict[str, Any] = {}
    max_num_seqs = plan["max_num_seqs"]
    config = build_config(case, max_num_seqs)
    out["num_lookahead_tokens"] = config.num_lookahead_tokens
    cpu = torch.device("cpu")
    with set_current_vllm_config(config):
        init_single_process_group(folder)
        target_model = get_model_loader(config.load_config).load_model(
            vllm_config=config, model_config=config.model_config
        )
        try:
            speculator = init_speculator(config, cpu, None)  # req_states: n-gram only
        except Exception as exc:
            out["speculator_error"] = _error(exc)
            return out
        speculator.load_model(target_model)
        out["speculator"] = {
            "class": type(speculator).__name__,
            "num_query_per_req": speculator.num_query_per_req,
            "sample_from_anchor": speculator.sample_from_anchor,
            "num_speculative_steps": speculator.num_speculative_steps,
            "mask_token_id": speculator.parallel_drafting_token_id,
            "max_num_reqs": speculator.max_num_reqs,
            "max_num_tokens": speculator.max_num_tokens,
        }
        layers = speculator.model.model.layers
        if hasattr(layers[0], "attention_conv"):
            out["conv_block_sizes"] = [[layer.attention_conv.block_size, layer.mlp_conv.block_size] for layer in layers]
        kv = set_up_kv_cache(config, speculator, plan["num_blocks_per_req"])
        out["kv_block_size"] = kv.block_tables.block_sizes[kv.group_id]
        buffers = InputBuffers(max_num_seqs, MAX_NUM_BATCHED_TOKENS, cpu)
        out["steps"] = run_steps(case, plan, speculator, kv, buffers)
        if name in plan.get("generate", {}).get("cases", []):
            generation_started = time.perf_counter()
            out["generation"] = generate(config, case, plan, target_model, speculator, kv, buffers)
            out["generation"]["seconds"] = round(time.perf_counter() - generation_started, 2)
    out["seconds"] = round(time.perf_counter() - started, 2)
    return out


def load_reference(case: dict[str, Any], num_requests: int) -> tuple[Any, list[Any], list[int]]:
    """The torch reference engine's draft (float32, same files) and one target per request (each
    keeps its own KV cache), and the hidden-state indices the draft reads from the target."""
    import torch

    from dflash_tools.reference_engine import weights
    from dflash_tools.reference_engine.draft import DraftModel
    from dflash_tools.reference_engine.target import load_target

    cpu = torch.device("cpu")
    targets = [
        load_target(case["target"], device=cpu, dtype=torch.float32, implementation="builtin")
        for _ in range(num_requests)
    ]
    checkpoint = weights.load_draft(case["draft"], revision=None, overrides={})
    draft = DraftModel(
        checkpoint.description,
        checkpoint.tensors,
        target_embeddings=targets[0].embedding_weight(),
        target_lm_head=targets[0].lm_head_weight(),
        device=cpu,
        dtype=torch.float32,
        use_selector=True if case["algorithm"] == "dflash2" else None,
    )
    capture = [layer + 1 for layer in draft.desc.target_layer_ids]
    return draft, targets, capture


def run_steps(
    case: dict[str, Any], plan: dict[str, Any], speculator: Any, kv: KvState, buffers: Any
) -> list[dict[str, Any]]:
    """`plan["steps"]` calls of `propose()` for the plan's requests, each followed by a greedy
    verification of vLLM's drafts by the reference target, whose hidden states both drafters read."""
    import torch

    k, sample_from_anchor = case["k"], case["sample_from_anchor"]
    prompts: list[list[int]] = plan["prompts"]
    draft, targets, capture = load_reference(case, len(prompts))
    draft_states = [draft.new_state() for _ in prompts]
    rows, captured = [], []
    for index, prompt in enumerate(prompts):
        # The prompt through the target; its hidden states are the draft's first context.
        logits, hidden = targets[index].forward(prompt, capture)
        draft.append_context(draft_states[index], hidden, torch.arange(len(prompt)))
        rows.append(
            Row(
                tokens=list(prompt),
                positions=list(range(len(prompt))),
                state_index=plan["state_indices"][index],
                block_ids=plan["block_ids"][index],
                bonus=int(logits[-1].argmax()),
            )
        )
        captured.append(hidden)
    write_block_tables(kv, rows)

    steps = []
    for _ in range(plan["steps"]):
        states = torch.cat(captured)
        started = time.perf_counter()
        drafts = propose(
            speculator,
            rows,
            buffers,
            torch.zeros(states.shape[0], speculator.hidden_size),  # unused when auxiliary states are given
            list(states.split(states.shape[1] // len(capture), dim=1)),
        )
        propose_seconds = time.perf_counter() - started
        step: dict[str, Any] = {
            "target": {
                "positions": [r.positions for r in rows],
                "num_rejected": [r.num_rejected for r in rows],
                "bonus": [r.bonus for r in rows],
                "state_index": [r.state_index for r in rows],
                "block_ids": [r.block_ids for r in rows],
            },
            "kernel": kernel_outputs(speculator, kv, states.shape[0]),
            "drafts": drafts,
            "reference": [
                draft.propose(state, row.bonus, row.anchor_position, k, sample_from_anchor)
                for state, row in zip(draft_states, rows, strict=True)
            ],
            "propose_seconds": round(propose_seconds, 3),
        }
        step["accepted"] = []
        for index, row in enumerate(rows):
            rows[index], captured[index], accepted = verify(
                row, drafts[index], targets[index], draft, draft_states[index], capture
            )
            step["accepted"].append(accepted)
        steps.append(step)
    return steps


def verify(
    row: Row, proposed: list[int], target: Any, draft: Any, draft_state: Any, capture: list[int]
) -> tuple[Row, Any, int]:
    """Greedy verification of `proposed` by the reference target; the accepted tokens and the
    anchor join the reference draft's context. Returns the next step's row, the target's hidden
    states for it (rejected tokens included, as vLLM's target hands them over) and the count."""
    import torch

    anchor, position = row.bonus, row.anchor_position
    logits, captured = target.forward([anchor, *proposed], capture)
    greedy = logits.argmax(dim=-1).tolist()
    accepted = 0
    while accepted < len(proposed) and proposed[accepted] == greedy[accepted]:
        accepted += 1
    target.crop(position + accepted + 1)
    draft.append_context(draft_state, captured[: accepted + 1], torch.arange(position, position + accepted + 1))
    following = Row(
        tokens=[anchor, *proposed],
        positions=list(range(position, position + len(proposed) + 1)),
        state_index=row.state_index,
        block_ids=row.block_ids,
        num_rejected=len(proposed) - accepted,
        num_sampled=accepted + 1,
        bonus=int(greedy[accepted]),
    )
    return following, captured, accepted


def slot(position: int, block_ids: list[int], block_size: int) -> int:
    return block_ids[position // block_size] * block_size + position % block_size


def target_forward(config: Any, target_model: Any, kv: KvState, rows: list[Row]) -> tuple[Any, list[Any]]:
    """vLLM's target model over the batch `rows`, eager, with its KV cache: hidden states
    [tokens, H] and the auxiliary layers the draft reads."""
    import torch
    from vllm.forward_context import set_forward_context
    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata, build_slot_mappings_by_layer

    block_size = kv.block_tables.block_sizes[kv.group_id]
    lengths = [len(r.tokens) for r in rows]
    num_tokens = sum(lengths)
    query_start_loc = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    positions = torch.tensor([p for r in rows for p in r.positions], dtype=torch.int64)
    seq_lens = torch.tensor([r.positions[-1] + 1 for r in rows], dtype=torch.int32)
    # The slot of each token, as the runner's _compute_slot_mappings_kernel computes it (that
    # kernel reads block tables through raw pointers, which the interpreter does not follow).
    slots = torch.full((len(kv.kv_cache_config.kv_cache_groups), num_tokens), -1, dtype=torch.int64)
    slots[kv.group_id] = torch.tensor([slot(p, r.block_ids, block_size) for r in rows for p in r.positions])
    metadata = build_attn_metadata(
        attn_groups=kv.attn_groups,
        num_reqs=len(rows),
        num_tokens=num_tokens,
        query_start_loc_gpu=query_start_loc,
        query_start_loc_cpu=query_start_loc.clone(),
        max_query_len=max(lengths),
        seq_lens=seq_lens,
        max_seq_len=int(seq_lens.max()),
        block_tables=[table[: len(rows)] for table in kv.block_tables.input_block_tables],
        slot_mappings=slots,
        kv_cache_config=kv.kv_cache_config,
        seq_lens_cpu_upper_bound=seq_lens.clone(),
        positions=positions,
        causal=True,
    )
    with set_forward_context(
        metadata, config, num_tokens=num_tokens, slot_mapping=build_slot_mappings_by_layer(slots, kv.kv_cache_config)
    ):
        hidden, aux = target_model(
            input_ids=torch.tensor([t for r in rows for t in r.tokens], dtype=torch.int32),
            positions=positions,
        )
    return hidden, list(aux)


def greedy_verification(
    logits: Any, rows: list[Row], prefill: bool, k: int, prefill_len: Any, max_num_reqs: int
) -> tuple[list[list[int]], list[int]]:
    """vLLM's `gather_draft_sampled` and `rejection_sample` at temperature 0 over the target's
    logits (the last prompt position after a prefill, all K + 1 positions after a draft step):
    the tokens each row keeps (accepted drafts, then the target's own token)."""
    import torch
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler import gather_draft_sampled
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import rejection_sample

    per_row = 1 if prefill else k + 1
    starts = [sum(len(r.tokens) for r in rows[:i]) for i in range(len(rows))]
    if prefill:
        indices = [start + len(row.tokens) - 1 for start, row in zip(starts, rows, strict=True)]
    else:
        indices = [start + j for start in starts for j in range(per_row)]
    local = torch.tensor([j for _ in rows for j in range(per_row)], dtype=torch.int32)
    state_of_logit = torch.tensor([r.state_index for r in rows for _ in range(per_row)])
    draft_sampled, positions = gather_draft_sampled(
        torch.tensor([t for r in rows for t in r.tokens], dtype=torch.int32),
        torch.tensor([p for r in rows for p in r.positions], dtype=torch.int64),
        torch.tensor(indices, dtype=torch.int64),
        state_of_logit,
        local,
        prefill_len,
    )
    sampled, num_sampled = rejection_sample(
        logits[torch.tensor(indices)].float().contiguous(),
        None,
        draft_sampled,
        torch.arange(len(rows) + 1, dtype=torch.int32) * per_row,
        positions,
        torch.tensor([r.state_index for r in rows], dtype=torch.int64),
        state_of_logit,
        local,
        torch.zeros(max_num_reqs, dtype=torch.float32),  # temperature 0: greedy
        torch.zeros(max_num_reqs, dtype=torch.int64),
        k,
    )
    counts = num_sampled.tolist()
    return [sampled[i, : counts[i]].tolist() for i in range(len(rows))], counts


def generate(
    config: Any,
    case: dict[str, Any],
    plan: dict[str, Any],
    target_model: Any,
    speculator: Any,
    kv: KvState,
    buffers: Any,
) -> dict[str, Any]:
    """Greedy speculative decoding through vLLM's pieces: its target forward (TRITON_ATTN, KV
    cache, auxiliary hidden states), greedy `rejection_sample`, `propose()`.

    Harness: the scheduler's part (which requests run, their tokens, positions and blocks, when a
    request is done) and the counting, done the way `dflash_tools.reference_engine.loop` does it so that the
    figures compare with the torch engine's: a request stops once `max_tokens` are out (cut there);
    each verification step is one draft; accepted tokens are counted per position.
    """
    import torch
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import set_eagle3_aux_hidden_state_layers

    k, max_tokens = case["k"], plan["generate"]["max_tokens"]
    set_eagle3_aux_hidden_state_layers(target_model, config.speculative_config)
    max_num_reqs = speculator.max_num_reqs
    requests: list[int] = plan["generate"]["requests"]  # which of the scenario's requests
    prefill_len = torch.zeros(max_num_reqs, dtype=torch.int32)
    rows: dict[int, Row] = {}
    for index, request in enumerate(requests):
        prompt, state = plan["prompts"][request], plan["state_indices"][request]
        prefill_len[state] = len(prompt)
        rows[index] = Row(list(prompt), list(range(len(prompt))), state, plan["block_ids"][request])
    outputs: list[list[int]] = [[] for _ in requests]
    accepted_per_position = [0] * k
    num_drafts = num_steps = 0
    prefill = True
    while rows:
        num_steps += 1
        batch = list(rows.values())
        write_block_tables(kv, batch)
        hidden, aux = target_forward(config, target_model, kv, batch)
        logits = target_model.compute_logits(hidden)
        kept, counts = greedy_verification(logits, batch, prefill, k, prefill_len, max_num_reqs)
        done = []
        for index, row, tokens, count in zip(list(rows), batch, kept, counts, strict=True):
            if not prefill:
                num_drafts += 1
                for position in range(count - 1):
                    accepted_per_position[position] += 1
            row.num_sampled, row.bonus = count, tokens[-1]
            row.num_rejected = 0 if prefill else k + 1 - count
            room = max_tokens - len(outputs[index])
            outputs[index] += tokens[:room]
            if len(tokens) >= room:
                done.append(index)
        # vLLM proposes for the whole batch it just verified, finished requests included.
        drafts = propose(speculator, batch, buffers, hidden, aux)
        for index, row, proposed in zip(list(rows), batch, drafts, strict=True):
            if index in done:
                del rows[index]
                continue
            anchor = row.anchor_position
            rows[index] = Row(
                [row.bonus, *proposed], list(range(anchor, anchor + k + 1)), row.state_index, row.block_ids
            )
        prefill = False
    return {
        "outputs": outputs,
        "num_drafts": num_drafts,
        "accepted_per_position": accepted_per_position,
        "num_steps": num_steps,
    }


def main() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("harness.py runs vLLM's Triton kernels on CPU: set TRITON_INTERPRET=1")
    import torch

    torch.set_num_threads(1)  # tiny matrices: one thread is faster, and CI has two cores
    plan_file = Path(sys.argv[1]).resolve()
    plan = json.loads(plan_file.read_text(encoding="utf-8"))
    vllm_version = version("vllm")
    applied = []
    for workaround in workarounds.for_version(vllm_version):
        missing = {k: v for k, v in workaround.env.items() if os.environ.get(k) != v}
        if missing:
            raise SystemExit(f"work-around {workaround.name} needs {missing} set before vLLM is imported")
        if workaround.patch is not None:
            workaround.patch()
        applied.append(workaround.name)
    import psutil
    from vllm.config.speculative import SpeculativeConfig

    results: dict[str, Any] = {}
    for name, case in plan["cases"].items():
        try:
            results[name] = run_case(name, case, plan, plan_file.parent)
        except Exception as exc:  # one case failing must not hide the others
            results[name] = {"error": _error(exc), "traceback": traceback.format_exc()}
    document = {
        "vllm_version": vllm_version,
        "workarounds": applied,
        "plugin": getattr(SpeculativeConfig, "_dflash_tools_patch", None),
        "cases": results,
        "seconds": round(time.time() - psutil.Process().create_time(), 1),  # imports included
        "cpu_seconds": round(sum(resource.getrusage(resource.RUSAGE_SELF)[:2]), 1),
    }
    print(json.dumps(document))


if __name__ == "__main__":
    main()
