"""A Chatterbox export speaks through the published `ChatterboxMultilingualTTS.generate`.

The export's `speak_chatterbox.py` builds the grown T3 (2,454 + the Amharic rows, which
`from_local` cannot load) and adds `am` to the published `SUPPORTED_LANGUAGES`; it runs here, in
its own process, on the reduced random-initialised folder (tests/chatterbox_helpers.py: one-layer
T3, full random S3Gen) to a wav. The published `generate` always decodes up to 1,000 tokens
unless T3 emits its stop token, and a random T3 does not; the test therefore sets the extended
T3's speech embeddings, speech position table and speech head so that positions 0…K−1 predict
code A and position K the stop token (a weight choice in the real class; everything runs
unchanged), so the published decode yields exactly K codes and S3Gen speaks them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from core.checkpoint import load_checkpoint, save_checkpoint
from core.config import load_settings
from core.families.registry import get_model_family
from tests.chatterbox_helpers import extend_to_amharic, make_chatterbox_speech_folder

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore")]

CODES = 4          # K: codes the rigged T3 emits before its stop token
CODE = 100         # A: a valid S3 speech code (< 6561)
STOP = 6562        # T3's stop-of-speech token
SAMPLES_PER_CODE = 24000 // 25  # S3Gen: 25 codes a second at 24 kHz


def _stop_after(state: dict[str, torch.Tensor], codes: int) -> dict[str, torch.Tensor]:
    """Return `state` with speech embeddings zero, speech positions < `codes` along axis 0 and the
    rest along axis 1 (1,000 long: they dominate the residual stream), and a speech head reading
    axis 0 as CODE and axis 1 as STOP."""
    state = dict(state)
    state["speech_emb.weight"] = torch.zeros_like(state["speech_emb.weight"])
    positions = torch.zeros_like(state["speech_pos_emb.emb.weight"])
    positions[:codes, 0] = 1000.0
    positions[codes:, 1] = 1000.0
    state["speech_pos_emb.emb.weight"] = positions
    head = torch.zeros_like(state["speech_head.weight"])
    head[CODE, 0] = head[STOP, 1] = 1.0
    state["speech_head.weight"] = head
    return state


def test_published_multilingual_tts_speaks_the_export_with_the_new_language(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chatterbox.mtl_tts import SUPPORTED_LANGUAGES

    from tests.data_helpers import make_espeak_dataset

    root = tmp_path / "workspace"
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(root))
    model_dir = make_chatterbox_speech_folder(tmp_path / "chatterbox")
    extend_to_amharic(root, model_dir)
    extended = load_checkpoint(root / "checkpoints" / "t3_am.safetensors")
    rigged = save_checkpoint(root / "checkpoints" / "t3_am_rigged.safetensors", _stop_after(extended.state_dict, CODES), extended.meta)
    settings = load_settings()
    settings.data["families"] = {"chatterbox": {"model_dir": str(model_dir)}}
    export = tmp_path / "export"
    written = get_model_family("chatterbox").export(rigged, export, "am", settings)

    assert [p.name for p in written] == ["t3_am.safetensors", "am.json", "linguaforge.json", "ve.pt", "s3gen.pt", "speak_chatterbox.py"]
    assert os.path.samefile(export / "s3gen.pt", model_dir / "s3gen.pt")          # hard-linked, not copied
    note = json.loads((export / "linguaforge.json").read_text(encoding="utf-8"))
    rows = int(extended.state_dict["text_emb.weight"].shape[0])
    assert note["text_tokens_dict_size"] == rows > 2454 and "am" in note["language_tags"] and "am" not in SUPPORTED_LANGUAGES
    assert note["t3_backbone"]["llama_config"]["num_hidden_layers"] == 1 and note["t3_backbone"]["max_speech_tokens"] == 508
    assert note["missing_for_published_inference"] == []

    clip = sorted((make_espeak_dataset(tmp_path / "voices", per_language=1, languages=("am",))).parent.glob("audio/*.wav"))[0]
    samples, clip_rate = soundfile.read(clip)
    reference = tmp_path / "reference.wav"          # 1 s: S3Gen's flow matching runs over the reference's mel frames too
    soundfile.write(reference, samples[:clip_rate], clip_rate)
    env = {**os.environ, "HF_HOME": str(tmp_path / "empty-hf-home")}
    done = subprocess.run([sys.executable, str(export / "speak_chatterbox.py"), "--text", "ሰላም ለዓለም።", "--language", "am",
                           "--output", str(tmp_path / "out.wav"), "--reference", str(reference)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    wav, rate = soundfile.read(tmp_path / "out.wav")
    assert rate == 24000 and np.isfinite(wav).all()
    assert len(wav) == (CODES - 1) * SAMPLES_PER_CODE      # K codes, the last one's audio dropped by generate()
    assert np.abs(wav).max() > 0

    from chatterbox.mtl_tts import ChatterboxMultilingualTTS

    with pytest.raises(ValueError, match="Unsupported language_id 'am'"):   # the published check the shim extends (in its process)
        ChatterboxMultilingualTTS.generate(object.__new__(ChatterboxMultilingualTTS), "x", "am")
