"""How an engine will serve a draft, and how to launch it.

    engine_model.py     DraftFacts (one draft, as every view needs it) and EngineView
    engine_view.py      `inspect --engine`: one engine table applied to one draft (EngineView),
                        the `--engine` names, and the report with every view (`engines` in JSON)
    column_steps.py     the steps of that view every engine shares (format, layer ids, mask, layout)
    sglang_column.py    SGLang's column of the view
    vllm_column.py      vLLM's column of the view
    vllm_runtime.py     per vLLM release: the method, why the V2 runner is needed, the launch
                        environment, the layout overrides (the view and smoke-test both use it)
    plugin_state.py     PluginState: how one vLLM serves anchor-first drafts, worded per document
    engine_checks.py    the tables' load-time rules (`Check.name`), one function each
    config_reads.py     reading a config key the way an engine does (locations in order)
    launch.py           whole launch lines (argv + environment) for vLLM and SGLang, with the
                        serving plan's settings (`SERVING_SETTINGS`, `LaunchSettings`)
    vllm_capability.py  what the vLLM installed here can serve, read from its files (no import)
    vllm_view.py        `inspect --engine vllm`: the inspect walk plus how that vLLM serves the draft
    k_values.py         `-k` as every command takes it (one K, or smoke-test's list or range)

`dflash-tools plan` (its request, checks, memory, rules and presets) is the package above this one,
`dflash_tools.plan`.

The rules per engine release come from `engine_rules`; this package applies them to one draft.
Nothing here imports typer, rich, torch, vLLM or SGLang.

Imports: `engine_rules`, `inspect`, `dialects`, `draft`, `reading`, `vllm_plugin` (its fingerprints,
markers and source reader).
"""
