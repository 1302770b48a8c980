"""The serving rules of the engine tables (`EngineRules.serving_rules`), one function per
`ServingRule.name`: each reads the plan and one release's `EnginePlan` and adds that release's
findings. A test keeps the names here and in the tables in step (tests/plan/test_plan.py).
"""

from __future__ import annotations

from collections.abc import Callable

from dflash_tools.draft.geometry import layout_name
from dflash_tools.plan.checks import INT64_MAX, SLIDING_ATTENTION
from dflash_tools.plan.model import EnginePlan, ServingPlan


def pins_draft_dcp(plan: ServingPlan, engine: EnginePlan) -> bool:
    """Whether the launch line pins the draft's decode context parallelism to 1: a target at DCP
    above 1, a draft with sliding-window layers, and a release with the `draft-dcp` key."""
    draft = plan.draft_dims
    sliding = draft is not None and SLIDING_ATTENTION in draft.layer_types
    return plan.request.decode_context_parallel_size > 1 and sliding and engine.rules.flag("draft-dcp") is not None


def _draft_pass_budget(plan: ServingPlan, engine: EnginePlan) -> None:
    budget = engine.token_budget
    if budget is None or budget.ok:
        return
    rule = engine.rules.serving_rule("draft-pass-budget")
    assert rule is not None and budget.max_num_batched_tokens is not None
    queries, batched = budget.num_query_tokens, budget.max_num_batched_tokens
    capped = batched // queries
    layout = layout_name(budget.sample_from_anchor)
    engine.note(
        "DFT080",
        f"max_num_batched_tokens {batched} < max_num_seqs {budget.max_num_seqs} × {queries} query positions "
        f"({layout}, K = {budget.num_speculative_tokens}) = {budget.required}: it runs at most {capped} requests "
        f"at once instead of {budget.max_num_seqs} (it lowers max_num_active_seqs to {capped})",
        f"pass --max-num-batched-tokens {budget.required}, or --max-num-seqs {capped}",
        keys=("max_num_batched_tokens", "max_num_seqs"),
        required=budget.required,
        max_num_active_seqs=capped,
        rule=rule.cite,
    )


def _dcp_divides_tp(plan: ServingPlan, engine: EnginePlan) -> None:
    tp, dcp = plan.request.tensor_parallel_size, plan.request.decode_context_parallel_size
    if dcp > 1 and tp % dcp:
        engine.note(
            "DFT083",
            f"tensor_parallel_size {tp} is not a multiple of decode_context_parallel_size {dcp}: refused at start-up",
            "choose a --decode-context-parallel-size that divides --tensor-parallel-size",
            keys=("decode_context_parallel_size",),
        )


def _dcp_gqa_target(plan: ServingPlan, engine: EnginePlan) -> None:
    tp, dcp, dims = plan.request.tensor_parallel_size, plan.request.decode_context_parallel_size, plan.target_dims
    if dcp == 1 or dims is None or plan.target_description is None or plan.target_description.mla:
        return
    kv, heads = dims.num_key_value_heads, dims.num_attention_heads
    problem = None
    if tp <= kv:
        problem = f"tensor_parallel_size {tp} is not above the target's {kv} KV heads"
    elif dcp > tp // kv:
        problem = f"decode_context_parallel_size {dcp} exceeds tensor_parallel_size // KV heads = {tp // kv}"
    elif (heads // kv) % dcp:
        problem = f"the target's {heads // kv} query heads per KV head do not divide by {dcp}"
    if problem is not None:
        engine.note(
            "DFT083",
            f"decode context parallelism with a GQA target: {problem}; refused at start-up",
            "raise --tensor-parallel-size or lower --decode-context-parallel-size (1 turns it off)",
            keys=("decode_context_parallel_size", "tensor_parallel_size"),
        )


def _draft_dcp_sliding_window(plan: ServingPlan, engine: EnginePlan) -> None:
    if not pins_draft_dcp(plan, engine):
        return
    assert plan.draft_dims is not None
    sliding = sum(1 for kind in plan.draft_dims.layer_types if kind == SLIDING_ATTENTION)
    engine.note(
        "DFT084",
        f"the draft has {sliding} sliding-window layers, which cannot run at decode_context_parallel_size "
        f"{plan.request.decode_context_parallel_size}: the launch line pins the draft's "
        "draft_decode_context_parallel_size to 1",
        "keep draft_decode_context_parallel_size 1 in --speculative-config",
        keys=("draft_decode_context_parallel_size",),
    )


# --------------------------------------------------------------------------------------------
# What every release refuses at start-up (not a table's rule: each engine does it)
# --------------------------------------------------------------------------------------------

# The variable each engine reads before it accepts a max_model_len longer than the model's:
# vLLM's `_get_and_verify_max_len` (vllm/config/model.py), SGLang's `_derive_context_length`
# (sglang/srt/configs/model_config.py). Both raise at start-up without it.
LONG_CONTEXT_ENV = {
    "vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
}


def check_startup(plan: ServingPlan) -> None:
    """Settings on a launch line that the engine refuses when it starts, as findings (DFT088) of
    each release: a max_model_len longer than the target's context, and a number the launch line
    passes beyond a 64-bit integer (a raised max_num_batched_tokens). The values given were
    checked with the request (`checks.setting_problem`); these are what they add up to."""
    for engine in plan.engines.values():
        if not engine.serves:
            continue
        _max_model_len_beyond_context(plan, engine)
        for name, setting in engine.settings.items():
            value = setting.value
            if isinstance(value, int) and not isinstance(value, bool) and value > INT64_MAX:
                engine.note(
                    "DFT088",
                    f"{name} {value:,} ({setting.source}) is beyond {INT64_MAX:,}, the largest number it takes "
                    "(a 64-bit integer): refused at start-up",
                    "lower --max-num-seqs (max_num_batched_tokens is raised to max_num_seqs × the query positions)",
                    keys=(name,),
                    value=value,
                )


def _max_model_len_beyond_context(plan: ServingPlan, engine: EnginePlan) -> None:
    setting, target = plan.max_model_len, plan.target_description
    longest = target.longest_context if target is not None else None  # None: the target unread (DFT090)
    if (
        target is None
        or setting is None
        or longest is None
        or not isinstance(setting.value, int)
        or setting.value <= longest
    ):
        return
    variable = LONG_CONTEXT_ENV.get(engine.rules.engine)
    allowed = f" unless {variable}=1 is set" if variable else ""
    positions = target.max_position_embeddings
    why = (
        "its max_position_embeddings"
        if longest == positions
        else f"max_position_embeddings {positions:,} with its RoPE scaling or model_max_length"
    )
    engine.note(
        "DFT088",
        f"max_model_len {setting.value:,} ({setting.source}) is longer than the target's context, {longest:,} "
        f"({why}): refused at start-up{allowed}, and positions past the trained ones give wrong outputs",
        f"pass --max-model-len {longest} or less",
        keys=("max_model_len",),
        max_model_len=setting.value,
        longest_context=longest,
    )


SERVING_RULES: dict[str, Callable[[ServingPlan, EnginePlan], None]] = {
    "draft-pass-budget": _draft_pass_budget,
    "dcp-divides-tp": _dcp_divides_tp,
    "dcp-gqa-target": _dcp_gqa_target,
    "draft-dcp-sliding-window": _draft_dcp_sliding_window,
}
