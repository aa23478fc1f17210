"""Deterministic splits: train/val by a stable hash of the clip id, or whole speakers held out (`split_by_speaker`).

A clip's split depends only on its id and the ratio, so adding clips never moves existing ones.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any, Iterable

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


EVAL = "eval"


def _position(name: str) -> float:
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / float(1 << 64)


def split_by_speaker(clips_per_speaker: dict[str, int], val_ratio: float, eval_ratio: float) -> dict[str, str]:
    """Return {speaker: "train" | "val" | "eval"}: whole speakers held out for validation and evaluation.

    Speakers are taken in the order of a stable hash of their name, first into eval until it holds
    `eval_ratio` of the clips, then into val until it holds `val_ratio`; each asked-for held-out set
    gets at least one speaker, and train keeps at least one. A speaker is in exactly one split.
    Raises InputError when the ratios are out of range or there are too few speakers to hold any out.
    """
    for name, ratio in (("val_ratio", val_ratio), ("eval_ratio", eval_ratio)):
        if not 0.0 <= ratio < 1.0:
            raise InputError(f"{name} {ratio}: must be at least 0 and below 1.")
    if val_ratio + eval_ratio >= 1.0:
        raise InputError(f"val_ratio {val_ratio} + eval_ratio {eval_ratio}: must stay below 1 so training keeps clips.")
    held_sets = [(split, ratio) for split, ratio in ((EVAL, eval_ratio), (VAL, val_ratio)) if ratio > 0]
    if len(clips_per_speaker) < len(held_sets) + 1:
        raise InputError(f"split by speaker: {len(clips_per_speaker)} speaker(s), {len(held_sets) + 1} needed (train plus "
                         "one per held-out set). Split by clip instead, or set the empty set's ratio to 0.")
    order = sorted(clips_per_speaker, key=lambda s: (_position(s), s))
    total = sum(clips_per_speaker.values())
    assigned: dict[str, str] = {}
    cursor = 0
    for index, (split, ratio) in enumerate(held_sets):
        reserve = len(held_sets) - index  # speakers left for the later sets and train
        held = 0
        while cursor < len(order) - reserve and (held == 0 or held < ratio * total):
            assigned[order[cursor]] = split
            held += clips_per_speaker[order[cursor]]
            cursor += 1
    for speaker in order[cursor:]:
        assigned[speaker] = TRAIN
    return assigned


def speakers_held_out(rows: Iterable[Any], val_ratio: float) -> dict[str, str]:
    """Return {speaker: "train" | "val"} for manifest rows (each with a `speaker`): whole speakers hold
    `val_ratio` of the clips out (`split_by_speaker`). Raises InputError with fewer than two speakers."""
    return split_by_speaker(dict(Counter(row.speaker for row in rows)), val_ratio, 0.0)


def val_rows(rows: Iterable[Any], val_ratio: float, split_by: str = "clip") -> list[Any]:
    """Return the manifest rows of the val split under a run's split rule, in their order: `clip` by
    `split_of(id)`, `speaker` the clips of the speakers `speakers_held_out` holds out (what the feature
    cache calls val). Raises InputError for a bad ratio or, by speaker, fewer than two speakers."""
    rows = list(rows)
    if split_by == "speaker":
        held = speakers_held_out(rows, val_ratio)
        return [row for row in rows if held[row.speaker] == VAL]
    return [row for row in rows if split_of(row.id, val_ratio) == VAL]
