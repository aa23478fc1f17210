"""Objective distances between two recordings of the same sentence, and a DTW sentence judge.

Features are computed from 16 kHz mono float waveforms:
- log-mel frames (80 bins, 25 ms window, 10 ms hop), the features of the DTW judge;
- mel-cepstra: the orthonormal DCT of the natural-log mel *amplitude* spectrum, coefficients
  1..24 (c0, the loudness, is left out), the features of mel-cepstral distortion (MCD).

MCD-DTW aligns the two mel-cepstrum sequences with dynamic time warping and reports
`10 / ln 10 * sqrt(2 * sum_d (c_d - c'_d)^2)` averaged over the aligned frame pairs, in dB:
0 for a clip against itself, about 4-8 dB between good TTS and its reference. The log-F0
ratio compares the median pitch of the voiced frames (`ln(F0_test / F0_ref)`, 0 = same
pitch) and the duration ratio the lengths after trimming leading and trailing silence.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import numpy as np
import torch
import torchaudio

SAMPLE_RATE = 16000
N_MELS = 80
N_FFT = 400
HOP = 160
MCEP_ORDER = 24
MCD_CONSTANT = 10.0 / math.log(10.0) * math.sqrt(2.0)
LOG_FLOOR = 1e-5
CEPSTRUM_SCALE = 1.0 / math.sqrt(2 * N_MELS)
F0_MIN = 60.0
F0_MAX = 400.0
VOICING_THRESHOLD = 0.6


@lru_cache(maxsize=4)
def _mel_transform(sample_rate: int) -> torchaudio.transforms.MelSpectrogram:
    return torchaudio.transforms.MelSpectrogram(
        sample_rate=sample_rate, n_fft=N_FFT, hop_length=HOP, n_mels=N_MELS, power=2.0
    )


@lru_cache(maxsize=4)
def _dct_matrix(order: int) -> torch.Tensor:
    return torchaudio.functional.create_dct(order + 1, N_MELS, norm="ortho")


def _as_tensor(wav: torch.Tensor | np.ndarray) -> torch.Tensor:
    tensor = torch.as_tensor(wav, dtype=torch.float32)
    if tensor.dim() != 1 or tensor.numel() == 0:
        raise ValueError(f"expected a non-empty 1-D waveform, got shape {tuple(tensor.shape)}")
    return tensor


def trim_silence(wav: torch.Tensor | np.ndarray, top_db: float = 40.0) -> torch.Tensor:
    """Return `wav` without the leading and trailing frames quieter than the peak frame by `top_db`.

    Frames are 10 ms; a clip that is silent throughout is returned unchanged.
    """
    wav = _as_tensor(wav)
    frames = wav[: wav.numel() // HOP * HOP].reshape(-1, HOP)
    if frames.shape[0] == 0:
        return wav
    energy = 10.0 * torch.log10(frames.pow(2).mean(dim=1) + 1e-12)
    loud = torch.nonzero(energy > energy.max() - top_db).flatten()
    if loud.numel() == 0 or energy.max() < -100.0:
        return wav
    return wav[int(loud[0]) * HOP : (int(loud[-1]) + 1) * HOP]


def log_mel(wav: torch.Tensor | np.ndarray, sample_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """Return the natural-log mel power spectrogram of `wav` as a [frames, 80] float tensor."""
    with torch.no_grad():
        power = _mel_transform(sample_rate)(_as_tensor(wav))
    return torch.log(power.clamp(min=LOG_FLOOR)).T.contiguous()


def mel_cepstrum(wav: torch.Tensor | np.ndarray, sample_rate: int = SAMPLE_RATE, order: int = MCEP_ORDER) -> torch.Tensor:
    """Return mel-cepstral coefficients 1..`order` of `wav` as a [frames, order] float tensor.

    They are the DCT of the log mel amplitude spectrum (half the log power); c0 is dropped.
    """
    amplitude = 0.5 * log_mel(wav, sample_rate)
    return CEPSTRUM_SCALE * (amplitude @ _dct_matrix(order))[:, 1:]


def judge_features(wav: torch.Tensor | np.ndarray, sample_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """Return the DTW judge's features: silence-trimmed log-mel frames with per-bin mean and
    variance normalised over the clip (removes the voice's and the channel's constant colour)."""
    feats = log_mel(trim_silence(wav), sample_rate)
    return (feats - feats.mean(dim=0)) / (feats.std(dim=0) + 1e-5)


def _accumulated_cost(cost: np.ndarray) -> np.ndarray:
    """Return the DTW accumulated-cost matrix (steps (1,0), (0,1), (1,1)) of `cost` [..., n, m], padded with an
    inf border: [..., n + 1, m + 1]. Leading dimensions are separate alignments of the same n rows, computed together.

    Row by row: with t[j] = cost[i, j] + min(acc[i-1, j-1], acc[i-1, j]), the in-row recurrence
    acc[i, j] = min(t[j], cost[i, j] + acc[i, j-1]) is a min-plus scan, solved in one pass as
    C[j] + running_min(t - C) where C is the row's cumulative cost. Column j depends on columns ≤ j only,
    so columns appended to the right (padding) leave the others exactly as they are.
    """
    n, m = cost.shape[-2:]
    acc = np.full(cost.shape[:-2] + (n + 1, m + 1), np.inf)
    acc[..., 0, 0] = 0.0
    for i in range(1, n + 1):
        row = cost[..., i - 1, :]
        t = row + np.minimum(acc[..., i - 1, :-1], acc[..., i - 1, 1:])
        cumulative = np.cumsum(row, axis=-1)
        acc[..., i, 1:] = cumulative + np.minimum.accumulate(t - cumulative, axis=-1)
    return acc


def _cost_matrix(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    if a.dim() != 2 or b.dim() != 2 or a.shape[0] == 0 or b.shape[0] == 0 or a.shape[1] != b.shape[1]:
        raise ValueError(f"cannot align feature sequences of shapes {tuple(a.shape)} and {tuple(b.shape)}")
    x, y = a.double().numpy(), b.double().numpy()
    squared = (x * x).sum(axis=1)[:, None] + (y * y).sum(axis=1)[None, :] - 2.0 * (x @ y.T)
    return np.sqrt(np.maximum(squared, 0.0))


def dtw_cost(a: torch.Tensor, b: torch.Tensor) -> float:
    """Return the DTW cost of feature sequences `a` [n, d] and `b` [m, d] divided by n + m.

    Raises ValueError when either sequence is empty or the feature sizes differ.
    """
    cost = _cost_matrix(a, b)
    return float(_accumulated_cost(cost)[-1, -1]) / (cost.shape[0] + cost.shape[1])


def dtw_path(a: torch.Tensor, b: torch.Tensor) -> list[tuple[int, int]]:
    """Return the DTW alignment path of `a` [n, d] and `b` [m, d] as (i, j) frame pairs, in order.

    Raises ValueError when either sequence is empty or the feature sizes differ.
    """
    acc = _accumulated_cost(_cost_matrix(a, b))
    i, j = acc.shape[0] - 1, acc.shape[1] - 1
    path = [(i - 1, j - 1)]
    while (i, j) != (1, 1):
        i, j = min(((i - 1, j - 1), (i - 1, j), (i, j - 1)), key=lambda s: acc[s])
        path.append((i - 1, j - 1))
    path.reverse()
    return path


def mcd_dtw(test: torch.Tensor | np.ndarray, reference: torch.Tensor | np.ndarray, sample_rate: int = SAMPLE_RATE) -> float:
    """Return the mel-cepstral distortion in dB between two clips after DTW alignment.

    Both clips are silence-trimmed first. Returns 0.0 for a clip against itself.
    """
    a = mel_cepstrum(trim_silence(test), sample_rate).double()
    b = mel_cepstrum(trim_silence(reference), sample_rate).double()
    path = dtw_path(a, b)
    rows = torch.tensor([p[0] for p in path])
    cols = torch.tensor([p[1] for p in path])
    distances = (a[rows] - b[cols]).norm(dim=1)
    return float(MCD_CONSTANT * distances.mean())


def f0_track(wav: torch.Tensor | np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Return the F0 in Hz of each voiced 10 ms frame of `wav` (unvoiced frames are left out).

    Normalised autocorrelation over 40 ms frames, searched between 60 and 400 Hz; a frame is
    voiced when its peak correlation exceeds 0.6 and its energy is within 30 dB of the loudest.
    """
    x = _as_tensor(wav).double().numpy()
    win = int(0.04 * sample_rate)
    if x.size < win:
        return np.zeros(0)
    starts = np.arange(0, x.size - win + 1, HOP)
    frames = x[starts[:, None] + np.arange(win)]
    frames = frames - frames.mean(axis=1, keepdims=True)
    spectrum = np.fft.rfft(frames, n=2 * win, axis=1)
    acf = np.fft.irfft(np.abs(spectrum) ** 2, axis=1)[:, :win]
    energy = acf[:, 0]
    lo, hi = int(sample_rate / F0_MAX), int(sample_rate / F0_MIN)
    lags = acf[:, lo:hi] / (energy[:, None] + 1e-12) * win / (win - np.arange(lo, hi))
    best = lags.argmax(axis=1)
    peak = lags[np.arange(len(best)), best]
    loud = 10 * np.log10(energy + 1e-12) > 10 * np.log10(energy.max() + 1e-12) - 30.0
    voiced = (peak > VOICING_THRESHOLD) & loud
    return sample_rate / (best[voiced] + lo).astype(np.float64)


