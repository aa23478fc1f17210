"""Build SentencePiece models for tests by appending pieces to a real base model (a prefix extension)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def letters(n: int) -> str:
    """Return the n-th upper-case letter name (0 → A, 25 → Z, 26 → BA, …)."""
    out = ""
    while True:
        n, rem = divmod(n, 26)
        out = chr(65 + rem) + out
        if n == 0:
            return out


def append_pieces(base: Path, pieces: Sequence[str], dest: Path, scores: Sequence[float] | None = None) -> Path:
    """Write a copy of the SentencePiece model `base` with NORMAL `pieces` appended after its last id; return `dest`.

    `scores` defaults to -1e6 for every new piece.
    """
    from core.tokenizers.sp_proto import NORMAL, parse_model_proto

    proto = parse_model_proto(base.read_bytes())
    for i, text in enumerate(pieces):
        piece = proto.pieces.add()
        piece.piece, piece.score, piece.type = text, (scores[i] if scores is not None else -1e6), NORMAL
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(proto.SerializeToString())
    return dest


def grow_to(base: Path, size: int, dest: Path) -> Path:
    """Write a copy of `base` grown to `size` pieces with `▁QXA`, `▁QXB`, … scored below the base minimum; return `dest`."""
    from core.tokenizers.sp_proto import parse_model_proto

    proto = parse_model_proto(base.read_bytes())
    low = min(p.score for p in proto.pieces)
    count = size - len(proto.pieces)
    return append_pieces(base, [f"▁QX{letters(i)}" for i in range(count)], dest, [low - 1 - i * 1e-3 for i in range(count)])
