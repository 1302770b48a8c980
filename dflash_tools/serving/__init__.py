"""How an engine will serve a draft, and how to launch it.

    vllm_capability.py  what the vLLM installed here can serve, read from its files (no import)
    vllm_view.py        `inspect --engine vllm`: the inspect walk plus how that vLLM serves the draft
    plan_checks.py      the serving plan's numbers: token budget, weight and KV memory, tensor
                        parallelism (pure functions over config dicts and safetensors headers)

The rules per engine release come from `engines`; this package applies them to one draft.
Nothing here imports typer, rich, torch or vLLM.

Imports: `engines`, `inspect`, `dialects`, `draft`, `reading`, `vllm_plugin` (its fingerprints,
markers and source reader).
"""
