"""Base-language replay (`data.replay`): the set share of every sampled batch is base-language clips,
the position resumes, and the run reports it (status.json, log) with base-language val metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core.config import load_settings
from core.errors import InputError
from core.recipe import prepare_trainer
from core.training.data import ReplayBatcher, replay_count
from core.training.run_config import run_config_from_dict
from tests.test_trainer_tts import _run, tts_ws  # noqa: F401 — the module workspace fixture (espeak en+am, codec, tokenizers)

torch.set_num_threads(1)


def test_replay_batches_hold_the_share_and_resume_at_the_same_batches() -> None:
    new, replay = [5 + i % 7 for i in range(37)], [3 + i % 5 for i in range(11)]
    batcher = ReplayBatcher(new, replay, batch_size=8, replayed=replay_count(8, 0.25), seed=3)
    batches = [b for b, _ in zip(batcher, range(30))]  # several epochs of the 11 replay clips
    assert all(sum(i >= 37 for i in b) == 2 for b in batches)
    assert sum(len(b) == 8 for b in batches) >= 25  # a new-language epoch's last batch may be short
    assert {i - 37 for b in batches for i in b if i >= 37} == set(range(11))  # every replay clip comes round
    again = ReplayBatcher(new, replay, batch_size=8, replayed=2, seed=3)
    stream = iter(again)
    for _ in range(13):
        next(stream)
    state = again.state_dict()
    resumed = ReplayBatcher(new, replay, batch_size=8, replayed=2, seed=3)
    resumed.load_state_dict(state)
    assert [b for b, _ in zip(resumed, range(5))] == batches[13:18]


@pytest.mark.parametrize("size, share, count", [(4, 0.25, 1), (16, 0.3, 5), (2, 0.9, 1), (10, 0.01, 1)])
def test_replay_count_rounds_and_leaves_room_for_both(size: int, share: float, count: int) -> None:
    assert replay_count(size, share) == count


def test_replay_refuses_a_share_outside_0_1_and_a_batch_of_one() -> None:
    with pytest.raises(InputError, match=r"data\.replay\.share: 1\.0"):
        run_config_from_dict({"name": "x", "data": {"replay": {"manifest": "d/en.jsonl", "share": 1.0}}}, "run.yaml")
    with pytest.raises(InputError, match="batch.size 1"):
        replay_count(1, 0.5)


def test_a_replay_run_mixes_english_clips_into_every_batch_and_reports_them(tts_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tts_ws))
    sample = tts_ws / "datasets" / "sample"
    amharic = [line for line in (sample / "manifest.jsonl").read_text().splitlines() if json.loads(line)["language"] == "am"]
    (sample / "am.jsonl").write_text("\n".join(amharic) + "\n")
    config = run_config_from_dict(_run("replay", "datasets/sample/am.jsonl", "tokenizers/en_am.model", 4,
                                       data={"manifest": "datasets/sample/am.jsonl", "val_ratio": 0.2,
                                             "replay": {"manifest": "datasets/sample/en.jsonl", "share": 0.25}}))
    trainer = prepare_trainer(config, None, load_settings())
    offset = trainer.batcher.offset
    assert offset == len(trainer.data.train.lengths) - trainer.replay["clips"] and trainer.replay["per_batch"] == 1
    for batch in trainer.batcher.upcoming(6):
        assert len(batch) <= 4 and sum(i >= offset for i in batch) == 1
    result = trainer.run()
    assert result.state == "finished" and "base_loss" in result.val and "loss" in result.val
    status = json.loads((tts_ws / "runs" / "replay" / "status.json").read_text())
    assert status["replay"] == trainer.replay and status["replay"]["share"] == 0.25
    assert "'replay': {'manifest': 'datasets/sample/en.jsonl'" in (tts_ws / "runs" / "replay" / "log.txt").read_text()


@pytest.mark.slow
def test_replay_keeps_more_english_than_the_same_fine_tune_without_it(tts_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The same English base, Amharic data, seed and steps, fine-tuned with and without 25 % English replay: the
    English validation loss rises less with replay (each measured on the same English validation clips)."""
    from core.recipe import train
    from core.training.embeddings import extend_checkpoint

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tts_ws))
    settings = load_settings()
    sample = tts_ws / "datasets" / "sample"
    amharic = [line for line in (sample / "manifest.jsonl").read_text().splitlines() if json.loads(line)["language"] == "am"]
    (sample / "am.jsonl").write_text("\n".join(amharic) + "\n")
    loss = {"text_weight": 0.0, "mel_weight": 1.0}
    base = train(run_config_from_dict(_run("ret-en", "datasets/sample/en.jsonl", "tokenizers/en.model", 60, loss=loss)),
                 None, settings)
    start = tts_ws / "checkpoints" / "ret_en_am.pt"
    extend_checkpoint(base.last_checkpoint, tts_ws / "tokenizers/en.model", tts_ws / "tokenizers/en_am.model", start)

    def english_loss(checkpoint: str) -> float:
        config = _run("ret-en-val", "datasets/sample/en.jsonl", "tokenizers/en_am.model", 1, loss=loss,
                      base_checkpoint=checkpoint, freeze={"mode": "none"})
        return prepare_trainer(run_config_from_dict(config), None, settings).validate()["loss"]

    def fine_tune(name: str, **data: object) -> float:
        config = _run(name, "datasets/sample/am.jsonl", "tokenizers/en_am.model", 40, loss=loss,
                      base_checkpoint=str(start), optim={"lr": 4.0e-3, "warmup_steps": 3},
                      data={"manifest": "datasets/sample/am.jsonl", "val_ratio": 0.2, **data})
        return english_loss(str(train(run_config_from_dict(config), None, settings).last_checkpoint))

    before = english_loss(str(start))
    alone = fine_tune("ret-alone")
    replayed = fine_tune("ret-replay", replay={"manifest": "datasets/sample/en.jsonl", "share": 0.25})
    rise_alone, rise_replayed = (alone - before) / before, (replayed - before) / before
    assert rise_alone > 0.05, (before, alone)  # Amharic alone makes English worse…
    assert rise_replayed < rise_alone - 0.02, (before, alone, replayed)  # …and replay keeps more of it
