#!/usr/bin/env bash
# The speculators 0.9.0 conformance tier (tests/real_speculators, marker real_speculators).
#
# Builds $REPO/.venv-speculators from .ci/requirements-speculators.txt (every package pinned,
# installed with --no-deps so pip pulls nothing else), installs dflash-tools into it and runs the
# tier. Idempotent: the environment is rebuilt only when the pinned list changes. Extra arguments
# go to pytest. SPECULATORS_VENV overrides where the environment lives.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${SPECULATORS_VENV:-$REPO/.venv-speculators}"
REQUIREMENTS="$REPO/.ci/requirements-speculators.txt"
STAMP="$VENV/.requirements.sha256"
wanted="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"

if [[ ! -x "$VENV/bin/python" || "$(cat "$STAMP" 2>/dev/null || true)" != "$wanted" ]]; then
    echo "tier-speculators: building $VENV" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$REQUIREMENTS"
    echo "$wanted" >"$STAMP"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e "$REPO"

cd "$REPO"
# Offline: speculators resolves verifier configs through huggingface_hub; the tests point it at
# local folders only. No cache provider and a removed temporary folder: the tier leaves no files.
scratch="$(mktemp -d -t dflash-tools-tier-speculators.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
HF_HUB_OFFLINE=1 "$VENV/bin/python" -m pytest -p no:cacheprovider --basetemp "$scratch/pytest" \
    -m real_speculators tests/real_speculators "$@"
