"""`run_request`: one smoke-test request through the reference engine, one result document back."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from dflash_tools.draft.description import Algorithm
from dflash_tools.draft.geometry import layout_name
from dflash_tools.errors import TORCH_INSTALL_HINT, DflashToolsError, OperationError, UsageError
from dflash_tools.reference_engine import loop, ops, weights
from dflash_tools.reference_engine.draft import DraftModel
from dflash_tools.reference_engine.target import TargetModel, load_target, resolve_target_folder
from dflash_tools.smoke_contract import (
    SCHEMA_VERSION,
    ContractError,
    SmokeRequest,
    failed_result,
    mean_acceptance_length,
    more_repetitions,
    rates,
    timing_block,
    tokens_per_second,
    validate_request,
)

ENGINE = "torch"
SMALL_HIDDEN_SIZE = 1024
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
# engine_args the torch engine reads; anything else (vLLM's LLM kwargs) is reported as ignored.
ENGINE_ARGS = {
    "target_impl": "auto | builtin | transformers: how the target runs (auto: transformers when installed)",
    "ignore_eos": "keep generating past EOS (default false, as vLLM)",
    "trust_remote_code": "passed to transformers when loading the target and its tokenizer",
    "num_threads": "torch CPU threads (default: 1 for drafts up to hidden size 1024 on CPU, else torch's)",
    "warmup": "run one short untimed request first (default true)",
}


def run_request(request: dict[str, Any]) -> dict[str, Any]:
    try:
        checked = validate_request(request)
    except ContractError as exc:
        return dict(failed_result(ENGINE, str(exc)))
    try:
        return _run(checked)
    except DflashToolsError as exc:
        if os.environ.get("DFLASH_TOOLS_DEBUG"):
            traceback.print_exc(file=sys.stderr)
        message = exc.message + (f" ({exc.hint})" if exc.hint else "")
        return dict(failed_result(ENGINE, message))
    except Exception as exc:  # the child's log keeps the traceback; the result keeps one line
        traceback.print_exc(file=sys.stderr)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return dict(failed_result(ENGINE, f"{type(exc).__name__}: {first}"))


def _load_tokenizer(target_source: str, revision: str | None, trust_remote_code: bool) -> Any:
    """The target's tokenizer, or None (no transformers, or no tokenizer files: the demo)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    folder = resolve_target_folder(target_source)
    if folder is not None and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        # Recent transformers builds an empty tokenizer from a folder without any.
        return None
    try:
        return AutoTokenizer.from_pretrained(
            str(folder) if folder is not None else target_source.removeprefix("hf://"),
            revision=revision,
            trust_remote_code=trust_remote_code,
        )
    except (OSError, ValueError, TypeError):
        return None


def _tokenize(request: SmokeRequest, target_source: str, trust_remote_code: bool) -> tuple[list[list[int]], Any]:
    ids = request["prompt_token_ids"]
    tokenizer = _load_tokenizer(target_source, request.get("target_revision"), trust_remote_code)
    if ids is not None:
        return [list(row) for row in ids], tokenizer
    if tokenizer is None:
        raise UsageError(
            f"target {target_source}: text prompts need its tokenizer (transformers and tokenizer files)",
            "pass prompt_token_ids, or use a target with a tokenizer and install transformers: " + TORCH_INSTALL_HINT,
        )
    out = []
    for prompt in request["prompts"]:
        if request.get("chat"):
            encoded = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}],
                add_generation_prompt=True,
                tokenize=True,
                **{
                    **dict(request.get("chat_template_kwargs") or {}),
                    "enable_thinking": bool(request.get("enable_thinking", False)),
                },
            )
            if hasattr(encoded, "keys") and "input_ids" in encoded:
                encoded = encoded["input_ids"]
        else:
            encoded = tokenizer(prompt)["input_ids"]
        out.append([int(t) for t in encoded])
    return out, tokenizer


def _bool_arg(args: dict[str, Any], key: str, default: bool) -> bool:
    value = args.get(key, default)
    if not isinstance(value, bool):
        raise UsageError(f"engine_args.{key} is {value!r}, expected true or false", "")
    return value