def log_f0_ratio(test: torch.Tensor | np.ndarray, reference: torch.Tensor | np.ndarray, sample_rate: int = SAMPLE_RATE) -> float | None:
    """Return ln(median F0 of `test` / median F0 of `reference`); None when either has no voiced frame."""
    f0_test, f0_ref = f0_track(test, sample_rate), f0_track(reference, sample_rate)
    if f0_test.size == 0 or f0_ref.size == 0:
        return None
    return float(math.log(np.median(f0_test) / np.median(f0_ref)))


def duration_ratio(test: torch.Tensor | np.ndarray, reference: torch.Tensor | np.ndarray) -> float:
    """Return the silence-trimmed duration of `test` divided by that of `reference`."""
    return trim_silence(test).numel() / trim_silence(reference).numel()


def dtw_costs(query: torch.Tensor, references: Sequence[torch.Tensor]) -> np.ndarray:
    """Return `dtw_cost(query, r)` for each of `references`, equal to it bit for bit: the alignments share the query's
    rows, so they run together, each cost matrix zero-padded on the right to the longest reference.

    Raises ValueError as `dtw_cost` does.
    """
    costs = [_cost_matrix(query, reference) for reference in references]
    if not costs:
        return np.zeros(0)
    widths = [cost.shape[1] for cost in costs]
    stacked = np.zeros((len(costs), costs[0].shape[0], max(widths)))
    for k, cost in enumerate(costs):
        stacked[k, :, : cost.shape[1]] = cost
    last_row = _accumulated_cost(stacked)[:, -1]
    return np.array([last_row[k, width] / (stacked.shape[1] + width) for k, width in enumerate(widths)])


