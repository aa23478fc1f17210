"""The journey's ETA on a real run: sampled every few seconds while a real training stage works, it never freezes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from core.cli.catalogue import cli_catalogue
from core.config import load_settings
from core.progress import PROGRESS_FILE_ENV, StagePlan
from journeys.stages import StageRunner
from tests.trainer_helpers import lm_config, lm_workspace

SAMPLE_S = 2.0


@pytest.mark.slow  # about a minute on a loaded 2-core machine: the worker's training process starts in ~30 s
def test_a_real_stages_eta_moves_at_every_sample_while_it_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny LM training run as the journey's one stage (a job on a real worker in this process, its steps
    reported through its record): every sample of the journey's progress file taken while the stage runs has
    another ETA than the one before — while the process starts (past the stage's estimate), while it trains (its
    own speed) and while it saves and exits after its last step (the quickstart's estimate sat at "1m04s" for
    127 s) — the fraction never goes back, and before any stage ended the ETA says it is unsure and gives a range."""
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tmp_path))
    journey_file = tmp_path / "journey.progress.json"
    monkeypatch.setenv(PROGRESS_FILE_ENV, str(journey_file))
    lm_workspace(tmp_path)
    config = lm_config(tmp_path, "eta", schedule={"max_steps": 200, "val_every": 100000, "save_every": 100000})
    plan = StagePlan(("train",), (8.0,), "the preset's measured figures")  # less than it takes here: it runs long
    outcome: list[dict] = []
    samples: list[dict] = []
    with StageRunner(load_settings(), "queue", embedded_worker=True, plan=plan, catalogue=cli_catalogue()) as stages:
        stage = threading.Thread(target=lambda: outcome.append(
            stages.run("train", "train", {"config": str(config.relative_to(tmp_path))})))
        stage.start()
        deadline = time.monotonic() + 300
        while stage.is_alive() and time.monotonic() < deadline:
            stage.join(SAMPLE_S)
            state = json.loads(journey_file.read_text()) if journey_file.is_file() else {}
            if (state.get("metrics") or {}).get("current") == "train":
                samples.append(state)
    assert outcome and outcome[0]["state"] == "finished", outcome
    assert len(samples) >= 3, f"the stage ended before three samples: {samples}"
    etas = [s["eta_s"] for s in samples]
    assert all(later != earlier for earlier, later in zip(etas, etas[1:])), [
        (round(eta, 2), sample["metrics"]["stage_fraction"]) for eta, sample in zip(etas, samples)]
    fractions = [s["fraction"] for s in samples]
    assert fractions == sorted(fractions) and fractions[-1] < 1.0
    assert all(not s["metrics"]["eta_sure"] and s["metrics"]["eta_note"] for s in samples)
    assert all(s["metrics"]["eta_low_s"] < s["eta_s"] < s["metrics"]["eta_high_s"] for s in samples if s["eta_s"] > 0), samples
