"""`smoke-test`: prove drafts on a GPU through vLLM (or the torch reference engine).

    arguments.py   `SmokeArguments`: each option the command takes, declared once (the CLI's
                   `SmokeTestArgs` derives from it); standard library only, on the `--help` path
    options.py     `Runtime`; `resolve_options`: arguments + preset -> `SmokeOptions` (each
                   value with its source)
    run.py         `smoke_test(options)`: dry run, offline runs and cross-check, or a server
                   -> the result document (the command's core entry point)
    plan.py        drafts, target, K, layout, runner, environment -> a launch plan (no GPU)
    run_plan.py    one run of the plan, typed: `Runner`, `Serving` (words only in JSON),
                   `RunPlan`, and `ServerRun` (the run `--server` measures)
    vllm_plan.py   the plan's vLLM side: `serving.vllm_runtime` per run, the child's environment, DFT041
    runner.py      the process boundary: child process, timeout, log, markers
    child.py       `python -m dflash_tools.smoke.child`: dispatch a request to its engine
    vllm_engine.py the vLLM engine (offline LLM API), imported only in the child
    metrics.py     speculative-decoding counters from get_metrics() or Prometheus text
    server/        `--server URL`: the same measurement against a running server (which engine
                   it is; vLLM's /metrics, SGLang's meta_info; the bounded HTTP client)
    acceptance.py  the two definitions of acceptance length (vLLM's, SGLang's), side by side
    workloads/     what a run measures on and is judged against: datasets, sampling
                   protocols, published references, the reference acceptance length
    report.py      verdicts and the result document
    sweep.py       `-k 3,5,7`: measured and predicted speed-up per K, the best K
    cross_check.py a vLLM run repeated on the torch reference engine

Nothing here imports typer or rich; vLLM and torch are imported only inside the child.

What the installed vLLM can serve (`serving.vllm_capability`) and what each engine release reads
(`engine_rules`) live below this package, and so do the presets (`plan.presets`) and the
JSON request / result exchanged with the engine child process (`dflash_tools.smoke_contract`).

Imports: `plan` (its presets), `serving`, `engine_rules`, `inspect`, `draft`, `reading`, `vllm_plugin` (its markers and
fingerprints), `smoke_contract`, and `reference_engine` only from `child` (the torch engine, in the
child process).
"""
