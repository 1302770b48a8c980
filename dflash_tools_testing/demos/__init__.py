"""The tiny targets and drafts of the no-network CPU demos.

    corpus.py          the word-problem corpus the bundled demos are trained on (pure Python)
    training.py        the minimal DFlash training loop: target and drafts (torch, inside functions)
    bundle.py          `example:engine-demo/*` and `example:vllm-cpu-demo/*`: trained, with a manifest;
                       `python -m dflash_tools_testing.demos.bundle NAME` regenerates one
    engine_demo.py     the engine demo's shape, and a planted pair for tests with exact answers (numpy)
    vllm_cpu_demo.py   the vLLM CPU demo's shape, and a planted pair for tests with exact answers (numpy)
    checkpoints.py     what they all write the same way (shapes, bf16 encoding, tokenizer)

Imports: `testing` (the fixture factory), `reading`, and `reference_engine` (training reuses its
arithmetic, `bundle.py` measures with its engine); torch only inside functions.
"""
