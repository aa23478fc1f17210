"""Audio reading, conversion and writing.

Audio is read with soundfile (wav, flac, ogg, mp3), mixed down to mono and resampled with
torchaudio to the requested rate. Waveforms are float32 1-D tensors in [-1, 1].
"""

from __future__ import annotations

import io
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
# libsndfile's container name for each extension (mp3 needs libsndfile >= 1.1).
CONTAINERS = {".wav": "WAV", ".flac": "FLAC", ".ogg": "OGG", ".mp3": "MP3"}


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


def missing_codec(name: str) -> str | None:
    """Return the container `name`'s extension needs when this machine's libsndfile lacks it, else None."""
    container = CONTAINERS.get(Path(name).suffix.lower())
    if container is None or container in sf.available_formats():
        return None
    return container


def _decode(source: str | io.BytesIO, name: str | os.PathLike[str], sample_rate: int | None) -> tuple[torch.Tensor, int]:
    container = missing_codec(str(name))
    if container is not None:
        raise InputError(f"{name}: this machine's libsndfile {sf.__libsndfile_version__} cannot decode {container}; "
                         "install libsndfile >= 1.1 (pip install -U soundfile) or convert the file to wav or flac.")
    try:
        data, rate = sf.read(source, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise InputError(f"{name}: unreadable audio ({exc}). Convert it to wav, flac, ogg or mp3.") from exc
    if data.shape[0] == 0:
        raise InputError(f"{name}: the audio file holds no samples.")
    check_finite(data, name)
    wav = torch.from_numpy(np.ascontiguousarray(data[:, 0] if data.shape[1] == 1 else data.mean(axis=1)))
    if sample_rate is not None and rate != sample_rate:
        wav = resample(wav, rate, sample_rate)
        rate = sample_rate
    return wav, int(rate)


def read_audio(path: str | os.PathLike[str], sample_rate: int | None = None) -> tuple[torch.Tensor, int]:
    """Return (mono float32 waveform, rate) of a wav, flac, ogg or mp3 file; resampled to `sample_rate` when given.

    Raises InputError naming the file when it is missing, empty (0 bytes), unreadable, in a container
    this machine's libsndfile cannot decode (the codec is named), holds no samples or holds NaN/Inf samples.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: audio file not found.")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty audio file (0 bytes).")
    return _decode(str(path), path, sample_rate)


def decode_audio(data: bytes, name: str, sample_rate: int | None = None) -> tuple[torch.Tensor, int]:
    """Return (mono float32 waveform, rate) of encoded audio bytes (wav, flac, ogg or mp3) named `name` in messages.

    Raises InputError naming `name` as `read_audio` does.
    """
    if not data:
        raise InputError(f"{name}: empty audio (0 bytes).")
    return _decode(io.BytesIO(data), name, sample_rate)


def audio_duration(path: str | os.PathLike[str]) -> float:
    """Return the duration of an audio file in seconds from its header.

    Raises InputError when the file is missing or unreadable.
    """
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: unreadable audio ({exc}).") from exc
    return float(info.frames) / float(info.samplerate)


def _pcm_samples(wav: torch.Tensor) -> np.ndarray:
    return wav.detach().to(torch.float32).clamp(-1.0, 1.0).cpu().numpy()


def pcm16(wav: torch.Tensor) -> np.ndarray:
    """Return `wav` as the 16-bit PCM samples libsndfile writes for it: clamped to [-1, 1], scaled to 32 bits
    (round half to even), the top 16 bits kept — so a file written from them has libsndfile's bytes, and
    its samples are known without reading it back (`pcm16_samples`)."""
    scaled = np.rint(_pcm_samples(wav).astype(np.float64) * 2.0**31)
    return (np.clip(scaled, -(2.0**31), 2.0**31 - 1).astype(np.int64) >> 16).astype("<i2")


def pcm16_samples(pcm: np.ndarray) -> np.ndarray:
    """Return the float32 samples `read_audio` gives for a file of 16-bit PCM samples `pcm` (value / 32768)."""
    return pcm.astype(np.float32) * np.float32(1 / 32768)


def pcm16_wav(pcm: np.ndarray, sample_rate: int) -> bytes:
    """Return the bytes of a mono 16-bit wav file holding the PCM samples `pcm`."""
    buffer = io.BytesIO()
    sf.write(buffer, pcm, int(sample_rate), subtype="PCM_16", format="WAV")
    return buffer.getvalue()


def write_wav(path: str | os.PathLike[str], wav: torch.Tensor, sample_rate: int) -> Path:
    """Write `wav` as 16-bit PCM wav to `path` atomically and return the Path written."""
    with atomic_write(path) as tmp:
        tmp.write_bytes(pcm16_wav(pcm16(wav), sample_rate))
    return Path(path)
