"""The vLLM engine (runs in the child process): offline `LLM` API, greedy, statistics on.

One request: serve the target with the draft (`speculative_config` from the request), generate
the prompts greedily, read the speculative-decoding counters from `get_metrics()` before and
after, shut the engine down, then (when asked) serve the target alone on the same prompts for the
token-identity check and the speed ratio. vLLM is imported only inside `run_request`.

Before any weights load, when the request needs the dflash-tools plugin (anchor-first on a stock
release it patches), the plugin is loaded in this process and its marker checked; after the engine starts,
the speculator the plugin saw constructed must run the planned number of query positions.
Either check failing ends the run: it never proceeds with the plugin silently inactive.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from dflash_tools import smoke_contract as contract
from dflash_tools.draft.config_paths import set_path
from dflash_tools.smoke.metrics import ZERO, counters_from_metrics
from dflash_tools.smoke.vllm_passes import (
    continuation_pass,
    continuation_prompts,
    engine_kwargs,
    generate,
    other_engine_passes,
    prefix_caching_enabled,
    prompts_for,
    shutdown,
    timed_passes,
)
from dflash_tools.smoke_contract import progress
from dflash_tools.vllm_plugin.markers import MARKER_DIR_ENV, read_markers, summarize

CONFIG_NAME = "config.json"


class EngineFailure(RuntimeError):
    """The run cannot go on; the message is the result's error."""


# --- the draft folder vLLM sees --------------------------------------------------------------


def build_overlay(source_dir: Path, overlay_dir: Path, overrides: dict[str, Any]) -> Path:
    """A folder that is `source_dir` with `overrides` applied to config.json.

    Every other file is a symbolic link to the original, so no weights are copied and the
    checkpoint (possibly inside the Hugging Face cache) is never written to.
    """
    config_path = source_dir / CONFIG_NAME
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineFailure(f"draft {config_path}: cannot read config.json ({exc})") from None
    if not isinstance(config, dict):
        raise EngineFailure(f"draft {config_path}: config.json is not a JSON object")
    if overlay_dir.exists():
        shutil.rmtree(overlay_dir)
    overlay_dir.mkdir(parents=True)
    for entry in sorted(source_dir.iterdir()):
        if entry.name == CONFIG_NAME or entry.name.startswith("."):
            continue
        (overlay_dir / entry.name).symlink_to(entry.resolve())
    for dotted, value in overrides.items():
        set_path(config, dotted, value)
    (overlay_dir / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return overlay_dir


def local_draft_dir(draft: str, revision: str | None) -> Path:
    """The draft as a local folder: itself, or the Hub snapshot (downloaded by the Hub client)."""
    path = Path(draft).expanduser()
    if path.is_dir():
        return path
    progress(f"downloading {draft} for the config overlay")
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id=draft, revision=revision))


def served_speculative_config(request: contract.SmokeRequest, work_dir: Path) -> tuple[dict[str, Any], str | None]:
    """The speculative config to pass to `LLM`, with the overlay folder when overrides apply.

    The method is the plan's (`serving.vllm_runtime`: the release's table routes the algorithm);
    a request without one is refused rather than guessed."""
    speculative = dict(request.get("speculative_config") or {})
    if not isinstance(speculative.get("method"), str) or not speculative["method"]:
        raise EngineFailure("the request's speculative_config names no method (the plan sets it from the engine table)")
    speculative.setdefault("model", request["draft"])
    speculative["num_speculative_tokens"] = request["num_speculative_tokens"]
    overrides = request.get("draft_config_overrides") or {}
    if not overrides:
        return speculative, None
    source = local_draft_dir(request["draft"], request["revision"])
    slug = "".join(c if c.isalnum() or c in "._-" else "_" for c in request.get("label", "draft"))[:80]
    overlay = build_overlay(source, work_dir / f"{slug}.overlay", overrides)
    speculative["model"] = str(overlay)
    speculative.pop("revision", None)
    return speculative, str(overlay)


# --- observing the V1 drafter ----------------------------------------------------------------

OBSERVED_ATTRIBUTE = "_dflash_tools_query_rows"
INSECURE_SERIALIZATION_ENV = "VLLM_ALLOW_INSECURE_SERIALIZATION"


