"""Child process of the V2 tier: run vLLM's V2 DFlash / DFlash2 speculator on CPU, step by step.

Run as `python harness.py CASES.json` under `TRITON_INTERPRET=1` (the parent, conftest.py, sets
the environment). Prints one JSON document: per case, what vLLM's speculator was (or the error
that refused it), and for each step the tensors its input kernel built, the draft tokens
`propose()` returned and the torch reference engine's draft tokens for the same context.

What is vLLM's and what is this harness's:

- vLLM's (0.33.0 as installed, patched by our plugin when vLLM's plugin loader registers it):
  `EngineArgs(...).create_engine_config()`, the target model and its weight loader (the draft
  shares its embeddings and LM head), `init_speculator`, `DFlashSpeculator` / `DFlash2Speculator`
  with `load_model`, `set_attn`, `init_cudagraph_manager` and `propose()` (its Triton kernels
  `_prepare_dflash_inputs_kernel`, TRITON_ATTN's attention and cache-write kernels, DFlash2's
  `_selector_walk_kernel`, all run by Triton's interpreter), the draft models
  (`qwen3_dflash.py`, `qwen3_dflash2.py`), the KV-cache spec, grouping, layout and allocation
  functions, `BlockTables`, `InputBuffers`, `InputBatch`.
- The harness's: the named work-arounds of `workarounds.py`; the steps of
  `GPUModelRunner.initialize_kv_cache` that set the KV cache up, rebuilt by hand (the runner
  itself needs CUDA streams); block tables written straight into `input_block_tables` (vLLM's
  gather kernel reads raw pointers); the target batch (`InputBatch`) and the scheduler's
  bookkeeping (`num_rejected`, `last_sampled`) built here; the target's hidden states and the
  greedy verification come from the torch reference engine's target (`dflash_tools.engine`,
  float32, same weights), so both drafters see exactly the same context.
"""

from __future__ import annotations

import dataclasses
import json
import os
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
    from vllm.config.compilation import CUDAGraphMode

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
class Request:
    """One request of the batch: its reference target (own KV cache) and reference draft state."""

    prompt: list[int]
    state_index: int  # vLLM's req_state_idx (not the batch row, on purpose)
    block_ids: list[int]
    target: Any
    draft_state: Any
    # The target batch this request contributed to the last step, and what it left to draft from.
    tokens: list[int] = dataclasses.field(default_factory=list)
    positions: list[int] = dataclasses.field(default_factory=list)
    captured: Any = None
    num_rejected: int = 0
    num_sampled: int = 1  # tokens the target sampled for it last step: the accepted drafts and the bonus
    bonus: int = 0
    anchor_position: int = 0
    output: list[int] = dataclasses.field(default_factory=list)


def load_reference(case: dict[str, Any], num_requests: int) -> tuple[Any, list[Any], list[int]]:
    import torch

    from dflash_tools.engine import weights
    from dflash_tools.engine.draft import DraftModel
    from dflash_tools.engine.target import load_target

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


def make_input_batch(requests: list[Request], buffers: Any) -> Any:
    """The target batch of this step as vLLM's runner hands it to `propose()`."""
    import numpy as np
    import torch
    from vllm.v1.worker.gpu.input_batch import InputBatch

    num_tokens = sum(len(r.tokens) for r in requests)
    batch = InputBatch.make_dummy(len(requests), num_tokens, buffers, is_padding=False)
    scheduled = np.array([len(r.tokens) for r in requests], dtype=np.int32)
    query_start_loc = np.concatenate([[0], np.cumsum(scheduled)]).astype(np.int32)
    # The target's sequence length after this step, before any rejection: an upper bound.
    seq_lens = np.array([r.positions[-1] + 1 for r in requests], dtype=np.int32)
    state_indices = np.array([r.state_index for r in requests], dtype=np.intp)
    return dataclasses.replace(
        batch,
        idx_mapping=torch.from_numpy(state_indices.astype(np.int64)),
        idx_mapping_np=state_indices,
        expanded_idx_mapping=torch.from_numpy(state_indices.astype(np.int64)),
        num_scheduled_tokens=scheduled,
        query_start_loc=torch.from_numpy(query_start_loc.copy()),
        query_start_loc_np=query_start_loc,
        positions=torch.tensor([p for r in requests for p in r.positions], dtype=torch.int64),
        input_ids=torch.tensor([t for r in requests for t in r.tokens], dtype=torch.int32),
        seq_lens=torch.from_numpy(seq_lens.copy()),
        seq_lens_cpu_upper_bound=torch.from_numpy(seq_lens.copy()),
    )


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


