#!/usr/bin/env bash
# Set up .venv (idempotent, fast when already installed), install the system packages the tests
# need when missing and possible, then run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/setup_env.sh
ensure_system_packages espeak-ng:espeak-ng redis-server:redis-server chromium:chromium sox:sox ffmpeg:ffmpeg \
    /usr/share/fonts/truetype/noto/NotoSansEthiopic-Regular.ttf:fonts-noto-core  # screenshots show Amharic
ensure_venv
export PYTHONUNBUFFERED=1
# One pytest-xdist worker per core (at most 4); pytest.ini gives each worker whole test files (their module
# fixtures build family workspaces once); torch in each worker gets its share of the cores, not all of them.
cores="$(nproc)"
workers=$(( cores < 4 ? cores : 4 ))
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( cores / workers ))}"
exec .venv/bin/python -m pytest -n "$workers" "$@"
