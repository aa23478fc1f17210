"""Per-clip measurements for the dataset filters: clipping share, SNR estimate, audio fingerprints.

All take a mono float waveform (torch or numpy) in [-1, 1]. None needs a model; the VAD lives in
`core.data.vad`.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np

CLIP_LEVEL = 0.99
SNR_FRAME_S = 0.02
NOISE_SHARE, SPEECH_SHARE = 0.1, 0.5
SNR_RANGE = (-10.0, 80.0)
FP_FRAME, FP_HOP, FP_BANDS = 512, 256, 17
FP_LOW_HZ, FP_HIGH_HZ = 100.0, 6000.0
FP_MAX_SHIFT = 3


def clipping_share(wav: np.ndarray) -> float:
    """Return the share of samples at or beyond ±0.99 (full scale): 0 for clean speech."""
    return float(np.count_nonzero(np.abs(wav) >= CLIP_LEVEL)) / max(1, len(wav))


def snr_db(wav: np.ndarray, rate: int) -> float:
    """Return an SNR estimate in dB from 20 ms frame energies, clamped to [-10, 80].

    Noise is the mean energy of the quietest 10 % of frames, signal the mean of the loudest 50 %
    minus that noise: speech pauses carry the noise floor. Digital silence reads 80.
    """
    step = max(1, int(rate * SNR_FRAME_S))
    count = len(wav) // step
    if count < 10:
        return SNR_RANGE[1]
    energy = np.sort(np.mean(wav[: count * step].reshape(count, step).astype(np.float64) ** 2, axis=1))
    noise = float(np.mean(energy[: max(1, int(count * NOISE_SHARE))]))
    speech = float(np.mean(energy[int(count * (1 - SPEECH_SHARE)):])) - noise
    if speech <= 0:
        return SNR_RANGE[0]
    return float(np.clip(10 * np.log10(speech / max(noise, 1e-12)), *SNR_RANGE))


def pcm_digest(wav: np.ndarray) -> str:
    """Return the SHA-1 of the waveform quantised to 16-bit: equal for exact audio duplicates."""
    return hashlib.sha1((np.clip(wav, -1, 1) * 32767).astype("<i2").tobytes()).hexdigest()


@lru_cache(maxsize=1)
def _window() -> np.ndarray:
    return np.hanning(FP_FRAME)


@lru_cache(maxsize=8)
def _band_edges(rate: int) -> np.ndarray:
    hz = np.geomspace(FP_LOW_HZ, min(FP_HIGH_HZ, rate / 2 - 1), FP_BANDS + 1)
    return np.round(hz / rate * FP_FRAME).astype(int)


def fingerprint(wav: np.ndarray, rate: int) -> np.ndarray:
    """Return a binary audio fingerprint (frames × 15 bits): the signs of band-energy changes over time
    and frequency (Haitsma-Kalker), which survive gain changes and lossy re-encoding.

    The frames are a strided view of `wav` (no gathered copy), and the power spectrum and its running sum
    stop at the top band edge: the bins above it enter no band, and a running sum's first columns do not
    depend on the later ones, so every band energy is the same float as over the whole spectrum.
    """
    count = 1 + (len(wav) - FP_FRAME) // FP_HOP if len(wav) >= FP_FRAME else 0
    if count < 3:
        return np.zeros((0, FP_BANDS - 2), bool)
    edges = _band_edges(rate)
    frames = np.lib.stride_tricks.sliding_window_view(wav, FP_FRAME)[::FP_HOP][:count]
    power = np.abs(np.fft.rfft(frames * _window(), axis=1)[:, :edges[-1]])
    np.square(power, out=power)
    cumulative = np.zeros((count, edges[-1] + 1))
    np.cumsum(power, axis=1, out=cumulative[:, 1:])
    bands = np.log(cumulative[:, edges[1:]] - cumulative[:, edges[:-1]] + 1e-10)
    step = np.diff(bands, axis=1)
    delta = step[:, :-1] - step[:, 1:]
    return (delta[1:] - delta[:-1]) > 0


def fingerprint_keys(bits: np.ndarray) -> set[int]:
    """Return the 30-bit keys of a fingerprint (each frame's bits joined with the next frame's), the
    look-up keys for finding near-duplicate candidates without comparing every pair; all-zero keys
    (silence) are left out."""
    if len(bits) < 2:
        return set()
    words = bits.astype(np.int64) @ (1 << np.arange(bits.shape[1], dtype=np.int64))
    keys = (words[:-1] << bits.shape[1]) | words[1:]
    return set(keys[keys != 0].tolist())


def fingerprint_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Return the smallest bit error rate between fingerprints `a` and `b` over shifts of ±3 frames
    (0 = same audio, about 0.5 = unrelated); 1.0 when they overlap on less than 80 % of the shorter."""
    best = 1.0
    shorter = min(len(a), len(b))
    for shift in range(-FP_MAX_SHIFT, FP_MAX_SHIFT + 1):
        x, y = (a[shift:], b) if shift >= 0 else (a, b[-shift:])
        overlap = min(len(x), len(y))
        if overlap == 0 or overlap < 0.8 * shorter:
            continue
        best = min(best, float(np.mean(x[:overlap] != y[:overlap])))
    return best
