"""Doctor checks added by the trainer: resume compatibility and the memory plan."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from core.config import load_settings
from core.checks.doctor import DoctorContext, run_doctor
from core.training.run_config import load_run_config
from core.families.registry import get_model_family
from core.training.memory import StepShape, largest_fitting_batch, micro_batch_plan, plan_memory
from core.recipe import train
from tests.trainer_helpers import english_words, lm_config, lm_workspace, write_word_tokenizer
import core.checkpoint
import core.checks.doctor
import core.training.plan
import core.training.trainer
from core.recipe import prepare_trainer, train

torch.set_num_threads(1)


def _check(report, check_id: str):  # noqa: ANN001, ANN202
    return next(c for c in report.checks if c.id == check_id)


def test_resume_check_names_same_extension_and_incompatible(workspace: Path) -> None:
    lm_workspace(workspace)
    write_word_tokenizer(workspace / "tokenizers" / "plus.json", english_words() + ["selam", "buna"])
    swapped = english_words()
    swapped[0], swapped[1] = swapped[1], swapped[0]
    write_word_tokenizer(workspace / "tokenizers" / "swapped.json", swapped)
    path = lm_config(workspace, "resume-check")
    result = train(load_run_config(path), path, load_settings(), max_steps=1)
    outcomes = {}
    for name in ("en_words", "plus", "swapped"):
        ctx = DoctorContext(tokenizer_path=workspace / "tokenizers" / f"{name}.json",
                            resume_checkpoint=Path(result.last_checkpoint), settings=load_settings())
        outcomes[name] = _check(run_doctor(ctx), "resume.tokenizer")
    assert outcomes["en_words"].status == "pass" and "same tokenizer" in outcomes["en_words"].message
    size = len(english_words()) + 4  # the four specials come first
    assert outcomes["plus"].status == "pass" and f"prefix extension {size} → {size + 2}" in outcomes["plus"].message
    assert outcomes["swapped"].status == "fail" and "id 4 is" in outcomes["swapped"].message


BASE_TTS = {"d_model": 512, "n_layers": 8, "n_heads": 8, "max_text_tokens": 400, "max_speech_tokens": 800,
            "text_rows": 12000, "codebook_size": 8192, "n_mels": 80, "n_latents": 4}


def _plan(batch: int, checkpointing: bool = False) -> Any:
    step = StepShape(batch, 400, 800, half=True, checkpointing=checkpointing, device="cuda")
    return plan_memory(get_model_family("linguaforge"), BASE_TTS, step, frozen_rows=0, freeze_mode="none")


def test_memory_plan_scales_and_suggests_a_batch() -> None:
    one, eight = _plan(1), _plan(8)
    assert one.parts["optimizer state"] == eight.parts["optimizer state"] == 8 * one.parameters.trainable
    assert 30e6 < one.parameters.trainable < 60e6
    assert eight.parts["activations"] == 8 * one.parts["activations"]
    per_sample = one.parts["activations"] + one.parts["logits"]
    budget = one.peak + 2 * per_sample + 1
    assert largest_fitting_batch(_plan, budget, 32) == 3
    assert largest_fitting_batch(_plan, one.peak - per_sample, 32) == 0


def test_memory_check_passes_for_the_tiny_preset(workspace: Path) -> None:
    lm_workspace(workspace)
    path = lm_config(workspace, "mem")
    ctx = DoctorContext(run_config=load_run_config(path), config_path=path, settings=load_settings(), device="cpu",
                        tokenizer_path=workspace / "tokenizers" / "en_words.json")
    check = _check(run_doctor(ctx), "memory.batch")
    assert check.status == "pass" and "free" in check.message and "MiB" in check.message


def _count_loads(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Count checkpoint and tokenizer loads by path wherever the trainer and the doctor make them."""
    loads: Counter = Counter()
    load_checkpoint, load_tokenizer = core.checkpoint.load_checkpoint, core.training.trainer.load_tokenizer

    def counted_checkpoint(path: Any, *args: Any, **kwargs: Any) -> Any:
        loads[Path(path).resolve()] += 1
        return load_checkpoint(path, *args, **kwargs)

    def counted_tokenizer(path: Any, *args: Any, **kwargs: Any) -> Any:
        loads[Path(path).resolve()] += 1
        return load_tokenizer(path, *args, **kwargs)

    monkeypatch.setattr(core.checkpoint, "load_checkpoint", counted_checkpoint)
    monkeypatch.setattr(core.training.trainer, "load_tokenizer", counted_tokenizer)
    monkeypatch.setattr(core.checks.doctor, "load_tokenizer", counted_tokenizer)
    return loads


def test_train_setup_loads_each_checkpoint_and_the_tokenizer_once(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The trainer hands its doctor what it loaded: one load (and sha256) of the base, the resume
    checkpoint and the tokenizer per setup, and the run's own config.yaml is not rewritten. Set-up
    alone writes nothing into the run folder."""
    lm_workspace(workspace)
    settings = load_settings()
    first = train(load_run_config(lm_config(workspace, "base-run")), lm_config(workspace, "base-run"), settings, max_steps=1)
    base = workspace / "checkpoints" / "base.pt"
    base.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(first.last_checkpoint, base)
    tokenizer = (workspace / "tokenizers" / "en_words.json").resolve()

    loads = _count_loads(monkeypatch)
    path = lm_config(workspace, "from-base", base_checkpoint="checkpoints/base.pt")
    capsys.readouterr()
    trainer = prepare_trainer(load_run_config(path), path, settings)
    trainer.log.close()
    assert "checkpoint.rows" in capsys.readouterr().err  # the doctor did look
    assert not (workspace / "runs" / "from-base").exists()
    assert loads == Counter({base.resolve(): 1, tokenizer: 1})

    loads.clear()
    run_config = workspace / "runs" / "base-run" / "config.yaml"
    written = run_config.stat().st_mtime_ns
    resumed = prepare_trainer(load_run_config(run_config), run_config, settings, resume="auto", max_steps=2)
    assert loads == Counter({Path(first.last_checkpoint).resolve(): 1, tokenizer: 1})
    assert resumed.run().step == 2
    assert run_config.stat().st_mtime_ns == written


def test_checkpointing_shrinks_activations_and_the_plan_keeps_the_effective_batch() -> None:
    plain, recomputed = _plan(8), _plan(8, checkpointing=True)
    assert recomputed.parts["optimizer state"] == plain.parts["optimizer state"]
    assert recomputed.parts["activations"] < plain.parts["activations"] / 2
    assert largest_fitting_batch(lambda b: _plan(b, True), plain.peak, 512) > 8
    assert micro_batch_plan(64, 20) == (16, 4) and micro_batch_plan(12, 100) == (12, 1) and micro_batch_plan(7, 3) == (1, 7)


def test_memory_check_suggests_fewer_larger_micro_batches(workspace: Path) -> None:
    lm_workspace(workspace)
    path = lm_config(workspace, "mem", batch={"size": 2, "accumulate": 8})
    ctx = DoctorContext(run_config=load_run_config(path), config_path=path, settings=load_settings(), device="cpu",
                        tokenizer_path=workspace / "tokenizers" / "en_words.json")
    check = _check(run_doctor(ctx), "memory.batch")
    assert check.status == "pass" and "micro-batches up to" in check.message
    assert "batch.size: 16, batch.accumulate: 1" in check.message
