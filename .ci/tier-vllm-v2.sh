#!/usr/bin/env bash
# The V2-on-CPU tier (docs/tier-vllm-v2.md): vLLM's V2 DFlash speculators executed under Triton's
# interpreter, in the environment of one vLLM release (shared with .ci/tier-vllm.sh; .ci/envs.sh),
# then the tests marked real_vllm_v2.
#   bash .ci/tier-vllm-v2.sh          vLLM 0.33.0 (the default)
#   bash .ci/tier-vllm-v2.sh 0.34.0   vLLM 0.34.0
# Extra arguments go to pytest.   VENV=/path/to/env  use (or build) the environment there instead
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/envs.sh

release="${1:-0.33.0}"
shift $(( $# > 0 ? 1 : 0 ))
tier_env "vllm-$release"

scratch="$(mktemp -d -t dflash-tools-tier-vllm-v2.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
"$venv/bin/python" -m pytest -p no:cacheprovider --basetemp "$scratch/pytest" -m real_vllm_v2 tests/real_vllm_v2 "$@"
