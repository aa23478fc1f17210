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
# One pytest-xdist worker more than the cores (at most 4): a worker waits a fifth of its time (a page's tick, a
# server answering, a checkpoint written), and the extra one works meanwhile (docs/benchmarks.md, suite runs 27
# and 28). pytest.ini gives each worker whole test files (their module fixtures build family workspaces once);
# torch in each worker gets its share of the cores, at least one thread.
cores="$(nproc)"
workers=$(( cores + 1 < 4 ? cores + 1 : 4 ))
threads=$(( cores / workers ))
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( threads > 1 ? threads : 1 ))}"
exec .venv/bin/python -m pytest -n "$workers" "$@"
