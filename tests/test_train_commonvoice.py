"""A TTS run trains end to end from a Common Voice import: import with filters → speaker split (the CLI's and
the run config's `data.split: speaker`, the same speakers) → codec → tokenizer → the own model trained a few
steps on CPU on the train speakers only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core.config import load_settings
from core.data.manifest import read_manifest
from core.data.sample_text import AMHARIC_SENTENCES
from core.recipe import train
from core.tokenizers.train import train_tokenizer
from core.training.run_config import run_config_from_dict
from tests.cv_helpers import make_release
from tests.data_helpers import make_codec, run_cli

torch.set_num_threads(1)


def test_own_model_trains_from_a_filtered_commonvoice_import_on_train_speakers(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "workspace"
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
    release = make_release(workspace / "inputs" / "cv", per_language=12)
    dataset = workspace / "datasets" / "cv"
    imported = run_cli("dataset", "import", "--format", "commonvoice", "--input", release.folder, "--output", dataset,
                       "--filter", "--confine-to-roots", "--json")
    assert imported.code == 0, imported.stderr
    assert (imported.json()["kept"], imported.json()["rejected"]) == (12, 3)
    assert imported.json()["filters"]["removed"]["duplicate"] == 0
    split = run_cli("dataset", "split", "--manifest", dataset / "manifest.jsonl", "--by", "speaker",
                    "--val-ratio", "0.3", "--write", "--json")
    assert split.code == 0, split.stderr
    train_rows, _ = read_manifest(dataset / "manifest.train.jsonl")
    val_rows, _ = read_manifest(dataset / "manifest.val.jsonl")
    assert len(train_rows) == len(val_rows) == 6 and not {r.speaker for r in train_rows} & {r.speaker for r in val_rows}
    (workspace / "codecs").mkdir()
    make_codec(dataset / "manifest.jsonl", workspace / "codecs" / "cv.pt", codebook_size=64, iterations=20)
    train_tokenizer(list(AMHARIC_SENTENCES), "sentencepiece", 300, workspace / "tokenizers" / "am.model")
    config = run_config_from_dict({
        "preset": "tiny", "name": "cv-am", "tokenizer": "tokenizers/am.model", "codec": "codecs/cv.pt",
        "data": {"manifest": "datasets/cv/manifest.jsonl", "val_ratio": 0.3, "split": "speaker"},
        "model": {"preset": "tiny", "max_speech_tokens": 400}, "batch": {"size": 2},
        "optim": {"lr": 2.0e-3, "warmup_steps": 2},
        "schedule": {"max_steps": 6, "val_every": 6, "save_every": 6, "log_every": 2},
    })
    result = train(config, None, load_settings())
    assert Path(result.last_checkpoint).is_file()
    [index] = [json.loads(p.read_text()) for p in (workspace / "cache").glob("*/index.json")]
    by_split = {name: {e["speaker"] for e in index["items"] if e["split"] == name} for name in ("train", "val")}
    assert by_split == {"train": {r.speaker for r in train_rows}, "val": {r.speaker for r in val_rows}}
    metrics = [json.loads(line) for line in (workspace / "runs" / "cv-am" / "metrics.jsonl").read_text().splitlines()]
    train_mel = [m["mel_loss"] for m in metrics if m["split"] == "train"]
    assert len(train_mel) >= 2 and all(torch.isfinite(torch.tensor(train_mel)))
    assert train_mel[-1] < train_mel[0], train_mel


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_chatterbox_reduced_trains_from_a_filtered_commonvoice_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.chatterbox_helpers import extend_to_amharic, make_chatterbox_folder

    workspace = tmp_path / "workspace"
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
    release = make_release(workspace / "inputs" / "cv", per_language=8)
    imported = run_cli("dataset", "import", "--format", "commonvoice", "--input", release.folder,
                       "--output", workspace / "datasets" / "cv", "--filter", "--json")
    assert imported.code == 0 and imported.json()["kept"] == 8, imported.stderr
    model_dir = make_chatterbox_folder(workspace / "models" / "chatterbox")
    extend_to_amharic(workspace, model_dir)
    config = run_config_from_dict({
        "name": "cb-cv", "family": "chatterbox", "model_dir": "models/chatterbox", "tokenizer": "tokenizers/am.json",
        "base_checkpoint": "checkpoints/t3_am.safetensors",
        "data": {"manifest": "datasets/cv/manifest.jsonl", "val_ratio": 0.25},
        "optim": {"lr": 2.0e-3, "weight_decay": 0.1, "warmup_steps": 1}, "batch": {"size": 2},
        "schedule": {"max_steps": 3, "val_every": 3, "save_every": 3, "keep_last": 1, "log_every": 1},
    }, "cb-cv.yaml")
    result = train(config, settings=load_settings())
    assert Path(result.last_checkpoint).is_file()
    metrics = [json.loads(line) for line in (workspace / "runs" / "cb-cv" / "metrics.jsonl").read_text().splitlines()]
    losses = [m["loss"] for m in metrics if m["split"] == "train"]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
