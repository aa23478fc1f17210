"""The whole GPU table in one device call: every piece under its own time cap, one JSON that docs/benchmarks.md
is updated from.

Pieces, in order (caps add up to 465 s, inside the 8 minutes of one call; a piece that runs out of its cap
is recorded as timed out, with what it wrote so far, and the next one starts):

- `cuda_tests` (90 s): the CUDA tests (`-m gpu`: the compiled bf16 step, bf16 autocast, the plan against the
  allocator's peak) and the fast decoder's token test;
- `families` (200 s): bench/families.py: per family the full fine-tune, LoRA and plain loop at batch 8, each
  eager row's step profiled by kind of work (bench/profile_summary.py), the rows at `batch: {size: auto}`'s
  micro-batch, and the compiled rows (regional compilation, the warm-up's seconds = compile time);
- `own` (70 s): bench/gpu.py's own-model rows;
- `generation` (45 s): bench/generate.py on CUDA: the static and growing KV caches, no cache, and the static step
  as a CUDA graph, ms per code and RTF at `base`;
- `streaming` (60 s): bench/serve.py --streaming: first audio per family through `serve`.

The report is rewritten after every piece, so a call cut short still brings back what finished.
`--smoke` runs the same path at tiny shapes on the CPU (what tests/test_device_table.py checks): the
generation and one family row; the pieces that need CUDA are recorded as skipped.

    bench/device_table.sh                                   # on the device: writes $OUT/device_table.json
    .venv/bin/python bench/device_table.py --smoke --output /tmp/table.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def pieces(work: Path, smoke: bool) -> list[dict[str, Any]]:
    """Return the pieces to run: name, command, cap in seconds, the JSON file it writes (None: its stdout is JSON,
    or text for the tests), or why it is skipped."""
    if smoke:
        return [
            {"name": "cuda_tests", "skipped": "needs CUDA"},
            {"name": "families", "cap": 240, "output": work / "families.json",
             "command": [PY, "bench/families.py", "--smoke", "--family", "indextts", "--compile", "off", "--budget", "1",
                         "--output", str(work / "families.json")]},
            {"name": "own", "skipped": "needs CUDA (its CPU path: tests/test_bench_gpu.py)"},
            {"name": "generation", "cap": 120, "command": [PY, "bench/generate.py", "--sizes", "tiny", "--codes", "8",
                                                           "--repeats", "1", "--json"]},
            {"name": "streaming", "skipped": "needs CUDA (its CPU figures: docs/streaming.md)"},
        ]
    return [
        {"name": "cuda_tests", "cap": 90, "command": [PY, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", "gpu or not slow",
                                                      "tests/test_trainer_gpu.py", "tests/test_memory_plan.py::test_plan_within_25_percent_of_the_cuda_allocator_peak",
                                                      "tests/test_fast_decoder.py"]},
        {"name": "families", "cap": 200, "output": work / "families.json",
         "command": [PY, "bench/families.py", "--auto-batch", "--profile", "--budget", "170", "--output", str(work / "families.json")]},
        {"name": "own", "cap": 70, "output": work / "gpu.json",
         "command": [PY, "bench/gpu.py", "--steps", "5", "--skip-families", "--output", str(work / "gpu.json")]},
        {"name": "generation", "cap": 45, "command": [PY, "bench/generate.py", "--device", "cuda", "--sizes", "base", "--codes", "250",
                                                      "--repeats", "2", "--json"]},
        {"name": "streaming", "cap": 60, "command": [PY, "bench/serve.py", "--streaming", "--device", "cuda", "--families", "linguaforge",
                                                     "chatterbox", "chatterbox-turbo", "indextts", "--requests", "8", "--rounds", "1",
                                                     "--disconnects", "2", "--repeats", "1", "--json"]},
    ]


def run_piece(piece: dict[str, Any]) -> dict[str, Any]:
    """Return the piece's record: seconds, exit code (or timed out), its JSON report (the file it wrote, else its
    stdout when that is JSON) and the tail of its output."""
    if "skipped" in piece:
        return {"skipped": piece["skipped"]}
    start = time.monotonic()
    try:
        done = subprocess.run(piece["command"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=piece["cap"])
        record: dict[str, Any] = {"rc": done.returncode}
        stdout, stderr = done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        record = {"timed_out": piece["cap"]}
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
    record["seconds"] = round(time.monotonic() - start, 1)
    output = piece.get("output")
    try:
        record["report"] = json.loads(output.read_text()) if output is not None and output.is_file() else json.loads(stdout)
    except ValueError:
        record["report"] = None
    record["tail"] = (stdout + stderr)[-1500:]
    return record


def main() -> None:
    """Parse options, run every piece under its cap, write the report after each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="the JSON report")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    parser.add_argument("--only", nargs="+", help="run only these pieces")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    report: dict[str, Any] = {"commit": commit or None, "python": platform.python_version(), "smoke": args.smoke,
                              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "pieces": {}}
    with tempfile.TemporaryDirectory() as work:
        for piece in pieces(Path(work), args.smoke):
            if args.only and piece["name"] not in args.only:
                continue
            report["pieces"][piece["name"]] = run_piece(piece)
            args.output.write_text(json.dumps(report, indent=2), encoding="utf-8")
    report["finished"] = True
    args.output.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps({name: {k: v for k, v in record.items() if k in ("rc", "seconds", "timed_out", "skipped")}
                      for name, record in report["pieces"].items()}))


if __name__ == "__main__":
    main()
