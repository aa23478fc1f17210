"""The embedded speech codec on a dataset: fit on a manifest's train split, measured on its val split.

The codec itself (`core.speech.codec.fit_codec`, `core.speech.codec_eval.measure_codec`) works on
clips; this module picks them from a manifest with the one deterministic split (`core.data.splits`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from core.data.manifest import ManifestRow, load_manifest_rows
from core.data.splits import TRAIN, VAL, split_of
from core.speech.codec import SpeechCodec, fit_codec
from core.speech.codec_eval import measure_codec


def _rows_of_split(rows: list[ManifestRow], split: str, val_ratio: float) -> list[ManifestRow]:
    """Return the rows whose id falls in `split`; all rows when that split is empty."""
    chosen = [row for row in rows if split_of(row.id, val_ratio) == split]
    return chosen or list(rows)


def train_codec(manifest: str | os.PathLike[str], val_ratio: float = 0.05, **fit_options: Any) -> SpeechCodec:
    """Return a codec fit by `core.speech.codec.fit_codec` (`fit_options`: codebook_size, sample_rate,
    hop_length, n_mels, iterations, batch_size, max_frames, seed, device) on the manifest's train split.

    The codec's `meta` records the manifest, the split's `val_ratio` and the training statistics.
    Raises InputError for a bad manifest, unreadable audio or too few frames.
    """
    rows = _rows_of_split(load_manifest_rows(manifest), TRAIN, val_ratio)
    codec = fit_codec([row.path for row in rows], **fit_options)
    codec.meta = {"manifest": str(Path(manifest).resolve()), **codec.meta, "val_ratio": val_ratio}
    return codec


def evaluate_codec(
    codec: SpeechCodec,
    manifest: str | os.PathLike[str],
    val_ratio: float = 0.05,
    max_clips: int = 20,
    vocoder: bool = True,
) -> dict[str, Any]:
    """Return the codec's quality figures on up to `max_clips` clips of the manifest's val split.

    Keys: clips, split (`val`, or `all` when the val split is empty), manifest, then the figures of
    `measure_codec` (quant_l1, quant_mcd, with `vocoder` the round-trip and vocoder ones, codes_used,
    perplexity, codebook_size, frame_rate, fingerprint).
    Raises InputError for a bad manifest or unreadable audio.
    """
    rows = load_manifest_rows(manifest)
    val_rows = _rows_of_split(rows, VAL, val_ratio)
    chosen = val_rows[:max_clips]
    return {
        "clips": len(chosen),
        "split": VAL if len(val_rows) < len(rows) else "all",
        "manifest": str(Path(manifest).resolve()),
        **measure_codec(codec, [row.path for row in chosen], vocoder),
    }