def install_query_observer(worker: Any) -> str | None:
    """Runs in each vLLM worker (`LLM.collective_rpc`): record the query rows of every draft pass.

    The V1 DFlash proposer builds the draft block's attention metadata in `set_inputs_first_pass`;
    its `max_query_len` is the number of query positions per request that actually ran. The
    wrapper only reads that value. None when this runner has no such drafter (V2, other methods).
    """
    drafter = getattr(getattr(worker, "model_runner", None), "drafter", None)
    original = getattr(drafter, "set_inputs_first_pass", None)
    if drafter is None or original is None:
        return None
    seen: list[int] = []

    def observed(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        metadata = out[2] if isinstance(out, tuple) and len(out) > 2 else None
        rows = getattr(metadata, "max_query_len", None)
        if isinstance(rows, int):
            seen.append(rows)
        return out

    drafter.set_inputs_first_pass = observed
    setattr(worker, OBSERVED_ATTRIBUTE, seen)
    return type(drafter).__name__


def read_query_observer(worker: Any) -> list[int] | None:
    seen = getattr(worker, OBSERVED_ATTRIBUTE, None)
    return list(seen) if seen is not None else None


def _observe(llm: Any) -> list[str | None]:
    try:
        return list(llm.collective_rpc(install_query_observer))
    except Exception as exc:  # an observation that cannot be made is reported, never fatal
        progress(f"cannot observe the drafter's query positions ({type(exc).__name__}: {exc})")
        return []


def _observed_rows(llm: Any) -> list[int] | None:
    try:
        per_worker = llm.collective_rpc(read_query_observer)
    except Exception:
        return None
    rows = [r for worker in per_worker if worker for r in worker]
    return rows or None


# --- timing the drafter ------------------------------------------------------------------------

TIMER_ATTRIBUTE = "_dflash_tools_draft_timer"


def install_draft_timer(worker: Any) -> str | None:
    """Runs in each vLLM worker (`LLM.collective_rpc`): time every call of the drafter's `propose`.

    The V1 runner keeps its proposer as `model_runner.drafter`, the V2 runner its speculator as
    `model_runner.speculator`; both draft through `propose`. On a CPU the call is synchronous and
    wall time is the drafting time; on a GPU the call only enqueues work, so CUDA events recorded
    around it on the current stream are read at the end (no synchronization during the run).
    The K sweep's prediction needs this split of a step into drafting and the rest.
    """

    runner = getattr(worker, "model_runner", None)
    owner = next(
        (
            obj
            for obj in (getattr(runner, "drafter", None), getattr(runner, "speculator", None))
            if callable(getattr(obj, "propose", None))
        ),
        None,
    )
    if owner is None:
        return None
    original = owner.propose
    import torch

    cuda = torch.cuda.is_available()
    state: dict[str, Any] = {"seconds": 0.0, "calls": 0, "events": []}

    def timed(*args: Any, **kwargs: Any) -> Any:
        state["calls"] += 1
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = original(*args, **kwargs)
            end.record()
            state["events"].append((start, end))
            return out
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            state["seconds"] += time.perf_counter() - started

    owner.propose = timed
    setattr(worker, TIMER_ATTRIBUTE, state)
    return f"{type(owner).__name__}.propose"


def read_draft_timer(worker: Any) -> dict[str, Any] | None:
    state = getattr(worker, TIMER_ATTRIBUTE, None)
    if state is None:
        return None
    seconds = state["seconds"]
    if state["events"]:
        import torch

        torch.cuda.synchronize()
        seconds += sum(start.elapsed_time(end) for start, end in state["events"]) / 1000.0
    return {"seconds": seconds, "calls": state["calls"]}


def _install_timer(llm: Any) -> str | None:
    try:
        installed = [name for name in llm.collective_rpc(install_draft_timer) if name]
    except Exception as exc:  # a measurement that cannot be made is reported, never fatal
        progress(f"cannot time the drafter ({type(exc).__name__}: {exc})")
        return None
    return installed[0] if installed else None


def _draft_seconds(llm: Any) -> float | None:
    """Drafting time of the busiest worker (tensor-parallel ranks draft at the same time)."""
    try:
        per_worker = [t for t in llm.collective_rpc(read_draft_timer) if t]
    except Exception:
        return None
    return max((t["seconds"] for t in per_worker), default=None)


# --- running vLLM ----------------------------------------------------------------------------


def engine_error_line(exc: BaseException) -> str:
    """The informative line of an engine-start error, for the one-line result error.

    vLLM's config validation raises pydantic errors whose first line is only "1 validation error
    for VllmConfig"; the reason is on the "Value error, ..." line. Otherwise the first line.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if line.startswith("Value error, "):
            return f"{type(exc).__name__}: {line.removeprefix('Value error, ').split(' [type=')[0]}"
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _plugin_state(required: bool) -> dict[str, Any] | None:
    folder = os.environ.get(MARKER_DIR_ENV)
    if not folder:
        return None
    return summarize(read_markers(Path(folder)), required=required, launcher_pid=os.getpid())


def _require_plugin_loaded() -> None:
    """Load general plugins in this process now and check ours patched vLLM."""
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    state = _plugin_state(required=True)
    if state is None or not state["active"]:
        reasons = "; ".join(state["reasons"]) if state and state["reasons"] else "no marker was written"
        raise EngineFailure(
            "the dflash-tools vLLM plugin is not active in the launcher process "
            f"({reasons}; VLLM_PLUGINS={os.environ.get('VLLM_PLUGINS')!r})"
        )


def _check_observed_queries(request: contract.SmokeRequest, state: dict[str, Any] | None) -> list[int] | None:
    if state is None:
        return None
    observed = [s["num_query_per_req"] for s in state["speculators"] if isinstance(s.get("num_query_per_req"), int)]
    if request.get("plugin_required"):
        if not observed:
            raise EngineFailure(
                "the dflash-tools plugin did not observe the DFlash speculator being built (plugin inactive in the "
                "worker processes, or the V1 runner was used)"
            )
        wrong = [q for q in observed if q != request["num_query_tokens"]]
        if wrong:
            raise EngineFailure(
                f"the speculator runs {wrong[0]} query positions per request, the plan needs {request['num_query_tokens']}"
            )
    return observed or None


def run_request(request: contract.SmokeRequest, *, work_dir: Path | None = None) -> contract.SmokeResult:
    work = work_dir or Path(tempfile.mkdtemp(prefix="dflash-tools-vllm-"))
    details: dict[str, Any] = {}
    try:
        return _run(request, work, details)
    except EngineFailure as exc:
        return contract.failed_result("vllm", str(exc), details=details)


def _run(request: contract.SmokeRequest, work: Path, details: dict[str, Any]) -> contract.SmokeResult:
    speculative, overlay = served_speculative_config(request, work)
    details["speculative_config"] = speculative
    if overlay:
        details["overlay"] = overlay
        details["draft_config_overrides"] = request.get("draft_config_overrides")
    on_cpu = (request["device"] or "").startswith("cpu")
    # collective_rpc sends our observer and timer functions (by reference to this module) to
    # vLLM's own local worker processes; vLLM only unpickles functions with this set.
    os.environ.setdefault(INSECURE_SERIALIZATION_ENV, "1")
    progress("importing vLLM")
    import vllm
    from vllm import LLM

    from dflash_tools.serving.vllm_capability import vllm_distribution

    details["vllm_version"] = getattr(vllm, "__version__", None)
    details["vllm_distribution"] = vllm_distribution()
    details["device"] = request["device"]
    details["dtype"] = request["dtype"]
    required = bool(request.get("plugin_required"))
    if required:
        _require_plugin_loaded()

    progress(f"loading {request['target']} with draft {speculative['model']} (K={request['num_speculative_tokens']})")
    kwargs = engine_kwargs(request)
    try:
        llm = LLM(model=request["target"], speculative_config=speculative, **kwargs)
    except Exception as exc:
        raise EngineFailure(f"vLLM did not start: {engine_error_line(exc)}") from exc
    try:
        config = llm.llm_engine.vllm_config
        details["runner"] = "v2" if config.use_v2_model_runner else "v1"
    except AttributeError:
        details["runner"] = None
    state = _plugin_state(required)
    observed = _check_observed_queries(request, state)
    if state is not None:
        details["plugin"] = state
    observers = _observe(llm) if on_cpu and not observed else []
    if any(observers):
        details["drafter"] = next(o for o in observers if o)

    timer = _install_timer(llm)
    if timer:
        details["draft_timer"] = timer

    prompts = prompts_for(llm, request)
    before = counters_from_metrics(llm.get_metrics()) or ZERO
    progress(f"generating {len(prompts)} prompt(s), {request['max_tokens']} tokens each, with speculation")
    first = generate(llm, prompts, request)
    outputs, texts = first.outputs, first.texts
    after = counters_from_metrics(llm.get_metrics())
    if after is None:
        raise EngineFailure("vLLM reported no speculative-decoding counters: speculation did not run")
    counters = after.minus(before)
    timed = timed_passes(
        llm,
        prompts,
        request,
        first,
        first_draft_s=_draft_seconds(llm) if timer else None,
        draft_seconds=(lambda: _draft_seconds(llm)) if timer else None,
    )
    elapsed, draft_time = timed.elapsed, timed.draft_time
    if any(observers):
        rows = _observed_rows(llm)
        if rows:
            details["observed_query_positions"] = {
                "source": f"{details.get('drafter')}.set_inputs_first_pass (attention metadata max_query_len)",
                "draft_passes": len(rows),
                "values": sorted(set(rows)),
            }
            observed = sorted(set(rows))
    prefix: dict[str, Any] | None = None
    continuation, prefix_tokens, remaining = continuation_prompts(first)
    if request.get("prefix_caching_check"):
        progress("prefix caching: generating the continuations in the same engine")
        try:
            prefix = {
                "measured": {
                    "enable_prefix_caching": prefix_caching_enabled(llm, kwargs),
                    "outputs": outputs,
                    **continuation_pass(llm, request, continuation, remaining),
                },
                "continuation_prefix_tokens": prefix_tokens,
            }
        except Exception as exc:
            prefix = {"error": f"the continuation pass failed: {engine_error_line(exc)}"}
    shutdown(llm)
    if prefix is not None and "error" not in prefix:
        enable = not prefix["measured"]["enable_prefix_caching"]
        try:
            prefix["other"] = other_engine_passes(
                request, kwargs, speculative, prompts, enable, continuation, remaining
            )
        except Exception as exc:
            prefix = {
                "error": f"the engine with prefix caching {'on' if enable else 'off'} failed: {engine_error_line(exc)}"
            }

    output_tokens = timed.timing["output_tokens"][timed.median]
    result: contract.SmokeResult = {
        "schema_version": contract.SCHEMA_VERSION,
        "ok": True,
        "error": None,
        "engine": "vllm",
        **counters.result_fields(),  # type: ignore[typeddict-item]
        "output_tokens": output_tokens,
        "elapsed_s": elapsed,
        "tokens_per_second": contract.tokens_per_second(output_tokens, elapsed),
        "outputs": outputs,
        "baseline": None,
        "token_identical": None,
        "query_positions_per_step": observed,
        "log_path": None,
        "output_texts": texts,
        "engine_details": details,
        "draft_time_s": draft_time,
    }
    if prefix is not None:
        result["prefix_caching"] = prefix
    if timed.timing["repeats"] > 1:
        result["timing"] = timed.timing
    if request["baseline"]:
        progress(f"loading {request['target']} alone (baseline)")
        baseline_llm = LLM(model=request["target"], **kwargs)
        baseline_prompts = prompts_for(baseline_llm, request)
        alone = timed_passes(baseline_llm, baseline_prompts, request, generate(baseline_llm, baseline_prompts, request))
        shutdown(baseline_llm)
        baseline_outputs = alone.first.outputs
        baseline_tokens = alone.timing["output_tokens"][alone.median]
        baseline: contract.BaselineResult = {
            "outputs": baseline_outputs,
            "output_tokens": baseline_tokens,
            "elapsed_s": alone.elapsed,
            "tokens_per_second": contract.tokens_per_second(baseline_tokens, alone.elapsed),
        }
        if alone.timing["repeats"] > 1:
            baseline["timing"] = alone.timing
        result["baseline"] = baseline
        result["token_identical"] = baseline_outputs == outputs
    return result
