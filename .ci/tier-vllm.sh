#!/usr/bin/env bash
# The real-vLLM tier (docs/tier-vllm.md): vLLM 0.33.0 for CPU in its own environment, then the
# tests marked real_vllm. Idempotent: the environment is rebuilt only when it is missing or when
# .ci/requirements-vllm.txt changed since it was built.
#   VENV=/path/to/env  use (or build) the environment there instead of .venv-vllm
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${VENV:-$PWD/.venv-vllm}"
requirements=.ci/requirements-vllm.txt
stamp="$venv/.requirements.sha256"
wanted="$(sha256sum "$requirements" | cut -d' ' -f1)"

if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]]; then
    echo "tier-vllm: building $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    # The CPU build of torch first, by its exact version: pip must never pick a CUDA build.
    "$venv/bin/python" -m pip install --quiet "torch==2.13.0"
    "$venv/bin/python" -m pip install --quiet --no-deps -r "$requirements"
    echo "$wanted" > "$stamp"
fi
"$venv/bin/python" -m pip install --quiet --no-deps -e .

export VLLM_TARGET_DEVICE=cpu
"$venv/bin/python" -m pytest -p no:cacheprovider -m real_vllm tests/real_vllm
