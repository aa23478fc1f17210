"""The v3 journey from the Hub cache, offline: `models pull chatterbox:v3` from a cache holding the reduced
multilingual release with only a v3 T3 (`t3_mtl23ls_v3.safetensors`, full random S3Gen), a run whose
`model_dir: hf:ResembleAI/chatterbox` trains from that T3 and records the release's revision and sha256s in its
checkpoint, the export loading strictly into a fresh published T3, and the export speaking through the published
`ChatterboxMultilingualTTS` (its `speak_chatterbox.py`, the T3 set to stop after K codes as in
tests/test_export_published_chatterbox.py)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
import yaml

from core.checkpoint import load_checkpoint, save_checkpoint
from core.config import load_settings
from core.families.registry import get_model_family
from tests.chatterbox_helpers import REDUCED, make_chatterbox_speech_folder
from tests.data_helpers import make_espeak_dataset
from tests.hub_helpers import cache_repo, folder_files
from tests.test_export_published_chatterbox import CODES, SAMPLES_PER_CODE, _stop_after

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400), pytest.mark.filterwarnings("ignore")]


def test_a_pulled_v3_release_trains_exports_strictly_and_speaks_through_the_published_class(
        cli, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chatterbox.models.t3 import T3
    from safetensors.torch import load_file

    from core.families.chatterbox.t3 import ChatterboxConfig, t3_hparams

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    release = make_chatterbox_speech_folder(tmp_path / "release", copy=True)
    (release / "t3_mtl23ls_v2.safetensors").rename(release / "t3_mtl23ls_v3.safetensors")
    commit = cache_repo(tmp_path / "hf", "ResembleAI/chatterbox", folder_files(release))
    make_espeak_dataset(workspace / "datasets" / "en", per_language=4, languages=("en",))
    config = {"name": "v3", "family": "chatterbox", "model_dir": "hf:ResembleAI/chatterbox",
              "tokenizer": "models/ResembleAI-chatterbox/grapheme_mtl_merged_expanded_v1.json",
              "data": {"manifest": "datasets/en/manifest.jsonl", "val_ratio": 0.25}, "batch": {"size": 2},
              "optim": {"lr": 1.0e-3, "warmup_steps": 1},
              "schedule": {"max_steps": 2, "val_every": 2, "save_every": 2, "keep_last": 1, "log_every": 1}}
    (workspace / "v3.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert cli("models", "pull", "hf:ResembleAI/chatterbox").code == 0   # the tokenizer the config names
    run = cli("train", "--config", str(workspace / "v3.yaml"))
    assert run.code == 0, run.stderr[-3000:]
    checkpoint = workspace / "runs" / "v3" / "checkpoints" / "step_0000002.pt"
    trained = load_checkpoint(checkpoint)
    record = trained.meta["release"]
    assert record["release"] == "chatterbox:v3" and record["sources"][0]["revision"] == commit
    assert record["sources"][0]["files"]["t3_mtl23ls_v3.safetensors"] == \
        hashlib.sha256((release / "t3_mtl23ls_v3.safetensors").read_bytes()).hexdigest()
    assert trained.meta["parent"] == load_checkpoint(workspace / "models" / "ResembleAI-chatterbox" / "t3_mtl23ls_v3.safetensors").sha256

    tokenizer = workspace / "models" / "ResembleAI-chatterbox" / "grapheme_mtl_merged_expanded_v1.json"
    (workspace / "tokenizers").mkdir()
    shutil.copyfile(tokenizer, workspace / "tokenizers" / tokenizer.name)  # where an export looks for a checkpoint's tokenizer
    rigged = save_checkpoint(tmp_path / "rigged.safetensors", _stop_after(trained.state_dict, CODES), trained.meta)
    settings = load_settings()
    settings.data["families"] = {"chatterbox": {"model_dir": str(workspace / "models" / "ResembleAI-chatterbox")}}
    export = tmp_path / "export"
    get_model_family("chatterbox").export(rigged, export, "v3en", settings)
    fresh = T3(t3_hparams(ChatterboxConfig(text_tokens_dict_size=2454, **REDUCED)))
    fresh.load_state_dict(load_file(str(export / "t3_v3en.safetensors")), strict=True)

    clip = sorted((workspace / "datasets" / "en" / "audio").glob("*.wav"))[0]
    samples, rate = soundfile.read(clip)
    soundfile.write(tmp_path / "reference.wav", samples[:rate], rate)
    done = subprocess.run([sys.executable, str(export / "speak_chatterbox.py"), "--text", "Hello there.", "--language", "en",
                           "--output", str(tmp_path / "out.wav"), "--reference", str(tmp_path / "reference.wav")],
                          cwd=tmp_path, env={**os.environ, "HF_HOME": str(tmp_path / "empty-hf-home")},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    wav, out_rate = soundfile.read(tmp_path / "out.wav")
    assert out_rate == 24000 and np.isfinite(wav).all() and np.abs(wav).max() > 0
    assert len(wav) == (CODES - 1) * SAMPLES_PER_CODE
