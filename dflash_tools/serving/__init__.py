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
    installed_reading.py  the installed engine's own reading of a draft (`EngineReading`), where it
                        disagrees with the table (DFT089), the column as the engine reads it
    installed_columns.py  that column for `inspect --engine` (the table's, the engine's, the finding)
    installed_vllm.py   asks the vLLM installed here, in a child process (`installed_vllm_child.py`)
    installed_sglang.py asks the SGLang installed here, in a child process (`installed_sglang_child.py`)
    k_values.py         `-k` as every command takes it (one K, or smoke-test's list or range)

`dflash-tools plan` (its request, checks, memory, rules and presets) is the package above this one,
`dflash_tools.plan`.

The rules per engine release come from `engine_rules`; this package applies them to one draft.
Nothing here imports typer, rich, torch, vLLM or SGLang; the two `installed_*_child.py` scripts
import the engine, in a process of their own, and nothing imports them.

Imports: `engine_rules`, `inspect`, `dialects`, `draft`, `reading`, `vllm_plugin` (its fingerprints,
markers and source reader).
"""
