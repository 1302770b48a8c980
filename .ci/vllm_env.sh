# Sourced by .ci/tier-vllm.sh and .ci/tier-vllm-v2.sh: the pinned environment of one vLLM release,
# shared by both tiers (one build per release keeps CI inside its time budget; docs/tier-vllm.md).
#   vllm_env RELEASE   sets $venv to .venv-vllm-RELEASE (or $VENV), building it from
#                      .ci/requirements-vllm-RELEASE.txt when it is missing or that list changed,
#                      and installs this checkout into it.
vllm_env() {
    local release="$1"
    local requirements=".ci/requirements-vllm-${release}.txt"
    if [[ ! -f "$requirements" ]]; then
        echo "no pinned list for vLLM ${release} ($requirements)" >&2
        return 2
    fi
    venv="${VENV:-$PWD/.venv-vllm-${release}}"
    local stamp="$venv/.requirements.sha256"
    local wanted
    wanted="$(sha256sum "$requirements" | cut -d' ' -f1)"
    if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]]; then
        echo "building $venv" >&2
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        # The CPU build of torch first, by its exact version: pip must never pick a CUDA build.
        "$venv/bin/python" -m pip install --quiet "torch==2.13.0"
        "$venv/bin/python" -m pip install --quiet --no-deps -r "$requirements"
        echo "$wanted" > "$stamp"
    fi
    "$venv/bin/python" -m pip install --quiet --no-deps -e .
}