def run_case(case: dict[str, Any], plan: dict[str, Any], folder: Path) -> dict[str, Any]:
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
        if plan.get("generate"):
            generation_started = time.perf_counter()
            out["generation"] = generate(config, case, plan, target_model, speculator, kv, buffers)
            out["generation"]["seconds"] = round(time.perf_counter() - generation_started, 2)
    out["seconds"] = round(time.perf_counter() - started, 2)
    return out


def run_steps(
    case: dict[str, Any], plan: dict[str, Any], speculator: Any, kv: KvState, buffers: Any
) -> list[dict[str, Any]]:
    import torch

    k, sample_from_anchor = case["k"], case["sample_from_anchor"]
    prompts: list[list[int]] = plan["prompts"]
    draft, targets, capture = load_reference(case, len(prompts))
    requests = [
        Request(
            prompt=prompt,
            state_index=plan["state_indices"][row],
            block_ids=plan["block_ids"][row],
            target=targets[row],
            draft_state=draft.new_state(),
        )
        for row, prompt in enumerate(prompts)
    ]
    for row, request in enumerate(requests):
        table = kv.block_tables.input_block_tables[kv.group_id]
        table[row, : len(request.block_ids)] = torch.tensor(request.block_ids, dtype=torch.int32)
        # Prefill: the whole prompt through the target; its hidden states are the draft's context.
        logits, captured = request.target.forward(request.prompt, capture)
        draft.append_context(request.draft_state, captured, torch.arange(len(request.prompt)))
        request.tokens, request.positions = list(request.prompt), list(range(len(request.prompt)))
        request.captured, request.num_rejected = captured, 0
        request.bonus = int(logits[-1].argmax())
        request.anchor_position = len(request.prompt)
        request.output = [request.bonus]

    max_num_reqs = speculator.max_num_reqs
    hidden_size = speculator.hidden_size
    steps = []
    for _ in range(plan["steps"]):
        batch = make_input_batch(requests, buffers)
        captured = torch.cat([r.captured for r in requests])
        last_sampled = torch.zeros(max_num_reqs, 1, dtype=torch.int64)
        for request in requests:
            last_sampled[request.state_index, 0] = request.bonus
        num_rejected = torch.tensor([r.num_rejected for r in requests], dtype=torch.int32)
        num_sampled = torch.tensor([r.num_sampled for r in requests], dtype=torch.int32)
        started = time.perf_counter()
        drafts = speculator.propose(
            batch,
            {},  # the target's attention metadata: DFlash builds its own
            {},
            torch.zeros(batch.num_tokens, hidden_size),  # last hidden states: unused when aux states are given
            list(captured.split(captured.shape[1] // len(capture), dim=1)),
            num_sampled,
            num_rejected,
            last_sampled,
            torch.zeros(max_num_reqs, dtype=torch.int32),  # next prefill tokens: no chunked prefill here
            torch.zeros(max_num_reqs, dtype=torch.float32),  # temperature 0: greedy
            torch.zeros(max_num_reqs, dtype=torch.int64),
        )[: len(requests)].tolist()
        propose_seconds = time.perf_counter() - started
        step: dict[str, Any] = {
            "target": {
                "positions": [r.positions for r in requests],
                "num_rejected": [r.num_rejected for r in requests],
                "bonus": [r.bonus for r in requests],
                "state_index": [r.state_index for r in requests],
                "block_ids": [r.block_ids for r in requests],
            },
            "kernel": kernel_outputs(speculator, kv, batch.num_tokens),
            "drafts": drafts,
            "reference": [
                draft.propose(r.draft_state, r.bonus, r.anchor_position, k, sample_from_anchor) for r in requests
            ],
            "propose_seconds": round(propose_seconds, 3),
        }
        step["accepted"] = [verify(request, proposed, draft, capture) for request, proposed in zip(requests, drafts)]
        steps.append(step)
    return steps


def verify(request: Request, proposed: list[int], draft: Any, capture: list[int]) -> int:
    """Greedy verification by the reference target; commits the accepted tokens and the bonus."""
    import torch

    anchor, position = request.bonus, request.anchor_position
    logits, captured = request.target.forward([anchor, *proposed], capture)
    greedy = logits.argmax(dim=-1).tolist()
    accepted = 0
    while accepted < len(proposed) and proposed[accepted] == greedy[accepted]:
        accepted += 1
    request.target.crop(position + accepted + 1)
    draft.append_context(request.draft_state, captured[: accepted + 1], torch.arange(position, position + accepted + 1))
    request.tokens = [anchor, *proposed]
    request.positions = list(range(position, position + len(proposed) + 1))
    request.captured = captured
    request.num_rejected = len(proposed) - accepted
    request.num_sampled = accepted + 1
    request.bonus = int(greedy[accepted])
    request.anchor_position = position + accepted + 1
    request.output += [*proposed[:accepted], request.bonus]
    return accepted


def slot(position: int, block_ids: list[int], block_size: int) -> int:
    return block_ids[position // block_size] * block_size + position % block_size


def target_forward(
    config: Any, target_model: Any, kv: KvState, rows: list[tuple[list[int], list[int], list[int]]]
) -> tuple[Any, list[Any]]:
    """vLLM's target model over the batch `rows` (tokens, positions, block ids), eager, with its
    KV cache: hidden states [tokens, H] and the auxiliary layers the draft reads."""
    import torch
    from vllm.forward_context import set_forward_context
    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata, build_slot_mappings_by_layer

    block_size = kv.block_tables.block_sizes[kv.group_id]
    lengths = [len(tokens) for tokens, _, _ in rows]
    num_tokens = sum(lengths)
    query_start_loc = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    positions = torch.tensor([p for _, ps, _ in rows for p in ps], dtype=torch.int64)
    seq_lens = torch.tensor([ps[-1] + 1 for _, ps, _ in rows], dtype=torch.int32)
    # The slot of each token, as the runner's _compute_slot_mappings_kernel computes it (that
    # kernel reads block tables through raw pointers, which the interpreter does not follow).
    slots = torch.full((len(kv.kv_cache_config.kv_cache_groups), num_tokens), -1, dtype=torch.int64)
    slots[kv.group_id] = torch.tensor([slot(p, ids, block_size) for _, ps, ids in rows for p in ps])
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
            input_ids=torch.tensor([t for tokens, _, _ in rows for t in tokens], dtype=torch.int32),
            positions=positions,
        )
    return hidden, list(aux)


def generate(
    config: Any, case: dict[str, Any], plan: dict[str, Any], target_model: Any, speculator: Any, kv: KvState, buffers: Any
) -> dict[str, Any]:
    """Greedy speculative decoding through vLLM's pieces: its target forward (TRITON_ATTN, KV
    cache), `rejection_sample` with temperature 0 (its greedy verification kernels), `propose()`.

    Harness: the scheduler's part (which requests run, their tokens and positions, block tables,
    when a request is done) and counting, the way `dflash_tools.engine.loop` counts, so that the
    figures compare with the torch engine's: per request, stop once `max_tokens` are out (cut
    there), count each verification step as one draft, accepted tokens per position.
    """
    import torch
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import set_eagle3_aux_hidden_state_layers
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler import gather_draft_sampled
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import rejection_sample

    k = case["k"]
    max_tokens = plan["generate"]["max_tokens"]
    set_eagle3_aux_hidden_state_layers(target_model, config.speculative_config)
    prompts: list[list[int]] = plan["prompts"]
    states: list[int] = plan["state_indices"]
    max_num_reqs = speculator.max_num_reqs
    prefill_len = torch.zeros(max_num_reqs, dtype=torch.int32)
    for row, prompt in enumerate(prompts):
        prefill_len[states[row]] = len(prompt)
    # The new request of each row reuses the KV blocks of the scenario's requests.
    outputs: list[list[int]] = [[] for _ in prompts]
    accepted_per_position = [0] * k
    num_drafts = 0
    alive = list(range(len(prompts)))
    pending = {row: (list(prompts[row]), list(range(len(prompts[row])))) for row in alive}
    prefill = True
    num_steps = 0
    while alive:
        num_steps += 1
        table = kv.block_tables.input_block_tables[kv.group_id]
        table.zero_()
        for batch_row, row in enumerate(alive):
            ids = plan["block_ids"][row]
            table[batch_row, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
        rows = [(*pending[row], plan["block_ids"][row]) for row in alive]
        hidden, aux = target_forward(config, target_model, kv, rows)
        lengths = [len(tokens) for tokens, _, _ in rows]
        starts = [sum(lengths[:i]) for i in range(len(rows))]
        if prefill:
            logits_indices = [start + length - 1 for start, length in zip(starts, lengths)]
            local = [0] * len(rows)
            cu_num_logits = list(range(len(rows) + 1))
        else:
            logits_indices = [start + j for start in starts for j in range(k + 1)]
            local = [j for _ in rows for j in range(k + 1)]
            cu_num_logits = [i * (k + 1) for i in range(len(rows) + 1)]
        logits = target_model.compute_logits(hidden[torch.tensor(logits_indices)]).float().contiguous()
        state_of_logit = torch.tensor([states[row] for row in alive for _ in range(1 if prefill else k + 1)])
        input_ids = torch.tensor([t for tokens, _, _ in rows for t in tokens], dtype=torch.int32)
        positions = torch.tensor([p for _, ps, _ in rows for p in ps], dtype=torch.int64)
        draft_sampled, logit_positions = gather_draft_sampled(
            input_ids,
            positions,
            torch.tensor(logits_indices, dtype=torch.int64),
            state_of_logit,
            torch.tensor(local, dtype=torch.int32),
            prefill_len,
        )
        sampled, num_sampled = rejection_sample(
            logits,
            None,
            draft_sampled,
            torch.tensor(cu_num_logits, dtype=torch.int32),
            logit_positions,
            torch.tensor([states[row] for row in alive], dtype=torch.int64),
            state_of_logit,
            torch.tensor(local, dtype=torch.int32),
            torch.zeros(max_num_reqs, dtype=torch.float32),
            torch.zeros(max_num_reqs, dtype=torch.int64),
            k,
        )
        num_sampled_list = num_sampled.tolist()
        finished = []
        last_sampled = torch.zeros(max_num_reqs, 1, dtype=torch.int64)
        for batch_row, row in enumerate(alive):
            new = sampled[batch_row, : num_sampled_list[batch_row]].tolist()
            if not prefill:
                num_drafts += 1
                for position in range(len(new) - 1):
                    accepted_per_position[position] += 1
            last_sampled[states[row], 0] = new[-1]
            for token in new:
                outputs[row].append(token)
                if len(outputs[row]) >= max_tokens:
                    finished.append(row)
                    break
        num_rejected = [0 if prefill else k + 1 - n for n in num_sampled_list]
        batch_rows = [(list(tokens), list(ps)) for tokens, ps, _ in rows]
        for batch_row, row in enumerate(alive):
            pending[row] = batch_rows[batch_row]
        requests = [
            Request(prompt=prompts[row], state_index=states[row], block_ids=plan["block_ids"][row], target=None,
                    draft_state=None, tokens=pending[row][0], positions=pending[row][1],
                    num_rejected=num_rejected[batch_row], num_sampled=num_sampled_list[batch_row])
            for batch_row, row in enumerate(alive)
        ]
        # vLLM proposes for the whole batch it just verified, finished requests included.
        drafts = speculator.propose(
            make_input_batch(requests, buffers),
            {},
            {},
            hidden,
            aux,
            num_sampled,
            torch.tensor(num_rejected, dtype=torch.int32),
            last_sampled,
            torch.zeros(max_num_reqs, dtype=torch.int32),
            torch.zeros(max_num_reqs, dtype=torch.float32),
            torch.zeros(max_num_reqs, dtype=torch.int64),
        )[: len(alive)].tolist()
        next_alive = []
        for batch_row, row in enumerate(alive):
            if row in finished:
                continue
            bonus = int(last_sampled[states[row], 0])
            anchor_position = pending[row][1][-1] + 1 - num_rejected[batch_row]
            pending[row] = ([bonus, *drafts[batch_row]], list(range(anchor_position, anchor_position + k + 1)))
            next_alive.append(row)
        alive = next_alive
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
    from vllm.config.speculative import SpeculativeConfig

    results: dict[str, Any] = {}
    for name, case in plan["cases"].items():
        try:
            results[name] = run_case(case, plan, plan_file.parent)
        except Exception as exc:  # one case failing must not hide the others
            results[name] = {"error": _error(exc), "traceback": traceback.format_exc()}
    document = {
        "vllm_version": vllm_version,
        "workarounds": applied,
        "plugin": getattr(SpeculativeConfig, "_dflash_tools_patch", None),
        "cases": results,
    }
    print(json.dumps(document))


if __name__ == "__main__":
    main()
