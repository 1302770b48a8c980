"""`dflash-tools plan`: the launch lines of every engine release asked for, and the checks that they fit.

    options.py  `PlanOptions`: each option the command takes, declared once (name, type, default;
                the CLI's `PlanArgs` derives from it); standard library only, on the `--help` path
    request.py  `plan_request(options)`: the request built once from the options and a preset, each
                value with its source (`PlanRequest.sources`); `check_request` for one built in Python
    run.py      `plan_launch(request)`: for each draft, the settings each release resolves (its
                table's defaults), the checks, the launch lines (the command's core entry point)
    model.py    the plan's request and answer (`PlanRequest`, `ServingPlan`, `EnginePlan`, `LaunchPlan`)
    rules.py    the tables' serving rules (`ServingRule.name`), one function each
    checks.py   the plan's numbers: dimensions (over `TargetDescription`), token budget, tensor
                parallelism, and every setting's range
    memory.py   weights per rank, KV bytes per token, whether both fit
    unread.py   a target or a draft the Hub could not be asked about offline (DFT090, DFT091)
    presets.py  configs/presets and configs/prompts (plan and smoke-test both use them: smoke-test
                sits above this package)

How one engine release serves one draft (its column, runtime, plugin state and launch line) is the
package below, `serving`; this one runs the plan command on top of it. Nothing here imports typer,
rich, torch, vLLM or SGLang.

Imports: `serving`, `engine_rules`, `inspect`, `draft`, `reading`.
"""
