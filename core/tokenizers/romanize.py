"""Romanizing pieces a base tokenizer cannot spell (for `--init translit`), with `anyascii`.

`anyascii` is a maintained table-driven romanizer covering every script (Ethiopic `ሰላም` → `selam`);
nothing is downloaded.
"""

from __future__ import annotations

from anyascii import anyascii

from core.tokenizers.tokenizer import Tokenizer

# A base counts as upper-case when pieces with upper-case letters outnumber those with lower-case ones this much.
UPPERCASE_RATIO = 10


def base_is_uppercase(base: Tokenizer) -> bool:
    """Return True when the tokenizer was trained on upper-case text (IndexTTS2's bpe.model is)."""
    pieces = base.pieces()
    upper = sum(1 for p in pieces if any(c.isupper() for c in p))
    lower = sum(1 for p in pieces if any(c.islower() for c in p))
    return upper > UPPERCASE_RATIO * max(lower, 1)


def romanize(text: str, uppercase: bool = False) -> str:
    """Return `text` in Latin letters (anyascii), upper-cased when `uppercase`; '' when nothing romanizes."""
    result = anyascii(text)
    return result.upper() if uppercase else result
