#!/usr/bin/env bash
# Set up .venv (idempotent, fast when already installed), install the system packages the tests
# need when missing and possible, then run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/setup_env.sh
ensure_system_packages espeak-ng:espeak-ng redis-server:redis-server chromium:chromium sox:sox \
    /usr/share/fonts/truetype/noto/NotoSansEthiopic-Regular.ttf:fonts-noto-core  # screenshots show Amharic
ensure_venv
export PYTHONUNBUFFERED=1
exec .venv/bin/python -m pytest "$@"
