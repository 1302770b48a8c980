"""A stand-in engine child for the process boundary (`DFLASH_TOOLS_SMOKE_CHILD`).

Invoked exactly like `python -m dflash_tools.smoke.child --request REQ --result RES`. What it
does is chosen by `FAKE_CHILD_MODE`:

    ok        write a valid result: K draft positions, `FAKE_CHILD_ACCEPTED` (comma-separated
              accepted counts per position per draft step) over `FAKE_CHILD_STEPS` steps, a
              baseline when asked, and the plugin markers vLLM + the plugin would leave
    wrong-q   like ok, but the speculator reports K + 1 query positions whatever the layout
    flipped-better  like ok, but the flipped layout (request differs from FAKE_CHILD_DECLARED)
              scores higher
    error     write an ok: false result
    crash     print to the log and exit 3 without a result
    invalid   write a result that breaks the contract
    hang      start a grandchild, then sleep (for timeouts; the group must be killed)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    args = sys.argv[1:]
    request_path = Path(args[args.index("--request") + 1])
    result_path = Path(args[args.index("--result") + 1])
    request = json.loads(request_path.read_text(encoding="utf-8"))
    mode = os.environ.get("FAKE_CHILD_MODE", "ok")
    print("[dflash-tools] loading the target", file=sys.stderr, flush=True)
    print(f"request env: {json.dumps(request['env'], sort_keys=True)}", flush=True)
    print(f"process env: VLLM_USE_V2_MODEL_RUNNER={os.environ.get('VLLM_USE_V2_MODEL_RUNNER')}", flush=True)
    if mode == "crash":
        print(
            "Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory", file=sys.stderr, flush=True
        )
        return 3
    if mode == "hang":
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        Path(os.environ["FAKE_CHILD_PIDFILE"]).write_text(str(grandchild.pid), encoding="utf-8")
        time.sleep(120)
        return 0
    if mode == "invalid":
        result_path.write_text(json.dumps({"schema_version": 1, "ok": "yes"}), encoding="utf-8")
        return 0
    k = request["num_speculative_tokens"]
    if mode == "error":
        result = {
            "schema_version": 1, "ok": False, "error": "ValueError: sample_from_anchor=True is not supported for DFlash.",
            "engine": request["engine"], "num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0,
            "accepted_per_position": [], "acceptance_rate_per_position": [], "mean_acceptance_length": 0.0,
            "output_tokens": 0, "elapsed_s": 0.0, "tokens_per_second": 0.0, "outputs": [], "baseline": None,
            "token_identical": None, "query_positions_per_step": None, "log_path": None,
        }  # fmt: skip
        result_path.write_text(json.dumps(result), encoding="utf-8")
        return 1
    accepted = [int(v) for v in os.environ.get("FAKE_CHILD_ACCEPTED", ",".join(["1"] * k)).split(",")][:k]
    accepted += [0] * (k - len(accepted))
    declared = os.environ.get("FAKE_CHILD_DECLARED")
    flipped = declared is not None and (declared == "true") != request["sample_from_anchor"]
    if flipped:
        # Wrong layout: acceptance collapses at position 0, unless the checkpoint is mislabeled.
        accepted = [1] * k if mode == "flipped-better" else [0] * k
        if mode == "flipped-better":
            accepted[-1] = 0
    steps = int(os.environ.get("FAKE_CHILD_STEPS", "10"))
    per_position = [hit * steps for hit in accepted]
    outputs = [[(i * 7 + j) % 500 for j in range(request["max_tokens"])] for i in range(len(request["prompts"]))]
    queries = request["num_query_tokens"] if mode != "wrong-q" else k + 1
    markers = os.environ.get("DFLASH_TOOLS_PLUGIN_MARKER_DIR")
    if markers and request.get("plugin_required"):
        for event, payload in (
            ("plugin", {"status": "patched", "reason": "vLLM 0.33.0"}),
            ("speculator", {"class": "DFlash2Speculator", "runner": "v2", "num_query_per_req": queries}),
        ):
            path = Path(markers) / f"{event}-{os.getpid()}.json"
            path.write_text(json.dumps({"event": event, "pid": os.getpid(), **payload}), encoding="utf-8")
    tokens = sum(len(o) for o in outputs)
    result = {
        "schema_version": 1,
        "ok": True,
        "error": None,
        "engine": request["engine"],
        "num_drafts": steps,
        "num_draft_tokens": steps * k,
        "num_accepted_tokens": sum(per_position),
        "accepted_per_position": per_position,
        "acceptance_rate_per_position": [c / steps for c in per_position],
        "mean_acceptance_length": 1 + sum(per_position) / steps,
        "output_tokens": tokens,
        "elapsed_s": 2.0,
        "tokens_per_second": tokens / 2.0,
        "outputs": outputs,
        "baseline": None,
        "token_identical": None,
        "query_positions_per_step": [queries],
        "log_path": None,
        "engine_details": {"runner": "v2", "fake": True},
    }
    if request["baseline"]:
        baseline_outputs = [list(o) for o in outputs]
        if os.environ.get("FAKE_CHILD_MISMATCH"):
            baseline_outputs[0][3] += 1
        result["baseline"] = {
            "outputs": baseline_outputs,
            "output_tokens": tokens,
            "elapsed_s": 5.0,
            "tokens_per_second": tokens / 5.0,
        }
        result["token_identical"] = baseline_outputs == outputs
    print("[dflash-tools] generating", file=sys.stderr, flush=True)
    result_path.write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
