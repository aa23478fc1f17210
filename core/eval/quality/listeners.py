"""Judges that listen to audio with models shipped in their pip wheels (nothing is downloaded).

- speaker similarity: cosine between speaker embeddings of a reference clip and an output, from
  Resemblyzer's `VoiceEncoder` (its `pretrained.pt` ships in the wheel; run on the CPU) or from a
  family's own encoder passed in as `embed` (Chatterbox's `ve.pt`);
- naturalness: DNSMOS (speechmos ships the ONNX models) — the overall MOS estimate (about 1–5) of each
  clip. DNSMOS was trained on English speech with noise and codec artefacts: it scores noise,
  clicks and buzz well and says little about pronunciation or another language's prosody.
All functions take 16 kHz mono float clips.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np
import torch

from core.torch_threads import torch_threads

SAMPLE_RATE = 16000
MIN_SECONDS = 0.3  # shorter clips get no embedding or MOS (None)
REFERENCE_CACHE_SIZE = 256  # Resemblyzer embeddings of references kept per process: periodic evaluation reuses them
_reference_embeddings: dict[str, np.ndarray] = {}

Embed = Callable[[np.ndarray], np.ndarray]


@lru_cache(maxsize=1)
def _resemblyzer() -> Any:
    from resemblyzer import VoiceEncoder

    return VoiceEncoder(device="cpu", verbose=False)


def resemblyzer_embedding(wav: np.ndarray) -> np.ndarray:
    """Return Resemblyzer's unit-length 256-d speaker embedding of a 16 kHz clip."""
    from resemblyzer import preprocess_wav

    trimmed = preprocess_wav(np.asarray(wav, dtype=np.float32), source_sr=SAMPLE_RATE)
    if trimmed.size < SAMPLE_RATE * MIN_SECONDS:  # its VAD removed nearly everything; embed the clip as given
        trimmed = np.asarray(wav, dtype=np.float32)
    with torch_threads(1):  # a clip's LSTM is too small to split (core.torch_threads)
        return _resemblyzer().embed_utterance(trimmed)


def _numpy(wav: torch.Tensor | np.ndarray) -> np.ndarray:
    return torch.as_tensor(wav, dtype=torch.float32).flatten().cpu().numpy()


def _reference_embedding(embed: Embed, wav: np.ndarray) -> np.ndarray:
    """Return `embed(wav)`; Resemblyzer's is computed once per process for the same samples."""
    if embed is not resemblyzer_embedding:
        return embed(wav)
    key = hashlib.sha1(wav.tobytes()).hexdigest()
    if key not in _reference_embeddings:
        if len(_reference_embeddings) >= REFERENCE_CACHE_SIZE:
            _reference_embeddings.pop(next(iter(_reference_embeddings)))
        _reference_embeddings[key] = embed(wav)
    return _reference_embeddings[key]


def speaker_similarity(outputs: Sequence[torch.Tensor | np.ndarray], references: Sequence[torch.Tensor | np.ndarray],
                       embed: Embed | None = None) -> list[float | None]:
    """Return the cosine between the speaker embeddings of each output and its reference (16 kHz),
    None where either clip is shorter than MIN_SECONDS. `embed` defaults to Resemblyzer's encoder.
    Raises ValueError when the lists differ in length."""
    if len(outputs) != len(references):
        raise ValueError(f"{len(outputs)} outputs but {len(references)} references")
    embed = embed or resemblyzer_embedding
    scores: list[float | None] = []
    for output, reference in zip(outputs, references):
        a, b = _numpy(output), _numpy(reference)
        if min(a.size, b.size) < SAMPLE_RATE * MIN_SECONDS:
            scores.append(None)
            continue
        u, v = embed(a), _reference_embedding(embed, b)
        scores.append(round(float(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v) + 1e-9)), 4))
    return scores


def mos_estimates(clips: Sequence[torch.Tensor | np.ndarray]) -> list[float | None]:
    """Return DNSMOS's overall MOS estimate (about 1–5; noise can score below 1) of each 16 kHz clip, None
    for clips shorter than MIN_SECONDS. A clip shorter than DNSMOS's 9.01 s window is repeated to fill exactly one window."""
    from speechmos import dnsmos

    scores: list[float | None] = []
    for clip in clips:
        wav = np.clip(_numpy(clip), -1.0, 1.0)
        if wav.size < SAMPLE_RATE * MIN_SECONDS:
            scores.append(None)
            continue
        window = int(dnsmos.INPUT_LENGTH * SAMPLE_RATE)
        if wav.size < window:  # DNSMOS repeats a short clip by doubling (up to 7 windows for 2 s); repeat it to one
            wav = np.resize(wav, window)
        scores.append(round(float(dnsmos.run(wav, sr=SAMPLE_RATE)["ovrl_mos"]), 3))
    return scores
