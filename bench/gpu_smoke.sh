#!/usr/bin/env bash
# One-shot GPU smoke test: install dflash-tools with vLLM, run a preset, keep every JSON in $OUT.
#
#   OUT=/tmp/out bash bench/gpu_smoke.sh                     # the vLLM PR's plan (Qwen3.8-27B, K 7)
#   PRESET=qwen3-8b-dflash-b16 bash bench/gpu_smoke.sh       # smaller: Qwen3-8B, K 16
#   QUICK=1 OUT=/tmp/out bash bench/gpu_smoke.sh             # CI: the same steps, no GPU, no install
#
# Knobs (environment):
#   PRESET        configs/presets name (default qwen3.8-27b-dflash2)
#   VLLM_SPEC     what pip installs for vLLM (default vllm==0.33.0: the release the plugin patches;
#                 a vLLM with the upstream change is served natively)
#   WHEELHOUSE    install offline from this folder of wheels (pip --no-index --find-links)
#   VENV          virtual environment to create/use (default .venv-gpu)
#   COMPARE=1     also run --compare-layouts (twice the GPU time)
#   TIMEOUT       seconds per engine run (default 3000)
#   EXTRA         extra smoke-test arguments, e.g. "--num-prompts 4 --max-tokens 128"
#   QUICK=1       no virtual environment and no install: the bundled demo target and draft through
#                 the torch reference engine on the CPU of the current environment (what CI runs)
# Models come from the Hugging Face cache or the Hub (set HF_HUB_OFFLINE=1 on an offline host
# whose cache already holds them). Exit status is smoke-test's: 0 pass, 1 fail, 2 setup.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-$PWD/gpu-smoke-out}"
PRESET="${PRESET:-qwen3.8-27b-dflash2}"
VLLM_SPEC="${VLLM_SPEC:-vllm==0.33.0}"
VENV="${VENV:-.venv-gpu}"
TIMEOUT="${TIMEOUT:-3000}"
mkdir -p "$OUT"

log() { printf '[gpu_smoke] %s\n' "$*" >&2; }

if [ "${QUICK:-0}" = "1" ]; then
    smoke_args=(-t example:engine-demo/target -d example:engine-demo/zlab-dflash2 --runtime torch --device cpu
        --num-prompts 1 --max-tokens 8)
else
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV" || exit 2
    fi
    # shellcheck disable=SC1091
    . "$VENV/bin/activate"
    pip_args=(--quiet)
    if [ -n "${WHEELHOUSE:-}" ]; then
        pip_args+=(--no-index --find-links "$WHEELHOUSE")
    fi
    log "installing dflash-tools[vllm] with $VLLM_SPEC"
    python -m pip install "${pip_args[@]}" -e '.[vllm]' "$VLLM_SPEC" || exit 2
    smoke_args=(--preset "$PRESET" --runtime vllm)
fi

{
    nvidia-smi || true
    python -c 'import torch, vllm; print("torch", torch.__version__, "cuda", torch.version.cuda); print("vllm", vllm.__version__)'
    python -c 'from importlib.metadata import entry_points; print([str(e) for e in entry_points(group="vllm.general_plugins")])'
} > "$OUT/environment.txt" 2>&1

log "plan (no GPU): $OUT/plan.json"
# shellcheck disable=SC2086
dflash-tools smoke-test "${smoke_args[@]}" --dry-run --json ${EXTRA:-} > "$OUT/plan.json"
plan_status=$?
if [ "$plan_status" -ne 0 ]; then
    log "the plan refuses to launch (exit $plan_status); see $OUT/plan.json"
    exit "$plan_status"
fi

log "running ${smoke_args[*]}; logs under $OUT/runs"
# shellcheck disable=SC2086
dflash-tools smoke-test "${smoke_args[@]}" --json --run-timeout "$TIMEOUT" \
    --output-dir "$OUT/runs" ${EXTRA:-} > "$OUT/result.json"
status=$?

if [ "${COMPARE:-0}" = "1" ]; then
    log "comparing layouts; logs under $OUT/compare"
    # shellcheck disable=SC2086
    dflash-tools smoke-test "${smoke_args[@]}" --json --run-timeout "$TIMEOUT" --compare-layouts \
        --no-baseline --output-dir "$OUT/compare" ${EXTRA:-} > "$OUT/compare.json" || status=$?
fi

python - "$OUT/result.json" <<'PY' >&2 || true
import json, sys
document = json.load(open(sys.argv[1]))
for draft in document["drafts"]:
    for run in draft["runs"]:
        result = run.get("result") or {}
        print(f"{run['label']}: {run['verdict']['status']}  K={run['num_speculative_tokens']} Q={run['num_query_tokens']} "
              f"serving={run['serving']}  AL={result.get('mean_acceptance_length')}  speedup={run.get('speedup')}")
PY
log "exit $status; JSON in $OUT"
exit "$status"
