#!/usr/bin/env bash
# The real-vLLM tiers (docs/tier-vllm.md): one vLLM release for CPU in its own environment, then the
# tests marked real_vllm, which read the release under test from DFLASH_TOOLS_TIER_VLLM.
#   bash .ci/tier-vllm.sh            vLLM 0.33.0 (the default)
#   bash .ci/tier-vllm.sh 0.34.0     vLLM 0.34.0
# Idempotent: each environment (.venv-vllm-VERSION) is rebuilt only when it is missing or when its
# pinned list (.ci/requirements-vllm-VERSION.txt) changed since it was built. Extra arguments go to
# pytest.
#   VENV=/path/to/env  use (or build) the environment there instead
set -euo pipefail
cd "$(dirname "$0")/.."

release="${1:-0.33.0}"
shift $(( $# > 0 ? 1 : 0 ))
requirements=".ci/requirements-vllm-${release}.txt"
if [[ ! -f "$requirements" ]]; then
    echo "tier-vllm: no pinned list for vLLM ${release} ($requirements)" >&2
    exit 2
fi
venv="${VENV:-$PWD/.venv-vllm-${release}}"
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
export DFLASH_TOOLS_TIER_VLLM="$release"
# vLLM 0.34.0 needs Triton on x86 CPUs and drops PyPI's triton when it sees no GPU driver, unless
# CUDA_VISIBLE_DEVICES is set and empty (vllm/triton_utils/importing.py). Harmless on 0.33.0.
export CUDA_VISIBLE_DEVICES=
# No cache provider and a removed temporary folder: the tier leaves no files behind.
scratch="$(mktemp -d -t dflash-tools-tier-vllm.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
"$venv/bin/python" -m pytest -p no:cacheprovider --basetemp "$scratch/pytest" -m real_vllm tests/real_vllm "$@"
