#!/usr/bin/env bash
# The V2-on-CPU tier (docs/tier-vllm-v2.md): vLLM 0.33.0 plus triton 3.9.0 in their own
# environment, then the tests marked real_vllm_v2, which run vLLM's V2 DFlash speculators under
# Triton's interpreter. Idempotent: the environment is rebuilt only when it is missing or when
# its requirements file (.ci/requirements-vllm-v2.txt by default) changed since it was built.
#   VENV=/path/to/env  use (or build) the environment there instead of .venv-vllm-v2
#   REQUIREMENTS=file  another pinned list (another vLLM release: .ci/requirements-vllm-v2-*.txt)
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${VENV:-$PWD/.venv-vllm-v2}"
requirements="${REQUIREMENTS:-.ci/requirements-vllm-v2.txt}"
stamp="$venv/.requirements.sha256"
wanted="$(sha256sum "$requirements" | cut -d' ' -f1)"

if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]]; then
    echo "tier-vllm-v2: building $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    # The CPU build of torch first, by its exact version: pip must never pick a CUDA build.
    "$venv/bin/python" -m pip install --quiet "torch==2.13.0"
    "$venv/bin/python" -m pip install --quiet --no-deps -r "$requirements"
    echo "$wanted" > "$stamp"
fi
"$venv/bin/python" -m pip install --quiet --no-deps -e .

"$venv/bin/python" -m pytest -p no:cacheprovider -m real_vllm_v2 tests/real_vllm_v2 "$@"
