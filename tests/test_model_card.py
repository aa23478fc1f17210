"""`export --hub-card` (core/model_card.py): the README.md model card holds the figures of the checkpoint's own
quality report (a real `quality_report` over espeak clips, written to the eval.json beside it), the base release
and revision from its metadata, the tokenizer's added pieces, the run's data hours and steps, and the exact
`hf upload` command; `--push` without a token is refused in one line before any file is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from core.audio import read_audio
from core.checkpoint import load_checkpoint, save_checkpoint
from core.cli import main as cli_main
from core.data.manifest import load_manifest_rows
from core.data.sample_text import AMHARIC_SENTENCES
from core.eval.quality.report import SpokenSample, quality_report
from core.eval.tts import update_eval_json
from tests.chatterbox_helpers import chatterbox_workspace

pytestmark = pytest.mark.slow  # the reduced Chatterbox workspace: espeak clips, a merged tokenizer, an extended T3

RECORD = {"release": "chatterbox:v3", "label": "Chatterbox multilingual v3",
          "sources": [{"repo": "ResembleAI/chatterbox", "revision": "0123456789abcdef0123456789abcdef01234567", "files": {}}]}


@pytest.fixture
def evaluated(workspace: Path) -> Path:
    """A run's checkpoint (the extended reduced T3 with a pulled release in its metadata) and its quality report."""
    chatterbox_workspace(workspace)
    loaded = load_checkpoint(workspace / "checkpoints" / "t3_am.safetensors")
    checkpoint = workspace / "runs" / "card" / "checkpoints" / "step_0000040.safetensors"
    checkpoint.parent.mkdir(parents=True)
    save_checkpoint(checkpoint, loaded.state_dict, {**loaded.meta, "step": 40, "release": RECORD})
    (checkpoint.parent.parent / "config.yaml").write_text(
        yaml.safe_dump({"name": "card", "data": {"manifest": "datasets/espeak/manifest.jsonl"}}), encoding="utf-8")
    audio = workspace / "datasets" / "espeak" / "audio"
    clips = [read_audio(audio / f"am_000{i}.wav", 16000)[0] for i in range(3)]
    samples = [SpokenSample(AMHARIC_SENTENCES[i], clips[i], clips[(i + 1) % 3], list(range(20 + 5 * i)), i != 1,
                            list(range(5)), list(range(22))) for i in range(3)]
    quality = quality_report(samples, "am", mos=False)
    update_eval_json(checkpoint.parent / "eval.json", checkpoint.name,
                     {"step": 40, "language": "am", "sentences": 3, "chance": 0.3333, "rows": {}, "quality": quality})
    return checkpoint


def test_the_card_holds_the_quality_reports_figures_and_the_upload_command(workspace: Path, evaluated: Path) -> None:
    out = workspace / "export"
    assert cli_main(["export", "--checkpoint", str(evaluated), "--output", str(out), "--name", "am", "--hub-card"]) == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    quality = json.loads((evaluated.parent / "eval.json").read_text(encoding="utf-8"))["checkpoints"][evaluated.name]["quality"]
    front = yaml.safe_load(card.split("---")[1])
    assert front["base_model"] == "ResembleAI/chatterbox" and front["pipeline_tag"] == "text-to-speech" and "am" in front["language"]
    assert "| base release | Chatterbox multilingual v3 |" in card
    assert "| base repository and revision | ResembleAI/chatterbox@0123456789abcdef0123456789abcdef01234567 |" in card
    meta = load_checkpoint(evaluated).meta
    assert f"{meta['tokenizer_size'] - meta['base_size']} added to the base's 2454 |" in card
    hours = round(sum(r.duration for r in load_manifest_rows(workspace / "datasets" / "espeak" / "manifest.jsonl")) / 3600, 4)
    assert f"| training data | {hours} hours |" in card and "| training steps | 40 |" in card
    assert f"| speaker similarity | {quality['speaker_similarity']} |" in card
    assert "| CER | not measured (no eval.asr hook) |" in card and "| MOS estimate | not measured (DNSMOS off) |" in card
    assert "| failure rate | 0.3333 (1 of 3) |" in card  # the one sentence that did not stop
    assert f"| flags raised | {', '.join(quality['flags_raised']) or 'none'} |" in card
    assert f"hf upload OWNER/NAME {out} . --repo-type model" in card


def test_push_without_a_token_and_a_card_without_a_report_are_refused_before_any_work(
        workspace: Path, evaluated: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_HOME", str(workspace / "hf"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    out = workspace / "export"
    assert cli_main(["export", "--checkpoint", str(evaluated), "--output", str(out), "--push", "me/amharic-tts"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: --push me/amharic-tts: no Hugging Face token is configured; run `hf auth login` (or set "
                   f"HF_TOKEN), or export without --push and upload with `hf upload me/amharic-tts {out} . --repo-type model`.\n")
    assert not out.exists()
    (evaluated.parent / "eval.json").unlink()
    assert cli_main(["export", "--checkpoint", str(evaluated), "--output", str(out), "--hub-card"]) == 2
    assert "no quality report" in capsys.readouterr().err and not out.exists()
