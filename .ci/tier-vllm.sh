#!/usr/bin/env bash
# The real-vLLM tiers (docs/tier-vllm.md): one vLLM release for CPU in its own environment, then the
# tests marked real_vllm, which read the release under test from DFLASH_TOOLS_TIER_VLLM.
#   bash .ci/tier-vllm.sh            vLLM 0.33.0 (the default)
#   bash .ci/tier-vllm.sh 0.34.0     vLLM 0.34.0
# The environment (.venv-vllm-RELEASE, from .ci/requirements-vllm-RELEASE.txt) is built once and
# shared with the V2 tier (.ci/tier-vllm-v2.sh); .ci/envs.sh. Extra arguments go to pytest.
#   VENV=/path/to/env  use (or build) the environment there instead
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/envs.sh

release="${1:-0.33.0}"
shift $(( $# > 0 ? 1 : 0 ))
tier_env "vllm-$release"

export VLLM_TARGET_DEVICE=cpu
export DFLASH_TOOLS_TIER_VLLM="$release"
# vLLM 0.34.0 needs Triton on x86 CPUs and drops PyPI's triton when it sees no GPU driver, unless
# CUDA_VISIBLE_DEVICES is set and empty (vllm/triton_utils/importing.py). Harmless on 0.33.0.
export CUDA_VISIBLE_DEVICES=
# No cache provider and a removed temporary folder: the tier leaves no files behind.
scratch="$(mktemp -d -t dflash-tools-tier-vllm.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
"$venv/bin/python" -m pytest -p no:cacheprovider --basetemp "$scratch/pytest" -m real_vllm tests/real_vllm "$@"
