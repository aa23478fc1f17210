"""Codec quality on held-out clips: log-mel L1 and mel-cepstral distortion.

Three comparisons against each clip's own log-mel: the codebook reconstruction (the ceiling
any model trained on these codes can reach), the full round trip through Griffin-Lim
(audio → codes → audio → log-mel), and Griffin-Lim on the unquantised mel (the vocoder's own
loss, to tell codebook error from vocoder error).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import torch
import torchaudio.functional as AF

from core.audio import read_audio
from core.speech.codec import SpeechCodec
from core.progress import Progress

MCD_COEFFICIENTS = 13
_MCD_SCALE = 10.0 / math.log(10.0) * math.sqrt(2.0)


def mel_cepstrum(log_mel: torch.Tensor, n_coefficients: int = MCD_COEFFICIENTS) -> torch.Tensor:
    """Return cepstral coefficients [frames, n] of log-mel frames by an orthonormal DCT-II."""
    dct = AF.create_dct(n_coefficients, log_mel.shape[1], norm="ortho")
    return log_mel @ dct


def mcd(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Return the mel-cepstral distortion in dB between two log-mel sequences (c0 excluded)."""
    frames = min(reference.shape[0], other.shape[0])
    diff = mel_cepstrum(reference[:frames])[:, 1:] - mel_cepstrum(other[:frames])[:, 1:]
    return float(_MCD_SCALE * diff.pow(2).sum(1).sqrt().mean())


def mel_l1(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Return the mean absolute difference of two log-mel sequences over their common frames."""
    frames = min(reference.shape[0], other.shape[0])
    return float((reference[:frames] - other[:frames]).abs().mean())


def measure_codec(codec: SpeechCodec, clips: Sequence[Path], vocoder: bool = True) -> dict[str, Any]:
    """Return the codec's quality figures, means over `clips` (at least one).

    Keys: quant_l1, quant_mcd, and with `vocoder` also roundtrip_l1, roundtrip_mcd, vocoder_l1,
    vocoder_mcd; codes_used and perplexity of the codes; codebook_size, frame_rate, fingerprint.
    Raises InputError for unreadable audio.
    """
    sums: dict[str, float] = {}
    codes_seen: list[torch.Tensor] = []
    progress = Progress("codec eval", total=len(clips))
    for clip in clips:
        wav = read_audio(clip, codec.sample_rate)[0]
        mel = codec.mel(wav)
        codes = codec.quantize(mel)
        codes_seen.append(codes)
        figures = {"quant_l1": mel_l1(mel, codec.codes_to_mel(codes)), "quant_mcd": mcd(mel, codec.codes_to_mel(codes))}
        if vocoder:
            roundtrip = codec.mel(codec.decode(codes))
            vocoded = codec.mel(codec.mel_to_wav(mel))
            figures.update(
                roundtrip_l1=mel_l1(mel, roundtrip),
                roundtrip_mcd=mcd(mel, roundtrip),
                vocoder_l1=mel_l1(mel, vocoded),
                vocoder_mcd=mcd(mel, vocoded),
            )
        for key, value in figures.items():
            sums[key] = sums.get(key, 0.0) + value
        progress.update()
    progress.finish()
    usage = torch.bincount(torch.cat(codes_seen), minlength=codec.codebook_size).to(torch.float64)
    probs = usage[usage > 0] / usage.sum()
    report: dict[str, Any] = {key: round(value / len(clips), 4) for key, value in sums.items()}
    report["codes_used"] = int((usage > 0).sum())
    report["perplexity"] = round(float(torch.exp(-(probs * probs.log()).sum())), 2)
    report.update(codebook_size=codec.codebook_size, frame_rate=codec.frame_rate, fingerprint=codec.fingerprint)
    return report
