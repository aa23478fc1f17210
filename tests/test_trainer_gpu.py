"""The CUDA fast path keeps every exactness guarantee: bf16 + torch.compile + fused AdamW + prefetching.

Skipped without a CUDA device (the CPU suite covers the same guarantees on the eager CPU path).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core.checkpoint import load_checkpoint
from core.config import load_settings
from core.training.embeddings import extend_checkpoint
from core.training.run_config import load_run_config
from core.recipe import train
from tests.trainer_helpers import SPECIALS, english_words, lm_config, lm_workspace, write_word_tokenizer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
FAST = {"precision": "bf16", "compile": True, "optim": {"weight_decay": 0.1, "lr": 1.0e-2, "warmup_steps": 2}}


def _train(workspace: Path, name: str, max_steps: int | None = None, resume: str | None = None, **overrides):
    path = lm_config(workspace, name, **overrides)
    return train(load_run_config(path), path, load_settings(), resume=resume, max_steps=max_steps)


def _train_lines(workspace: Path, run: str) -> dict[int, dict]:
    lines = [json.loads(line) for line in (workspace / "runs" / run / "metrics.jsonl").read_text().splitlines()]
    return {m["step"]: m for m in lines if m["split"] == "train"}


def test_bf16_compiled_step_keeps_frozen_rows_bit_identical_and_resumes_exactly(workspace: Path) -> None:
    lm_workspace(workspace)
    write_word_tokenizer(workspace / "tokenizers" / "en_plus.json", english_words() + ["selam", "buna", "bet"])
    base = _train(workspace, "en-base", **FAST)
    extended = workspace / "checkpoints" / "en_plus.pt"
    extend_checkpoint(base.last_checkpoint, workspace / "tokenizers/en_words.json",
                      workspace / "tokenizers/en_plus.json", extended)
    run = {**FAST, "tokenizer": "tokenizers/en_plus.json", "base_checkpoint": "checkpoints/en_plus.pt"}
    straight = _train(workspace, "straight", **run)
    _train(workspace, "paused", max_steps=3, **run)
    resumed = _train(workspace, "paused", resume="auto", **run)

    assert straight.info["device"].startswith("cuda") and straight.info["compile"] is True
    assert resumed.info["compile"] is True and resumed.step == straight.step == 6
    before = load_checkpoint(extended).state_dict
    n_base = len(SPECIALS) + len(english_words())
    for result in (straight, resumed):
        after = load_checkpoint(result.last_checkpoint).state_dict
        for key in ("text_embedding.weight", "text_head.weight", "text_head.bias"):
            assert torch.equal(after[key][:n_base], before[key][:n_base]), key
            assert not torch.equal(after[key][n_base:], before[key][n_base:]), key
        assert result.base_rows_sha256["start"] == result.base_rows_sha256["now"]
    one, two = _train_lines(workspace, "straight"), _train_lines(workspace, "paused")
    for step in (4, 5, 6):
        assert two[step]["lr"] == one[step]["lr"]
        assert two[step]["loss"] == pytest.approx(one[step]["loss"], rel=2e-3, abs=1e-3)
    saved = [load_checkpoint(r.last_checkpoint).extra for r in (straight, resumed)]
    assert saved[0]["data_position"] == saved[1]["data_position"]
