"""Whole writing systems a tokenizer extension adds regardless of the corpus (`--add-script`).

A corpus never shows every letter: the Amharic sample has 214 of the 358 assigned characters of
the main Ethiopic block. Adding a script adds every assigned code point of its blocks, so no
letter of the language can ever encode as unknown. `auto` adds a script when most letters of the
corpus belong to it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from core.errors import InputError

# Ethiopic (U+1200–U+137F), Ethiopic Supplement (U+1380–U+139F) and Ethiopic Extended (U+2D80–U+2DDF).
SCRIPT_BLOCKS: dict[str, tuple[tuple[int, int], ...]] = {
    "ethiopic": ((0x1200, 0x137F), (0x1380, 0x139F), (0x2D80, 0x2DDF)),
}
AUTO, NONE = "auto", "none"
SCRIPT_CHOICES = (AUTO, NONE, *SCRIPT_BLOCKS)
# A corpus whose letters are more than this share of one script gets that script automatically.
AUTO_SHARE = 0.5


def script_characters(name: str) -> list[str]:
    """Return every assigned code point of the script's blocks, in code-point order.

    Raises InputError for an unknown script name.
    """
    if name not in SCRIPT_BLOCKS:
        raise InputError(f"unknown script {name!r}; known scripts: {', '.join(SCRIPT_BLOCKS)}.")
    return [chr(c) for start, end in SCRIPT_BLOCKS[name] for c in range(start, end + 1)
            if unicodedata.category(chr(c)) != "Cn"]


def _in_script(char: str, name: str) -> bool:
    return any(start <= ord(char) <= end for start, end in SCRIPT_BLOCKS[name])


def dominant_script(lines: Sequence[str]) -> str | None:
    """Return the script more than AUTO_SHARE of the corpus's letters belong to, or None."""
    letters = [c for line in lines for c in line if c.isalpha()]
    if not letters:
        return None
    for name in SCRIPT_BLOCKS:
        if sum(1 for c in letters if _in_script(c, name)) > AUTO_SHARE * len(letters):
            return name
    return None


def resolve_scripts(choice: str | None, lines: Sequence[str]) -> list[str]:
    """Return the scripts to add for `--add-script CHOICE` (`auto`/None: the corpus's dominant script, if any).

    Raises InputError for an unknown choice.
    """
    if choice in (None, AUTO):
        found = dominant_script(lines)
        return [found] if found else []
    if choice == NONE:
        return []
    script_characters(choice)
    return [choice]
