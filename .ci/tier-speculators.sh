#!/usr/bin/env bash
# The speculators 0.9.0 conformance tier (tests/real_speculators, marker real_speculators).
#
# Builds $REPO/.venv-speculators from .ci/requirements-speculators.txt (every package pinned,
# installed with --no-deps so pip pulls nothing else; .ci/envs.sh), installs dflash-tools into it
# and runs the tier. Idempotent: the environment is rebuilt only when the pinned list changes.
# Extra arguments go to pytest. SPECULATORS_VENV overrides where the environment lives.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/envs.sh
tier_env speculators

# Offline: speculators resolves verifier configs through huggingface_hub; the tests point it at
# local folders only. No cache provider and a removed temporary folder: the tier leaves no files.
scratch="$(mktemp -d -t dflash-tools-tier-speculators.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
HF_HUB_OFFLINE=1 "$venv/bin/python" -m pytest -p no:cacheprovider --basetemp "$scratch/pytest" \
    -m real_speculators tests/real_speculators "$@"
