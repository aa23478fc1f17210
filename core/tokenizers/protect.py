"""What a tokenizer extension protects by default: the base language's common words and digit strings.

`--protect-corpus` keeps its own lines exact, but unseen base-language text can still drift. The
built-in lexicon (the most frequent words of `--protect-language` from `wordfreq`, whose word
lists ship inside the package: nothing is downloaded) plus every digit string from 0 to
DIGIT_STRINGS - 1 is protected on top, cased the way the base tokenizer expects (an upper-case
base such as IndexTTS2's gets upper-cased words; others get each word lower-case and Capitalised).
A held-out share of the user's protect corpus is kept out of the protection to measure drift on
text the loop never saw.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

from core.errors import InputError

DEFAULT_LANGUAGE = "en"
DEFAULT_LEXICON_SIZE = 20_000
DIGIT_STRINGS = 10_000
HELDOUT_SHARE = 0.1
NO_LANGUAGE = "none"


def builtin_lexicon(language: str, size: int = DEFAULT_LEXICON_SIZE, uppercase: bool = False) -> list[str]:
    """Return the `size` most frequent words of `language` (wordfreq) in the base's casing, then the
    digit strings 0..DIGIT_STRINGS-1, without duplicates.

    Raises InputError for a language wordfreq does not cover.
    """
    return list(_lexicon(language, size, uppercase))


@functools.lru_cache(maxsize=8)
def _lexicon(language: str, size: int, uppercase: bool) -> tuple[str, ...]:
    from wordfreq import available_languages, top_n_list

    if language not in available_languages():
        known = ", ".join(sorted(available_languages()))
        raise InputError(f"--protect-language {language!r}: no built-in word list; choose one of {known}, or none.")
    words = top_n_list(language, size)
    cased = [w.upper() for w in words] if uppercase else [v for w in words for v in (w, w.capitalize())]
    return tuple(dict.fromkeys([*cased, *(str(n) for n in range(DIGIT_STRINGS))]))


def split_heldout(lines: Sequence[str], share: float = HELDOUT_SHARE, seed: int = 0) -> tuple[list[str], list[str]]:
    """Return (lines to protect, held-out lines) with about `share` of the unique lines held out (seeded)."""
    unique = list(dict.fromkeys(lines))
    count = int(len(unique) * share) if len(unique) >= 10 else 0
    held = set(random.Random(seed).sample(range(len(unique)), count))
    return [l for i, l in enumerate(unique) if i not in held], [l for i, l in enumerate(unique) if i in held]


def protection(
    user_lines: Sequence[str] | None, language: str | None, uppercase: bool,
    size: int = DEFAULT_LEXICON_SIZE, heldout_share: float = HELDOUT_SHARE,
) -> tuple[list[str], list[str], dict]:
    """Return (protected lines, held-out lines, description) for an extension.

    Protected = the user's lines less the held-out share, plus the built-in lexicon of `language`
    (None or `none`: no lexicon). The description names the lexicon language and counts.
    """
    protect, heldout = split_heldout(user_lines or [], heldout_share)
    lexicon = builtin_lexicon(language, size, uppercase) if language and language != NO_LANGUAGE else []
    lines = list(dict.fromkeys([*protect, *lexicon]))
    return lines, heldout, {"language": language if lexicon else None, "lexicon_lines": len(lexicon),
                            "corpus_lines": len(protect), "heldout_lines": len(heldout), "uppercase": uppercase}
