"""`train --resume auto` with a truncated newest checkpoint falls back to the newest loadable one
and says which file it skipped and why (issue 17)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.config import load_settings
from core.training.run_config import load_run_config
from core.recipe import train
from tests.trainer_helpers import lm_config, lm_workspace

torch.set_num_threads(1)


def test_resume_auto_skips_a_truncated_checkpoint(workspace: Path, capsys: pytest.CaptureFixture) -> None:
    lm_workspace(workspace)
    path = lm_config(workspace, "cut", schedule={"max_steps": 6, "val_every": 3, "save_every": 3, "keep_last": 3})
    first = train(load_run_config(path), path, load_settings(), max_steps=6)
    assert first.step == 6
    newest = workspace / "runs" / "cut" / "checkpoints" / "step_0000006.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    second = train(load_run_config(path), path, load_settings(), resume="auto", max_steps=8)
    assert second.info["resumed_from"].endswith("step_0000003.pt")
    assert second.step == 8
    err = capsys.readouterr().err
    assert "--resume auto skipped step_0000006.pt" in err and "not a readable PyTorch checkpoint" in err
