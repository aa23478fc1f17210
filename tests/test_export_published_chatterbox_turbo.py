"""A Chatterbox-Turbo export speaks through the published `ChatterboxTurboTTS.generate`, and LinguaForge's
speaker speaks the same checkpoint through the one-step meanflow S3Gen.

The folder is the reduced Turbo folder (tests/turbo_helpers.py: GPT-2 T3 2 × 256, GPT-2's real tokenizer) with
a random full `S3Gen(meanflow=True)`; its T3 is extended to Amharic (50,276 rows + the merge's), which the
published `from_local` cannot load. The published `generate` samples up to 1,000 tokens unless T3 emits its
stop token, and a random T3 does not; the test therefore sets the extended T3's speech embeddings and speech
head so that the start-of-speech token predicts code A1, A1 predicts A2, A2 predicts A3 and A3 the stop token
(a weight choice in the real class; everything runs unchanged), so every decoder yields exactly those codes.
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
from core.families.base import SynthesisRequest
from core.families.registry import get_model_family
from tests.data_helpers import make_espeak_dataset
from tests.turbo_helpers import extend_turbo_to_amharic, make_turbo_speech_folder

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore"), pytest.mark.timeout(2400)]

START, STOP = 6561, 6562
CODES = (100, 200, 300)            # A1, A2, A3
SAMPLES_PER_CODE = 24000 // 25     # S3Gen: 25 codes a second at 24 kHz
SILENCE = 3                        # generate() appends three silence tokens
SCALE = 1000.0


def _chain(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Return `state` with speech embeddings START, A1, A2, A3 along axes 0–3 (1,000 long: they dominate the
    residual stream) and a speech head reading axis 0 as A1, 1 as A2, 2 as A3 and 3 as STOP."""
    state = dict(state)
    emb = torch.zeros_like(state["speech_emb.weight"])
    head = torch.zeros_like(state["speech_head.weight"])
    for axis, (token, following) in enumerate(zip((START, *CODES), (*CODES, STOP))):
        emb[token, axis] = SCALE
        head[following, axis] = 10.0
    state.update({"speech_emb.weight": emb, "speech_head.weight": head,
                  "speech_head.bias": torch.zeros_like(state["speech_head.bias"])})
    return state


@pytest.fixture(scope="module")
def exported(module_tmp: Path) -> dict[str, Path]:
    root = module_tmp / "workspace"
    patch = pytest.MonkeyPatch()
    patch.setenv("LINGUAFORGE_WORKSPACE", str(root))
    model_dir = make_turbo_speech_folder(root / "models" / "turbo")
    extend_turbo_to_amharic(root, model_dir)
    extended = load_checkpoint(root / "checkpoints" / "t3_am.safetensors")
    rigged = save_checkpoint(root / "checkpoints" / "t3_am_chain.safetensors", _chain(extended.state_dict), extended.meta)
    clips = sorted(make_espeak_dataset(module_tmp / "voices", per_language=4, languages=("am",)).parent.glob("audio/*.wav"))
    voice, rate = [], 16000
    for clip in clips:
        samples, rate = soundfile.read(clip)
        voice.append(samples)
    reference = module_tmp / "reference.wav"   # over 5 s, as prepare_conditionals asserts
    soundfile.write(reference, np.concatenate(voice * 3)[: int(6 * rate)], rate)
    settings = load_settings()
    settings.data["families"] = {"chatterbox-turbo": {"model_dir": str(model_dir)}}
    export = module_tmp / "export"
    get_model_family("chatterbox-turbo").export(rigged, export, None, settings)
    yield {"root": root, "model_dir": model_dir, "rigged": rigged, "export": export, "reference": reference}
    patch.undo()


def test_published_turbo_tts_speaks_the_grown_export_through_its_script(exported: dict[str, Path], tmp_path: Path) -> None:
    export = exported["export"]
    assert os.path.samefile(export / "s3gen_meanflow.safetensors", exported["model_dir"] / "s3gen_meanflow.safetensors")
    note = json.loads((export / "linguaforge.json").read_text(encoding="utf-8"))
    assert note["text_tokens_dict_size"] > 50276 and note["missing_for_published_inference"] == []
    env = {**os.environ, "HF_HOME": str(tmp_path / "empty-hf-home")}
    done = subprocess.run([sys.executable, str(export / "speak_chatterbox_turbo.py"), "--text", "ሰላም ለዓለም።", "--language", "am",
                           "--output", str(tmp_path / "out.wav"), "--reference", str(exported["reference"])],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    wav, rate = soundfile.read(tmp_path / "out.wav")
    assert rate == 24000 and np.isfinite(wav).all() and np.abs(wav).max() > 0
    assert len(wav) == (len(CODES) + SILENCE) * SAMPLES_PER_CODE     # the three codes and generate()'s silence


def test_linguaforge_speaks_the_checkpoint_through_the_meanflow_s3gen(exported: dict[str, Path]) -> None:
    from core.audio import read_audio

    family = get_model_family("chatterbox-turbo")
    output = exported["root"] / "spoken" / "am.wav"
    request = SynthesisRequest(checkpoint=exported["rigged"], text="ሰላም ለዓለም።", output=output,
                               tokenizer=exported["root"] / "tokenizers" / "am.json", reference=exported["reference"],
                               language="am", model_dir=exported["model_dir"], max_new_tokens=20, options={"temperature": 0})
    report = family.synthesize(request, load_settings())
    wav, rate = read_audio(report["output"])
    assert rate == report["sample_rate"] == 24000 and report["tokens"] == list(CODES) and report["stopped"]
    assert wav.numel() == (len(CODES) + SILENCE) * SAMPLES_PER_CODE and torch.isfinite(wav).all()
    # the voice is prepare_conditionals' own: the same tensors from the published call on this (6 s) reference
    speaker = family.load_speaker(exported["rigged"], request.tokenizer, exported["model_dir"], load_settings(), "cpu")
    ours = speaker.conditionals(exported["reference"])
    tts = speaker.voice_models()
    tts.prepare_conditionals(str(exported["reference"]))
    assert torch.equal(ours.t3.cond_prompt_speech_tokens, tts.conds.t3.cond_prompt_speech_tokens)
    assert torch.allclose(ours.t3.speaker_emb, tts.conds.t3.speaker_emb)
    for key, value in tts.conds.gen.items():
        if torch.is_tensor(value):
            assert torch.allclose(ours.gen[key].float(), value.float(), atol=1e-5), key
