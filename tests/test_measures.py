"""The duplicate filter's audio fingerprint is the Haitsma-Kalker formula over the whole power spectrum.

`fingerprint` computes it from a strided view of the frames and stops the spectrum at the top band
edge (bench/import_path.py: it is per-clip import work); these tests hold it bit-for-bit to the plain
formula, so no clip's duplicate verdict can change with the speed-up.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.data.measures import FP_BANDS, FP_FRAME, FP_HOP, FP_HIGH_HZ, FP_LOW_HZ, fingerprint


def whole_spectrum_fingerprint(wav: np.ndarray, rate: int) -> np.ndarray:
    """The formula as written: every frame gathered, the whole power spectrum, band energies from its running sum."""
    count = 1 + (len(wav) - FP_FRAME) // FP_HOP if len(wav) >= FP_FRAME else 0
    if count < 3:
        return np.zeros((0, FP_BANDS - 2), bool)
    index = np.arange(FP_FRAME)[None, :] + FP_HOP * np.arange(count)[:, None]
    spectrum = np.abs(np.fft.rfft(wav[index] * np.hanning(FP_FRAME), axis=1)) ** 2
    cumulative = np.concatenate([np.zeros((count, 1)), np.cumsum(spectrum, axis=1)], axis=1)
    hz = np.geomspace(FP_LOW_HZ, min(FP_HIGH_HZ, rate / 2 - 1), FP_BANDS + 1)
    edges = np.round(hz / rate * FP_FRAME).astype(int)
    bands = np.log(cumulative[:, edges[1:]] - cumulative[:, edges[:-1]] + 1e-10)
    delta = np.diff(bands, axis=1)[:, :-1] - np.diff(bands, axis=1)[:, 1:]
    return (delta[1:] - delta[:-1]) > 0


def voiced(seconds: float, rate: int, seed: int) -> np.ndarray:
    """A harmonic tone with a wavering pitch, a syllable envelope and a little noise, as float32."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    phase = 2 * np.pi * np.cumsum(120 * (1 + 0.05 * np.sin(2 * np.pi * 1.1 * t))) / rate
    tone = sum(np.sin(k * phase) / k for k in range(1, 10)) * np.abs(np.sin(np.pi * 3 * t))
    return (0.2 * tone + 0.003 * rng.standard_normal(len(t))).astype(np.float32)


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 24000])
def test_fingerprint_equals_the_whole_spectrum_formula_bit_for_bit(rate: int) -> None:
    rng = np.random.default_rng(rate)
    signals = [voiced(s, rate, i) for i, s in enumerate((0.04, 0.5, 1.37, 3.0))]
    signals += [rng.uniform(-1, 1, n).astype(np.float32) for n in (FP_FRAME - 1, FP_FRAME + 2 * FP_HOP, 7777, 48000)]
    signals += [np.zeros(rate, np.float32)]  # silence: every band at the log floor
    compared = 0
    for wav in signals:
        got, want = fingerprint(wav, rate), whole_spectrum_fingerprint(wav, rate)
        assert got.dtype == bool and got.shape == want.shape
        assert np.array_equal(got, want), f"{len(wav)} samples at {rate} Hz"
        compared += got.size
    assert compared > 1000  # the longer signals give frames, not only the empty fingerprints of the short ones


def test_a_fingerprint_has_a_row_per_frame_after_the_first() -> None:
    wav = voiced(1.0, 16000, 3)
    frames = 1 + (len(wav) - FP_FRAME) // FP_HOP
    assert fingerprint(wav, 16000).shape == (frames - 1, FP_BANDS - 2)
    assert fingerprint(wav[: FP_FRAME + FP_HOP], 16000).shape == (0, FP_BANDS - 2)
