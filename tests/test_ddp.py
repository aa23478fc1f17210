"""Two-process DDP on CPU (gloo): both ranks must end with identical weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from core.checkpoint import load_checkpoint
from tests.conftest import REPO_ROOT
from tests.trainer_helpers import lm_config, lm_workspace


def test_two_gloo_ranks_end_with_identical_weights(workspace: Path) -> None:
    lm_workspace(workspace)
    config = lm_config(workspace, "ddp", schedule={"max_steps": 4, "val_every": 4, "save_every": 4, "log_every": 1})
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc_per_node", "2",
         "-m", "core", "train", "--config", str(config), "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads((workspace / "runs" / "ddp" / "status.json").read_text())
    assert status["state"] == "finished" and status["world_size"] == 2
    hashes = status["rank_weights_sha256"]
    assert len(hashes) == 2 and hashes[0] == hashes[1]
    checkpoint = load_checkpoint(workspace / "runs" / "ddp" / "checkpoints" / "step_0000004.pt")
    assert checkpoint.extra["step"] == 4
    train = [json.loads(line) for line in (workspace / "runs" / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in train if m["split"] == "train"] == [1, 2, 3, 4]