def _run(request: SmokeRequest) -> dict[str, Any]:
    args = dict(request["engine_args"])
    ignored = sorted(k for k in args if k not in ENGINE_ARGS)
    ignore_eos = _bool_arg(args, "ignore_eos", False)
    trust_remote_code = _bool_arg(args, "trust_remote_code", False)
    warmup = _bool_arg(args, "warmup", True)
    device = ops.resolve_device(request["device"])
    dtype = ops.resolve_dtype(request["dtype"], device)
    torch.manual_seed(request["seed"])

    checkpoint = weights.load_draft(
        request["draft"], revision=request["revision"], overrides=dict(request.get("draft_config_overrides") or {})
    )
    desc = checkpoint.description
    if "num_threads" in args:
        torch.set_num_threads(int(args["num_threads"]))
    elif device.type == "cpu" and desc.decoder.hidden_size <= SMALL_HIDDEN_SIZE:
        # Tiny matrices: thread hand-offs cost more than the arithmetic (10x on the demo).
        torch.set_num_threads(1)
    algorithm = request["algorithm"]
    if algorithm not in ("dflash", "dflash2"):
        raise OperationError(
            f"algorithm {algorithm!r} is not implemented in the torch engine (dflash, dflash2 are)",
            "use --runtime vllm",
        )
    if algorithm == "dflash2" and desc.algorithm is not Algorithm.DFLASH2:
        raise OperationError(
            f"algorithm dflash2 requested, but {request['draft']} is a {desc.algorithm.value} draft", ""
        )
    # A DFlash2 draft served as "dflash" keeps its convolutions and drops the selector walk, the way
    # a runner without the candidate head drafts it (per-position argmax).
    use_selector = algorithm == "dflash2"

    target = load_target(
        request["target"],
        device=device,
        dtype=dtype,
        implementation=str(args.get("target_impl", "auto")),
        revision=request.get("target_revision"),
        trust_remote_code=trust_remote_code,
    )
    draft = DraftModel(
        desc,
        checkpoint.tensors,
        target_embeddings=target.embedding_weight(),
        target_lm_head=target.lm_head_weight(),
        device=device,
        dtype=dtype,
        use_selector=use_selector if desc.algorithm is Algorithm.DFLASH2 else None,
    )
    prompts, tokenizer = _tokenize(request, request["target"], trust_remote_code)
    k, sfa = request["num_speculative_tokens"], request["sample_from_anchor"]
    max_tokens = request["max_tokens"]

    def speculate(batch: Sequence[Sequence[int]], count: int) -> loop.Generation:
        return loop.speculative_generate(
            target, draft, batch, count, num_speculative_tokens=k, sample_from_anchor=sfa, ignore_eos=ignore_eos
        )

    if warmup:
        speculate(prompts[:1], min(max_tokens, 2 * (k + 1)))
        loop.greedy_generate(target, prompts[:1], min(max_tokens, 4), ignore_eos=ignore_eos)
    # Timed repetitions (the request's `timing`), the target alone timed right after each, so
    # that a slower spell of a shared machine weighs on both alike.
    runs: list[loop.Generation] = []
    alone: list[loop.Generation] = []
    while True:
        runs.append(speculate(prompts, max_tokens))
        if request["baseline"]:
            alone.append(loop.greedy_generate(target, prompts, max_tokens, ignore_eos=ignore_eos))
        spent = sum(g.elapsed_s for g in runs + alone)
        windows = [g.elapsed_s for g in runs]
        if not (
            more_repetitions(request, windows, spent)
            or (alone and more_repetitions(request, [g.elapsed_s for g in alone], spent))
        ):
            break
    return build_result(runs, alone, target, draft, request, tokenizer, ignored=ignored, ignore_eos=ignore_eos)


def build_result(
    runs: list[loop.Generation],
    alone: list[loop.Generation],
    target: TargetModel,
    draft: DraftModel,
    request: SmokeRequest,
    tokenizer: Any,
    *,
    ignored: list[str],
    ignore_eos: bool,
) -> dict[str, Any]:
    """The result: counters and outputs of the first repetition, the timed figures of the median
    one (`timing` lists them all when there is more than one)."""
    desc = draft.desc
    first = runs[0]
    timing = timing_block([g.elapsed_s for g in runs], [g.output_tokens for g in runs], [g.draft_s for g in runs])
    run = replace(first, elapsed_s=runs[timing["median"]].elapsed_s, draft_s=runs[timing["median"]].draft_s)
    run.target_s = runs[timing["median"]].target_s
    baseline = None
    baseline_timing = None
    if alone:
        baseline_timing = timing_block([g.elapsed_s for g in alone], [g.output_tokens for g in alone])
        baseline = replace(alone[0], elapsed_s=alone[baseline_timing["median"]].elapsed_s)
    draft_fraction = run.draft_s / run.elapsed_s if run.elapsed_s > 0 else 0.0
    details: dict[str, Any] = {
        "torch": torch.__version__,
        "device": str(draft.device),
        "dtype": str(draft.dtype).removeprefix("torch."),
        "target_impl": target.implementation,
        "dialect": desc.dialect.value,
        "draft_algorithm": desc.algorithm.value,
        "selector": draft.selector is not None,
        "layout": layout_name(request["sample_from_anchor"]),
        "draft_time_s": run.draft_s,
        "target_time_s": run.target_s,
        "draft_time_fraction": draft_fraction,
        "ignore_eos": ignore_eos,
        "num_threads": torch.get_num_threads(),
        "context_consistent": run.anchor_positions == run.context_lengths,
    }
    if ignored:
        details["ignored_engine_args"] = ignored
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "ok": True,
        "error": None,
        "engine": ENGINE,
        "num_drafts": run.num_drafts,
        "num_draft_tokens": run.num_draft_tokens,
        "num_accepted_tokens": run.num_accepted_tokens,
        "accepted_per_position": list(run.accepted_per_position),
        "acceptance_rate_per_position": rates(run.num_drafts, run.accepted_per_position),
        "mean_acceptance_length": mean_acceptance_length(run.num_drafts, run.num_accepted_tokens),
        "output_tokens": run.output_tokens,
        "elapsed_s": run.elapsed_s,
        "tokens_per_second": tokens_per_second(run.output_tokens, run.elapsed_s),
        "outputs": run.outputs,
        "baseline": None,
        "token_identical": None,
        "query_positions_per_step": list(run.query_positions_per_step),
        "log_path": None,
        "engine_details": details,
        "draft_time_s": run.draft_s,
    }
    if baseline is not None:
        result["baseline"] = {
            "outputs": baseline.outputs,
            "output_tokens": baseline.output_tokens,
            "elapsed_s": baseline.elapsed_s,
            "tokens_per_second": tokens_per_second(baseline.output_tokens, baseline.elapsed_s),
        }
        result["token_identical"] = baseline.outputs == run.outputs
        if baseline_timing is not None and baseline_timing["repeats"] > 1:
            result["baseline"]["timing"] = baseline_timing
    if timing["repeats"] > 1:
        result["timing"] = timing
    if tokenizer is not None:
        with contextlib.suppress(TypeError, ValueError, IndexError, OverflowError):
            result["output_texts"] = [tokenizer.decode(o, skip_special_tokens=True) for o in run.outputs]
    return result
