#!/usr/bin/env bash
# The whole GPU table in one device call (bench/device_table.py): every piece under its own cap, 465 s in all,
# one JSON at $OUT/device_table.json (or ./device_table.json). Needs the packages of requirements.txt in the
# Python it runs ($PYTHON, else .venv/bin/python, else python3).
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
exec timeout 475 "$PY" bench/device_table.py --output "${OUT:-.}/device_table.json" "$@"
