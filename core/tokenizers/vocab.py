"""The vocabulary contract between tokenizers: prefix extension and finding a tokenizer by fingerprint."""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import InputError
from core.fsutil import sha256_file
from core.tokenizers.tokenizer import Tokenizer

TOKENIZER_SUFFIXES = (".model", ".json")
INIT_METHODS = ("fvt", "translit", "mean", "normal")  # how rows of new pieces are made (core.training.embeddings)


def first_difference(base: Tokenizer, new: Tokenizer, limit: int | None = None) -> int | None:
    """Return the first id below `limit` (default: base size) whose piece differs between the two.

    An id that `new` lacks (new is smaller) counts as differing. Returns None when `new` keeps
    every piece of `base` below the limit at the same id (a prefix extension).
    """
    limit = base.size if limit is None else min(limit, base.size)
    common = min(limit, new.size)
    base_pieces = base.pieces()
    new_pieces = new.pieces()
    for token_id in range(common):
        if base_pieces[token_id] != new_pieces[token_id]:
            return token_id
    return common if common < limit else None


def require_prefix_extension(base: Tokenizer, new: Tokenizer) -> None:
    """Return None when `new` extends `base` (same piece at every id below base.size).

    Raises InputError naming the first differing id and both pieces, or the missing ids when
    `new` is smaller than `base`.
    """
    diff = first_difference(base, new)
    if diff is None:
        return
    if diff >= new.size:
        raise InputError(
            f"{new.path}: has {new.size} ids but the base {base.path} has {base.size}; it is not an "
            f"extension of the base (ids {new.size}..{base.size - 1} are missing). Extend the base "
            "tokenizer with `tokenizer extend` instead of training a new one."
        )
    raise InputError(
        f"{new.path}: id {diff} is {new.piece(diff)!r} but the base {base.path} has {base.piece(diff)!r} "
        f"there; a new tokenizer must keep every base piece at its id. Build it with `tokenizer extend` "
        "from this base."
    )


def find_tokenizer_by_fingerprint(folder: str | os.PathLike[str], fingerprint: str) -> Path | None:
    """Return the tokenizer file in `folder` (recursively) whose sha256 is `fingerprint`, or None."""
    root = Path(folder)
    if not root.is_dir():
        return None
    for candidate in sorted(root.rglob("*")):
        if candidate.suffix not in TOKENIZER_SUFFIXES or candidate.name.endswith(".report.json"):
            continue
        if candidate.is_file() and sha256_file(candidate) == fingerprint:
            return candidate
    return None
