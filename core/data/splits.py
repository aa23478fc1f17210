"""Deterministic train/val split by a stable hash of the clip id.

A clip's split depends only on its id and the ratio, so adding clips never moves existing ones.
"""

from __future__ import annotations

import hashlib

from core.errors import InputError

TRAIN = "train"
VAL = "val"


def split_of(clip_id: str, val_ratio: float) -> str:
    """Return "val" when the id's hash falls below `val_ratio`, otherwise "train".

    Raises InputError when `val_ratio` is outside [0, 1).
    """
    if not 0.0 <= val_ratio < 1.0:
        raise InputError(f"val_ratio {val_ratio}: must be at least 0 and below 1.")
    digest = hashlib.sha256(clip_id.encode("utf-8")).digest()
    position = int.from_bytes(digest[:8], "big") / float(1 << 64)
    return VAL if position < val_ratio else TRAIN
