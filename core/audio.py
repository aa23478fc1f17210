"""Audio reading, conversion and writing.

Audio is read with soundfile (wav, flac, ogg, mp3), mixed down to mono and resampled with
torchaudio to the requested rate. Waveforms are float32 1-D tensors in [-1, 1].
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torchaudio

from core.errors import InputError
from core.fsutil import atomic_write

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3")


@lru_cache(maxsize=16)
def _resampler(source_rate: int, target_rate: int) -> torchaudio.transforms.Resample:
    return torchaudio.transforms.Resample(source_rate, target_rate)


def resample(wav: torch.Tensor, source_rate: int, target_rate: int) -> torch.Tensor:
    """Return `wav` (1-D float tensor) resampled from `source_rate` to `target_rate` Hz."""
    if source_rate == target_rate:
        return wav
    with torch.no_grad():
        return _resampler(int(source_rate), int(target_rate))(wav.unsqueeze(0)).squeeze(0)


def check_finite(data: np.ndarray, path: str | os.PathLike[str]) -> None:
    """Raise InputError naming `path` when any sample of `data` is NaN or infinite."""
    bad = int(np.size(data) - np.count_nonzero(np.isfinite(data)))
    if bad:
        raise InputError(f"{path}: {bad} audio sample(s) are not finite (NaN or Inf); the file is corrupt. "
                         "Re-export the recording.")


def read_audio(path: str | os.PathLike[str], sample_rate: int | None = None) -> tuple[torch.Tensor, int]:
    """Return (mono float32 waveform, rate); resampled to `sample_rate` when given.

    Raises InputError naming the file when it is missing, unreadable, holds no samples or
    holds NaN/Inf samples.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: audio file not found.")
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: unreadable audio ({exc}). Convert it to wav, flac, ogg or mp3.") from exc
    if data.shape[0] == 0:
        raise InputError(f"{path}: the audio file holds no samples.")
    check_finite(data, path)
    wav = torch.from_numpy(np.ascontiguousarray(data[:, 0] if data.shape[1] == 1 else data.mean(axis=1)))
    if sample_rate is not None and rate != sample_rate:
        wav = resample(wav, rate, sample_rate)
        rate = sample_rate
    return wav, int(rate)


def audio_duration(path: str | os.PathLike[str]) -> float:
    """Return the duration of an audio file in seconds from its header.

    Raises InputError when the file is missing or unreadable.
    """
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: unreadable audio ({exc}).") from exc
    return float(info.frames) / float(info.samplerate)


def write_wav(path: str | os.PathLike[str], wav: torch.Tensor, sample_rate: int) -> Path:
    """Write `wav` as 16-bit PCM wav to `path` atomically and return the Path written."""
    samples = wav.detach().to(torch.float32).clamp(-1.0, 1.0).cpu().numpy()
    with atomic_write(path) as tmp:
        sf.write(str(tmp), samples, int(sample_rate), subtype="PCM_16", format="WAV")
    return Path(path)
