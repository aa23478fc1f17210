"""Speech bounds from webrtcvad (its model is compiled into the wheel), for trimming silence.

webrtcvad (aggressiveness 3) was chosen over silero-vad by `bench/vad.py` (figures in docs/benchmarks.md):
on espeak speech padded with silence, clean or with noise at 20 dB SNR, both place the speech start within
20 ms; webrtcvad takes under 1 ms a clip and silero-vad 60-80 ms (onnx), which alone would cap the import
path near 15 clips/s per core. At 10 dB SNR webrtcvad hears the noise as speech; such clips are removed
by the SNR filter before trimming matters.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

FRAME_MS = 30
AGGRESSIVENESS = 3
MIN_RUN = 3  # consecutive speech frames that open or close speech: a lone click is not speech
VAD_RATES = (8000, 16000, 32000, 48000)


def _vad(mode: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # webrtcvad imports pkg_resources, which warns on import
        import webrtcvad
    return webrtcvad.Vad(mode)


def speech_frames(wav: torch.Tensor, rate: int, aggressiveness: int = AGGRESSIVENESS) -> np.ndarray:
    """Return one bool per 30 ms frame of `wav` (mono float, `rate` Hz): whether webrtcvad hears speech.

    Raises ValueError when `rate` is not one webrtcvad supports (8, 16, 32 or 48 kHz).
    """
    if rate not in VAD_RATES:
        raise ValueError(f"webrtcvad needs a rate of {VAD_RATES} Hz, got {rate}")
    step = rate * FRAME_MS // 1000
    pcm = (wav.detach().clamp(-1, 1).numpy() * 32767).astype("<i2")
    count = len(pcm) // step
    vad = _vad(aggressiveness)
    data = pcm[: count * step].tobytes()
    width = step * 2
    return np.fromiter((vad.is_speech(data[i * width:(i + 1) * width], rate) for i in range(count)), bool, count)


def speech_bounds(wav: torch.Tensor, rate: int, aggressiveness: int = AGGRESSIVENESS) -> tuple[float, float] | None:
    """Return (start, end) in seconds of the speech in `wav`, or None when webrtcvad hears none.

    Speech starts at the first run of `MIN_RUN` speech frames and ends after the last such run.
    """
    frames = speech_frames(wav, rate, aggressiveness)
    if len(frames) < MIN_RUN:
        return None
    runs = np.convolve(frames.astype(np.int8), np.ones(MIN_RUN, np.int8), "valid") == MIN_RUN
    hits = np.flatnonzero(runs)
    if len(hits) == 0:
        return None
    seconds = FRAME_MS / 1000
    return hits[0] * seconds, (hits[-1] + MIN_RUN) * seconds
