"""`bench/gpu.py --smoke`: the GPU benchmark's whole path on the CPU, checked through the JSON it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

TRAINING_ROWS = {("base", "bf16"), ("base", "fp32"), ("d1280x24", "bf16"), ("d1280x24", "fp32")}


@pytest.mark.slow  # 156 s in CI at load 7-16 (issue 50): the whole benchmark on the CPU, every family's rows
def test_gpu_bench_smoke_writes_every_row_with_positive_numbers(tmp_path: Path) -> None:
    output = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, "bench/gpu.py", "--smoke", "--device", "cpu", "--peak-tflops", "1", "--output", str(output)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "LINGUAFORGE_WORKSPACE": str(tmp_path / "ws")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["smoke"] is True and report["device_type"] == "cpu" and report["device"]
    assert {(r["model"], r["precision"]) for r in report["training"]} == TRAINING_ROWS
    for row in report["training"]:
        assert row["parameters"] > 0 and row["tokens_per_s"] > 0 and row["step_ms"] > 0, row
        assert row["peak_memory_gib"] > 0 and row["mfu"] > 0 and row["compile"] is False, row
        expected = 6 * row["parameters"] * row["tokens_per_s"] / 1e12
        assert abs(row["mfu"] - expected) <= 1e-4 + 1e-3 * expected, row
    generation = {row["kv_cache"]: row for row in report["generation"]}
    assert set(generation) == {True, False}
    assert all(row["rtf"] > 0 and row["codes"] == 20 for row in generation.values())
    assert generation[True]["speedup_vs_no_cache"] > 0
    assert report["families_note"] is None
    assert [(r["family"], r["mode"]) for r in report["families"]] == [
        (family, mode) for family in ("chatterbox", "indextts", "chatterbox-turbo") for mode in ("full fine-tune", "LoRA", "plain loop")
        if (family, mode) != ("chatterbox-turbo", "plain loop")]  # Turbo publishes no training forward to compare with
    for row in report["families"]:
        assert row["parameters"] > 0 and row["tokens_per_s"] > 0 and row["step_ms"] > 0 and row["mfu"] > 0, row
        assert (row["plan_gib"] is None) == (row["mode"] == "plain loop"), row  # the memory plan beside each family step
    assert "| base (d64 x 2" in proc.stdout and "RTF" in proc.stdout
