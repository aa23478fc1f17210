"""Doctor checks added by the trainer: resume compatibility and the memory estimate."""

from __future__ import annotations

from pathlib import Path

import torch

from core.config import load_settings
from core.checks.doctor import DoctorContext, run_doctor
from core.training.run_config import load_run_config
from core.training.memory import estimate_bytes, largest_fitting_batch, micro_batch_plan
from core.training.trainer import train
from tests.trainer_helpers import english_words, lm_config, lm_workspace, write_word_tokenizer

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


def test_memory_estimate_scales_and_suggests_a_batch() -> None:
    config = {"d_model": 512, "n_layers": 8, "n_heads": 8, "max_text_tokens": 400, "max_speech_tokens": 800,
              "text_rows": 12000, "codebook_size": 8192, "n_mels": 80, "n_latents": 4}
    one, eight = (estimate_bytes(config, "tts", b, half_activations=True) for b in (1, 8))
    assert one["states"] == eight["states"] == one["parameters"] * 16
    assert 30e6 < one["parameters"] < 60e6
    assert eight["activations"] == 8 * one["activations"]
    budget = one["states"] + 3 * one["activations"] + 1
    assert largest_fitting_batch(config, "tts", True, budget, 32) == 3
    assert largest_fitting_batch(config, "tts", True, one["states"], 32) == 0


def test_memory_check_passes_for_the_tiny_preset(workspace: Path) -> None:
    lm_workspace(workspace)
    path = lm_config(workspace, "mem")
    ctx = DoctorContext(run_config=load_run_config(path), config_path=path, settings=load_settings(), device="cpu",
                        tokenizer_path=workspace / "tokenizers" / "en_words.json")
    check = _check(run_doctor(ctx), "memory.batch")
    assert check.status == "pass" and "free" in check.message and "MiB" in check.message


def test_checkpointing_shrinks_activations_and_the_plan_keeps_the_effective_batch() -> None:
    config = {"d_model": 1280, "n_layers": 24, "n_heads": 20, "max_text_tokens": 400, "max_speech_tokens": 800,
              "text_rows": 12000, "codebook_size": 8192, "n_mels": 80, "n_latents": 4}
    plain = estimate_bytes(config, "tts", 8, half_activations=True)
    recomputed = estimate_bytes(config, "tts", 8, half_activations=True, checkpointing=True)
    assert recomputed["states"] == plain["states"] and recomputed["activations"] < plain["activations"] / 2
    budget = plain["states"] + plain["activations"]
    assert largest_fitting_batch(config, "tts", True, budget, 512, checkpointing=True) > 8
    assert micro_batch_plan(64, 20) == (16, 4) and micro_batch_plan(12, 100) == (12, 1) and micro_batch_plan(7, 3) == (1, 7)


def test_memory_check_suggests_fewer_larger_micro_batches(workspace: Path) -> None:
    lm_workspace(workspace)
    path = lm_config(workspace, "mem", batch={"size": 2, "accumulate": 8})
    ctx = DoctorContext(run_config=load_run_config(path), config_path=path, settings=load_settings(), device="cpu",
                        tokenizer_path=workspace / "tokenizers" / "en_words.json")
    check = _check(run_doctor(ctx), "memory.batch")
    assert check.status == "pass" and "micro-batches up to" in check.message
    assert "batch.size: 16, batch.accumulate: 1" in check.message
