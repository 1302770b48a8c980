#!/usr/bin/env bash
# The SGLang source tier (tests/real_sglang, marker real_sglang; docs/development.md).
#
# SGLang cannot run on CPU, so SGLang itself is not installed: its released wheel (39 MB) is
# downloaded once into $DFLASH_TOOLS_WHEEL_CACHE (default .cache/wheels) with `pip download
# --no-deps` and read by the tests. Three of its files are executed to check the stand-in SGLang
# server (tests/real_sglang/test_sglang_standin.py); one of them needs msgspec and openai==2.8.0
# (the wheel's pin), which are installed, pinned, into a throwaway folder that the tests find in
# $DFLASH_TOOLS_SGLANG_DEPS and that is removed afterwards: the environment is not changed.
# The corpus check (tests/real_sglang/test_sglang_corpus.py) runs transformers' AutoConfig under
# the transformers release the wheel pins (its METADATA): that release, alone (--no-deps, about
# 12 MB), goes into another throwaway folder, $DFLASH_TOOLS_SGLANG_TRANSFORMERS.
# Runs with the Python environment in $VENV (default: the default suite's .venv (README's
# set-up), built here with the dev extras when missing). Extra arguments go to pytest.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${VENV:-$REPO/.venv}"
export DFLASH_TOOLS_WHEEL_CACHE="${DFLASH_TOOLS_WHEEL_CACHE:-$REPO/.cache/wheels}"

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "tier-sglang: building $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$REPO[dev]"
fi
mkdir -p "$DFLASH_TOOLS_WHEEL_CACHE"
if ! compgen -G "$DFLASH_TOOLS_WHEEL_CACHE/sglang-0.5.23-*.whl" >/dev/null; then
    "$VENV/bin/python" -m pip download --quiet --no-deps "sglang==0.5.23" -d "$DFLASH_TOOLS_WHEEL_CACHE"
fi

cd "$REPO"
scratch="$(mktemp -d -t dflash-tools-tier-sglang.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
# The wheel's protocol.py imports msgspec and openai; openai's own imports need the rest.
export DFLASH_TOOLS_SGLANG_DEPS="$scratch/deps"
"$VENV/bin/python" -m pip install --quiet --no-deps --target "$DFLASH_TOOLS_SGLANG_DEPS" \
    msgspec==0.23.0 openai==2.8.0 httpx==0.29.0 httpcore==1.0.9 jiter==0.19.0 distro==1.9.0 \
    sniffio==1.3.1 certifi==2026.10.19.post1
# The transformers the wheel pins (its Requires-Dist), without dependencies, into a folder of its
# own: the config-loading and corpus tests put it first on their probes' path.
wheel="$(compgen -G "$DFLASH_TOOLS_WHEEL_CACHE/sglang-0.5.23-*.whl" | head -n 1)"
pin="$("$VENV/bin/python" - "$wheel" <<'PY'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    print(re.search(r"^Requires-Dist: transformers==(\S+)$", wheel.read(name).decode(), re.M).group(1))
PY
)"
export DFLASH_TOOLS_SGLANG_TRANSFORMERS="$scratch/transformers"
"$VENV/bin/python" -m pip install --quiet --no-deps --target "$DFLASH_TOOLS_SGLANG_TRANSFORMERS" "transformers==$pin"
"$VENV/bin/python" -m pytest -p no:cacheprovider --basetemp "$scratch/pytest" -m real_sglang tests/real_sglang "$@"
