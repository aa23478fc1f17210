"""How many clips the families' feature models take per forward pass.

Both families batch clips through their feature models (Chatterbox: S3 tokenizer + VoiceEncoder;
IndexTTS2: w2v-BERT with its padding mask, the semantic codec and conditioning encoders on
equal-length groups), so a batch gives the features of the same clips one by one (codes
identical, floats within rounding). The size is
`families.<family>.feature_batch_size` in the settings; null picks by device: 16 clips on a GPU
(w2v-BERT keeps every layer's hidden states: about 2.5 GB for 16 clips of 30 s in fp32), 8 on a
CPU, where batching mostly saves per-call overhead (bench/family_features.py, docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence, TypeVar

import torch

from core.errors import InputError

DEFAULT_BATCH = {"cuda": 16, "cpu": 8}
T = TypeVar("T")


def feature_batch_size(section: Mapping[str, Any] | None, device: torch.device | str, family: str) -> int:
    """Return the clips per forward pass: the section's `feature_batch_size`, else DEFAULT_BATCH for the device.

    Raises InputError when the setting is not a positive integer.
    """
    value = (section or {}).get("feature_batch_size")
    if value is None:
        return DEFAULT_BATCH["cuda" if torch.device(device).type == "cuda" else "cpu"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(
            f"settings families.{family}.feature_batch_size is {value!r}; set a positive integer "
            "(clips per forward pass) or null for the device default."
        )
    return value


def batches(items: Sequence[T], size: int) -> Iterator[list[T]]:
    """Yield consecutive lists of at most `size` items, in order."""
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
