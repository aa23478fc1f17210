# Shared set-up for ./test.sh and ./run.sh: a Python virtual environment in .venv with the
# pinned requirements, and Debian packages installed when missing (root only).

ensure_venv() {
    local python="${PYTHON:-python3}"
    if [ ! -x .venv/bin/python ]; then
        echo "setup: creating .venv" >&2
        "$python" -m venv .venv
    fi
    local stamp=.venv/.requirements.sha256
    local want
    want="$(sha256sum requirements.txt | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        install_requirements
        echo "$want" > "$stamp"
    fi
}

UV_VERSION=0.13.9

# install_requirements — requirements.txt into .venv: pip resolves it (its configuration and its choice among the
# machine's indexes), uv installs the very files pip chose (scripts/pinned_wheels.py), downloading, unpacking and
# byte-compiling in parallel: docs/benchmarks.md has its time against pip's 4.5 min on the 2-core test machine.
# The byte-compiling is not left to the first import: with PYTHONDONTWRITEBYTECODE set (as on the test machine)
# every process would compile torch, transformers and gradio from source again. pip alone where uv cannot
# install.
install_requirements() {
    echo "setup: installing requirements.txt into .venv" >&2
    if install_with_uv; then
        return 0
    fi
    echo "setup: uv $UV_VERSION could not install here; pip installs instead (a few minutes)" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
}

# install_with_uv — uv into .venv, pip's resolution of requirements.txt, uv's install of the files pip chose.
install_with_uv() {
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION" >/dev/null 2>&1 &&
        .venv/bin/python -m pip install --quiet --disable-pip-version-check --dry-run --ignore-installed \
            --report .venv/pip-report.json -r requirements.txt &&
        .venv/bin/python scripts/pinned_wheels.py .venv/pip-report.json > .venv/pinned-wheels.txt &&
        .venv/bin/uv pip install --quiet --python .venv/bin/python --no-deps --compile-bytecode \
            -r .venv/pinned-wheels.txt
}

# ensure_system_packages COMMAND:PACKAGE ... — install the Debian package of each missing command
# (a COMMAND starting with / is a file the package installs, e.g. a font).
ensure_system_packages() {
    local missing=()
    local pair need
    for pair in "$@"; do
        need="${pair%%:*}"
        if [[ "$need" == /* ]]; then
            [ -e "$need" ] || missing+=("${pair#*:}")
        else
            command -v "$need" >/dev/null 2>&1 || missing+=("${pair#*:}")
        fi
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "setup: missing ${missing[*]}; install them (tests that need them will skip)" >&2
        return 0
    fi
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
