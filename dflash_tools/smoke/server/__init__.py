"""smoke-test's server mode (`--server URL`): the same measurement against a running server.

    measure.py  the entry: which engine serves the URL (`detect_engine`), then `run_server`
    base.py     its options (`ServerOptions`), the answers read strictly, the result it builds
    vllm.py     a vLLM server: its /metrics counters around the requests
    sglang.py   an SGLang server: per-answer meta_info, /server_info, /metrics
    http.py     the bounded client every server request goes through (reading.http)

The package exports its entry (`run_server`, `ServerOptions`, `detect_engine`, `served_model`).

Imports: within `smoke`, the counters (`smoke.metrics`, `smoke.counter_relations`,
`smoke.acceptance`), the protocols (`smoke.workloads`) and `smoke.options` (`Runtime`); below it,
`reading` (the bounded HTTP policy) and `smoke_contract`.
"""

from dflash_tools.smoke.server.measure import Detected, ServerOptions, detect_engine, run_server, served_model

__all__ = ["Detected", "ServerOptions", "detect_engine", "run_server", "served_model"]
