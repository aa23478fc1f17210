"""IndexTTS2's audio front end, as the published `indextts.infer_v2.IndexTTS2` reads a clip.

The ONE place the feature cache and synthesis turn a file into waveforms:

- `speaker_audio` (IndexTTS2's `_get_speaker_conditioning`): load at 22.05 kHz (`librosa.load`'s
  default rate and soxr_hq resampler), cut to 15 s, then torchaudio's `Resample(22050, 16000)` for
  w2v-BERT. The 16 kHz waveform gives the speaker latents, the semantic codes and CAMPPlus's
  style; the 22.05 kHz one the reference mel.
- `emotion_audio` (IndexTTS2's `_get_emotion_conditioning`): the same file loaded at 16 kHz
  directly and cut to 15 s; its features give the emotion vector (with no separate emotion
  prompt, IndexTTS2 uses the speaker's clip here).

A training target's codes come from `speaker_audio` uncut (`max_seconds=None`): the cut applies to
prompts only. `FRONT_END_VERSION` is part of the feature cache fingerprint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from core.audio import read_audio, resample

SPEAKER_RATE = 22050
FEATURE_RATE = 16000
MAX_PROMPT_SECONDS = 15
FRONT_END_VERSION = "indextts2-2.1.1-librosa22050-cut15-torchaudio16k-emotion16k-1"


@dataclass(frozen=True)
class SpeakerAudio:
    """A speaker clip at 22.05 kHz [1, N] and resampled to 16 kHz [1, M]."""

    wav_22k: torch.Tensor
    wav_16k: torch.Tensor


def load_and_cut(path: str | os.PathLike[str], rate: int, max_seconds: float | None) -> torch.Tensor:
    """Return the mono waveform [1, N] of `path` at `rate` Hz, cut to `max_seconds` (None: whole),
    as IndexTTS2's `_load_and_cut_audio` (librosa.load, soxr_hq) reads it.

    Raises InputError naming the file when it is missing, unreadable, empty or not finite.
    """
    import librosa

    wav, native = read_audio(path)
    if native != rate:
        wav = torch.from_numpy(librosa.resample(wav.numpy(), orig_sr=native, target_sr=rate, res_type="soxr_hq"))
    if max_seconds is not None:
        wav = wav[: int(max_seconds * rate)]
    return wav.unsqueeze(0)


def speaker_audio(path: str | os.PathLike[str], max_seconds: float | None = MAX_PROMPT_SECONDS) -> SpeakerAudio:
    """Return the clip as IndexTTS2's speaker front end gives it: 22.05 kHz, cut, resampled to 16 kHz.

    Raises InputError as `load_and_cut` does.
    """
    wav_22k = load_and_cut(path, SPEAKER_RATE, max_seconds)
    return SpeakerAudio(wav_22k, resample(wav_22k[0], SPEAKER_RATE, FEATURE_RATE).unsqueeze(0))


def emotion_audio(path: str | os.PathLike[str]) -> torch.Tensor:
    """Return the clip [1, N] as IndexTTS2's emotion front end gives it: loaded at 16 kHz, cut to 15 s.

    Raises InputError as `load_and_cut` does.
    """
    return load_and_cut(path, FEATURE_RATE, MAX_PROMPT_SECONDS)
