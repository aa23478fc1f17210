"""bench/device_table.py --smoke: the device call's whole path at tiny shapes on the CPU, checked through its JSON,
and bench/profile_summary.py's account of a profiled step, so neither rots before a device is lent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.profile_summary import kind_of, profile_step
from tests.conftest import REPO_ROOT


def test_a_profiled_step_is_summarised_by_kind_of_work() -> None:
    weight = torch.randn(64, 64, requires_grad=True)
    optimizer = torch.optim.AdamW([weight])

    def step() -> None:
        x = torch.randn(32, 64)
        loss = torch.nn.functional.cross_entropy(x @ weight, torch.randint(0, 64, (32,)))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    summary = profile_step(step, torch.device("cpu"))
    assert summary["timeline"] == "cpu" and summary["ms_per_step"] > 0
    assert {"matmul", "cross-entropy", "optimizer"} <= set(summary["kinds"])
    assert abs(sum(k["share"] for k in summary["kinds"].values()) - 1) < 1e-3
    assert summary["top"] and all(row["kind"] == kind_of(row["op"]) for row in summary["top"])
    assert (kind_of("aten::mm"), kind_of("aten::_local_scalar_dense"), kind_of("aten::log_softmax")) == \
        ("matmul", "host sync", "cross-entropy")


@pytest.mark.slow
def test_the_device_script_runs_its_whole_path_on_the_cpu(tmp_path: Path) -> None:
    output = tmp_path / "table.json"
    proc = subprocess.run([sys.executable, "bench/device_table.py", "--smoke", "--output", str(output)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(output.read_text())
    pieces = report["pieces"]
    assert report["finished"] and report["smoke"] and list(pieces) == ["cuda_tests", "families", "own", "generation", "streaming"]
    assert {name for name, record in pieces.items() if "skipped" in record} == {"cuda_tests", "own", "streaming"}
    family_rows = pieces["families"]["report"]["rows"]
    assert pieces["families"]["rc"] == 0 and family_rows[0]["step_ms"] > 0 and family_rows[0]["warmup_s"] >= 0
    assert all("skipped" in row for row in family_rows[1:])        # --budget 1: one row, the others listed
    generation = pieces["generation"]["report"]["generation"][0]
    assert pieces["generation"]["rc"] == 0 and generation["ms_per_code_static_cache"] > 0 and generation["ms_per_code_growing_cache"] > 0