def dtw_distance_matrix(queries: Sequence[torch.Tensor], references: Sequence[torch.Tensor]) -> np.ndarray:
    """Return the [queries, references] matrix of length-normalised DTW costs between feature sequences."""
    matrix = np.zeros((len(queries), len(references)))
    for qi, query in enumerate(queries):
        matrix[qi] = dtw_costs(query, references)
    return matrix


def identify_by_dtw(queries: Sequence[torch.Tensor | np.ndarray], references: Sequence[torch.Tensor | np.ndarray], sample_rate: int = SAMPLE_RATE) -> list[int]:
    """Return, for each query clip, the index of the reference clip nearest to it by DTW over
    the judge's log-mel features (the DTW sentence judge, usable for any language)."""
    query_feats = [judge_features(q, sample_rate) for q in queries]
    reference_feats = [judge_features(r, sample_rate) for r in references]
    return [int(i) for i in dtw_distance_matrix(query_feats, reference_feats).argmin(axis=1)]


def identification_accuracy(predicted: Sequence[int | None], truth: Sequence[int] | None = None) -> float:
    """Return the share of `predicted[i]` equal to `truth[i]` (default truth: i itself)."""
    if not predicted:
        return 0.0
    truth = list(range(len(predicted))) if truth is None else list(truth)
    return sum(1 for p, t in zip(predicted, truth) if p == t) / len(predicted)
