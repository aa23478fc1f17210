"""Trainer tests on the LM task: loss falls, exact resume, frozen rows, vocabulary growth, stop paths."""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from core.checkpoint import load_checkpoint
from core.cli import main
from core.config import load_settings
from core.training.embeddings import extend_checkpoint
from core.errors import InputError
from core.training.run_config import load_run_config
from core.recipe import prepare_trainer, train
from tests.trainer_helpers import SPECIALS, english_words, lm_config, lm_workspace, write_word_tokenizer

torch.set_num_threads(1)

NEW_WORDS = ["selam", "buna", "bet", "wuha", "dabo", "ayne"]


def _metrics(workspace: Path, run: str) -> list[dict]:
    lines = (workspace / "runs" / run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _train(workspace: Path, name: str, max_steps: int | None = None, resume: str | None = None, **overrides):
    path = lm_config(workspace, name, **overrides)
    return train(load_run_config(path), path, load_settings(), resume=resume, max_steps=max_steps)


@pytest.fixture
def lm_ws(workspace: Path) -> Path:
    lm_workspace(workspace)
    write_word_tokenizer(workspace / "tokenizers" / "en_plus.json", english_words() + NEW_WORDS)
    swapped = english_words()
    swapped[3], swapped[4] = swapped[4], swapped[3]
    write_word_tokenizer(workspace / "tokenizers" / "en_swapped.json", swapped)
    return workspace


def test_loss_falls_and_run_folder_follows_the_contract(lm_ws: Path) -> None:
    result = _train(lm_ws, "falls", schedule={"max_steps": 24, "val_every": 12, "save_every": 8, "keep_last": 2, "log_every": 4})
    assert result.state == "finished" and result.step == 24
    train_losses = [m["loss"] for m in _metrics(lm_ws, "falls") if m["split"] == "train"]
    val = [m for m in _metrics(lm_ws, "falls") if m["split"] == "val"]
    assert train_losses[-1] < train_losses[0] - 0.5, train_losses
    assert val[-1]["loss"] < val[0]["loss"] and 0 < val[-1]["bpb"] < 3
    run = lm_ws / "runs" / "falls"
    assert {p.name for p in (run / "checkpoints").iterdir()} == {"step_0000016.pt", "step_0000024.pt", "best.pt"}
    assert (run / "config.yaml").is_file() and any((run / "tb").iterdir())
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 24 and status["last_checkpoint"].endswith("step_0000024.pt")
    loaded = load_checkpoint(run / "checkpoints" / "step_0000024.pt")
    assert loaded.meta["family"] == "linguaforge" and loaded.meta["rows"] == len(SPECIALS) + len(english_words())
    assert loaded.state_dict["text_head.bias"].shape[0] == loaded.meta["tokenizer_size"]
    assert set(loaded.extra) >= {"optimizer", "scheduler", "rng", "step", "data_position", "best_val_loss"}
    # a checkpoint records the best validation loss up to and including its own step's
    assert loaded.extra["best_val_loss"] == result.best_val_loss == min(m["loss"] for m in val)


def test_resume_continues_exactly(lm_ws: Path) -> None:
    _train(lm_ws, "straight")
    first = _train(lm_ws, "paused", max_steps=3)
    assert first.state == "finished" and first.step == 3
    second = _train(lm_ws, "paused", resume="auto")
    assert second.step == 6 and second.info["resumed_from"].endswith("step_0000003.pt")
    straight = {m["step"]: m for m in _metrics(lm_ws, "straight") if m["split"] == "train"}
    paused = {m["step"]: m for m in _metrics(lm_ws, "paused") if m["split"] == "train"}
    for step in (4, 5, 6):
        assert paused[step]["loss"] == pytest.approx(straight[step]["loss"], rel=1e-5, abs=1e-6)
        assert paused[step]["lr"] == pytest.approx(straight[step]["lr"], rel=1e-9)


def test_resume_inside_a_log_window_logs_what_the_uninterrupted_run_logs(lm_ws: Path) -> None:
    window = {"log_every": 2}
    _train(lm_ws, "w-straight", schedule=window)
    _train(lm_ws, "w-paused", max_steps=3, schedule=window)
    _train(lm_ws, "w-paused", resume="auto", schedule=window)
    straight = {m["step"]: m for m in _metrics(lm_ws, "w-straight") if m["split"] == "train"}
    paused = {m["step"]: m for m in _metrics(lm_ws, "w-paused") if m["split"] == "train"}
    assert sorted(straight) == [2, 4, 6] and sorted(paused) == [2, 3, 4, 6]
    for step in (4, 6):  # step 4's line is the mean of steps 3 and 4 in both runs
        for key in ("loss", "grad_norm"):
            assert paused[step][key] == pytest.approx(straight[step][key], rel=1e-6), (step, key)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_a_failing_compile_falls_back_to_eager_with_the_same_results(lm_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import core.training.trainer as trainer_module

    def broken_backend(graph, example_inputs):  # noqa: ANN001, ANN202 — a real torch.compile backend that fails
        raise RuntimeError("no C compiler for this backend")

    eager = _train(lm_ws, "eager", compile=False)
    monkeypatch.setattr(trainer_module, "COMPILE_BACKEND", broken_backend)
    fallback = _train(lm_ws, "fallback", compile=True)
    assert eager.state == fallback.state == "finished" and fallback.info["compile"] is False
    log = (lm_ws / "runs" / "fallback" / "log.txt").read_text()
    assert "torch.compile failed" in log and "no C compiler" in log
    losses = {run: [m["loss"] for m in _metrics(lm_ws, run) if m["split"] == "train"] for run in ("eager", "fallback")}
    assert losses["fallback"] == losses["eager"]


def test_frozen_base_rows_bit_identical_after_extension_and_weight_decay(lm_ws: Path) -> None:
    base = _train(lm_ws, "en-base")
    extended = lm_ws / "checkpoints" / "en_plus.pt"
    extend_checkpoint(base.last_checkpoint, lm_ws / "tokenizers/en_words.json", lm_ws / "tokenizers/en_plus.json", extended)
    result = _train(lm_ws, "frozen", tokenizer="tokenizers/en_plus.json", base_checkpoint="checkpoints/en_plus.pt",
                    optim={"weight_decay": 0.1, "lr": 1.0e-2})
    before = load_checkpoint(extended).state_dict
    after = load_checkpoint(result.last_checkpoint).state_dict
    n_base = len(SPECIALS) + len(english_words())
    assert result.info["frozen_rows"] == n_base
    for key in ("text_embedding.weight", "text_head.weight", "text_head.bias"):
        assert torch.equal(after[key][:n_base], before[key][:n_base]), key
        assert not torch.equal(after[key][n_base:], before[key][n_base:]), key
    assert not torch.equal(after["gpt.blocks.0.mlp.fc.weight"], before["gpt.blocks.0.mlp.fc.weight"])
    sha = result.base_rows_sha256
    assert sha["start"] is not None and sha["start"] == sha["now"]
    status = json.loads((lm_ws / "runs" / "frozen" / "status.json").read_text())
    assert status["base_rows_sha256"] == sha


def test_vocabulary_growth_resume_remaps_adam_rows(lm_ws: Path) -> None:
    _train(lm_ws, "grow", max_steps=3, freeze={"mode": "none"})
    saved = load_checkpoint(lm_ws / "runs" / "grow" / "checkpoints" / "step_0000003.pt").extra
    path = lm_config(lm_ws, "grow", tokenizer="tokenizers/en_plus.json", freeze={"mode": "none"})
    trainer = prepare_trainer(load_run_config(path), path, load_settings(), resume="auto")
    index = trainer.param_names.index("text_embedding.weight_new")
    old = saved["optimizer"]["state"][saved["optimizer_names"].index("text_embedding.weight_new")]
    state = trainer.optimizer.state[trainer.model.text_embedding.weight_new]
    n_old = len(SPECIALS) + len(english_words())
    assert trainer.param_names[index] == "text_embedding.weight_new"
    assert state["exp_avg"].shape[0] == n_old + len(NEW_WORDS)
    assert torch.equal(state["exp_avg"][:n_old], old["exp_avg"]) and torch.equal(state["exp_avg_sq"][:n_old], old["exp_avg_sq"])
    assert not state["exp_avg"][n_old:].any() and not state["exp_avg_sq"][n_old:].any()
    assert trainer.grown_rows == {"text_embedding.weight_new": n_old, "text_head.weight_new": n_old, "text_head.bias_new": n_old}
    assert trainer.step == 3 and trainer.scheduler.last_epoch == 3
    result = trainer.run()
    assert result.state == "finished" and result.step == 6
    final = load_checkpoint(result.last_checkpoint)
    assert final.meta["rows"] == n_old + len(NEW_WORDS)
    # the word-level base cannot spell the new words, so FVT fell back to the mean: recorded as such
    assert (final.meta["init"], final.meta["init_rows"]) == ("mean", {"mean": len(NEW_WORDS)})
    assert final.extra["row_warmup"] == {"rows": trainer.grown_rows, "steps": 50, "done": 3}


def test_non_prefix_tokenizer_is_refused_with_the_first_differing_id(lm_ws: Path) -> None:
    _train(lm_ws, "refuse", max_steps=3)
    with pytest.raises(InputError, match=r"id 7 is .* not a prefix extension|not a prefix extension.*id 7"):
        _train(lm_ws, "refuse", resume="auto", tokenizer="tokenizers/en_swapped.json")


def _stop_when(workspace: Path, run: str, action) -> threading.Thread:  # noqa: ANN001
    status = workspace / "runs" / run / "status.json"

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if json.loads(status.read_text()).get("step", 0) >= 2:
                    action()
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("how", ["stop-file", "sigterm"])
def test_stop_file_and_sigterm_save_a_clean_checkpoint(lm_ws: Path, how: str) -> None:
    run = f"stop-{how}"
    action = (lambda: (lm_ws / "runs" / run / "STOP").touch()) if how == "stop-file" else (
        lambda: os.kill(os.getpid(), signal.SIGTERM))
    thread = _stop_when(lm_ws, run, action)
    handler = signal.getsignal(signal.SIGTERM)
    result = _train(lm_ws, run, schedule={"max_steps": 5000, "save_every": 1000, "val_every": 1000, "log_every": 1})
    thread.join(5)
    assert result.state == "stopped" and 2 <= result.step < 5000
    status = json.loads((lm_ws / "runs" / run / "status.json").read_text())
    assert status["state"] == "stopped" and status["step"] == result.step
    loaded = load_checkpoint(result.last_checkpoint)
    assert loaded.extra["step"] == result.step and loaded.meta["step"] == result.step
    assert signal.getsignal(signal.SIGTERM) == handler


def test_cli_train_json_help_and_bad_input(lm_ws: Path, capsys: pytest.CaptureFixture) -> None:
    path = lm_config(lm_ws, "cli")
    assert main(["train", "--config", str(path), "--max-steps", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "finished" and data["step"] == 2 and data["run_dir"].endswith("runs/cli")
    bad = lm_config(lm_ws, "cli-bad", tokenizer="tokenizers/missing.json")
    assert main(["train", "--config", str(bad), "--json"]) == 2
    assert "missing.json" in json.loads(capsys.readouterr().out)["error"]
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0 and "--resume" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bf16_autocast_on_cuda_trains_and_keeps_fp32_weights(lm_ws: Path) -> None:
    result = _train(lm_ws, "cuda", schedule={"max_steps": 12, "val_every": 12, "save_every": 12, "log_every": 4})
    assert result.info["device"].startswith("cuda") and result.state == "finished"
    losses = [m["loss"] for m in _metrics(lm_ws, "cuda") if m["split"] == "train"]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    state = load_checkpoint(result.last_checkpoint).state_dict
    assert all(t.dtype == torch.float32 for t in state.values() if t.is_floating_point())


def test_a_failing_setup_writes_a_failed_status(lm_ws: Path) -> None:
    with pytest.raises(InputError, match="not_there.txt"):
        _train(lm_ws, "fails", data={"corpus": ["corpus/not_there.txt"]})
    status = json.loads((lm_ws / "runs" / "fails" / "status.json").read_text())
    assert status["state"] == "failed" and "not_there.txt" in status["error"]


def test_reset_optimizer_is_explicit_and_keeps_the_schedule(lm_ws: Path) -> None:
    _train(lm_ws, "reset", max_steps=3)
    path = lm_config(lm_ws, "reset")
    kept = prepare_trainer(load_run_config(path), path, load_settings(), resume="auto")
    fresh = prepare_trainer(load_run_config(path), path, load_settings(), resume="auto", reset_optimizer=True)
    assert len(kept.optimizer.state) == len(kept.param_names) and len(fresh.optimizer.state) == 0
    assert fresh.step == kept.step == 3 and fresh.scheduler.last_epoch == 3
    assert fresh.scheduler.get_last_lr() == kept.scheduler.get_last_lr()
    assert [g["lr"] for g in fresh.optimizer.param_groups] == [g["lr"] for g in kept.optimizer.param_groups]
