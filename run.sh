#!/usr/bin/env bash
# The front door: set up .venv (as ./test.sh does), then start the dashboard — the embedded job
# worker, TensorBoard and the Gradio app — on http://127.0.0.1:7860. Extra arguments go to app.py
# (--host, --port, --auth user:password, --workspace DIR, --config FILE).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/setup_env.sh
ensure_system_packages espeak-ng:espeak-ng ffmpeg:ffmpeg  # ffmpeg: the Inference tab's streamed player
ensure_venv
export PYTHONUNBUFFERED=1
exec .venv/bin/python app.py "$@"
