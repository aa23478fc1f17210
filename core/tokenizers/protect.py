"""What a tokenizer extension protects by default: the base language's common words and digit strings.

`--protect-corpus` keeps every one of its lines exact, but unseen base-language text can still
drift. The built-in lexicon (the most frequent words of `--protect-language` from `wordfreq`, whose
word lists ship inside the package: nothing is downloaded) plus every digit string from 0 to
DIGIT_STRINGS - 1 is protected on top, cased the way the base tokenizer expects (an upper-case
base such as IndexTTS2's gets upper-cased words; others get each word lower-case and Capitalised).

Drift on text the protect loop never saw is measured on held-out lines that are not protected:
the `--heldout-corpus` lines, else the lexicon's held-out slice (the HELDOUT_WORDS words ranked
just after the protected ones). The user's protect lines are never held out.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from core.errors import InputError

DEFAULT_LANGUAGE = "en"
DEFAULT_LEXICON_SIZE = 20_000
DIGIT_STRINGS = 10_000
HELDOUT_WORDS = 2_000
NO_LANGUAGE = "none"


def builtin_lexicon(language: str, size: int = DEFAULT_LEXICON_SIZE, uppercase: bool = False) -> list[str]:
    """Return the `size` most frequent words of `language` (wordfreq) in the base's casing, then the
    digit strings 0..DIGIT_STRINGS-1, without duplicates.

    Raises InputError for a language wordfreq does not cover.
    """
    return list(_lexicon(language, size, uppercase))


@functools.lru_cache(maxsize=8)
def _lexicon(language: str, size: int, uppercase: bool) -> tuple[str, ...]:
    words = _ranked_words(language, size)
    return tuple(dict.fromkeys([*_cased(words, uppercase), *(str(n) for n in range(DIGIT_STRINGS))]))


def _ranked_words(language: str, count: int) -> list[str]:
    from wordfreq import available_languages, top_n_list

    if language not in available_languages():
        known = ", ".join(sorted(available_languages()))
        raise InputError(f"--protect-language {language!r}: no built-in word list; choose one of {known}, or none.")
    return top_n_list(language, count)


def _cased(words: Sequence[str], uppercase: bool) -> list[str]:
    return [w.upper() for w in words] if uppercase else [v for w in words for v in (w, w.capitalize())]


def _uses_lexicon(language: str | None) -> bool:
    return bool(language) and language != NO_LANGUAGE


def protection(
    user_lines: Sequence[str] | None, language: str | None, uppercase: bool, size: int = DEFAULT_LEXICON_SIZE,
) -> tuple[list[str], dict[str, Any]]:
    """Return (protected lines, description) for an extension.

    Protected = every one of the user's lines plus the built-in lexicon of `language` (None or
    `none`: no lexicon). The description names the lexicon language and counts.
    """
    user = list(dict.fromkeys(user_lines or []))
    lexicon = builtin_lexicon(language, size, uppercase) if _uses_lexicon(language) else []
    lines = list(dict.fromkeys([*user, *lexicon]))
    return lines, {"language": language if lexicon else None, "lexicon_lines": len(lexicon),
                   "corpus_lines": len(user), "uppercase": uppercase}


def heldout_lines(
    heldout: Sequence[str] | None, language: str | None, uppercase: bool, protected: Sequence[str],
    size: int = DEFAULT_LEXICON_SIZE, words: int = HELDOUT_WORDS,
) -> tuple[list[str], str | None]:
    """Return (lines to measure drift on, where they come from) — none of them protected.

    The lines are `heldout` (the `--heldout-corpus`) when given, else the lexicon's held-out slice:
    the `words` words of `language` ranked after its `size` protected ones, cased like the lexicon.
    Lines that are also protected are left out (their drift is 0 by construction). Returns ([], None)
    when there is nothing to hold out (no held-out corpus and no lexicon language).
    """
    if heldout:
        lines, source = list(dict.fromkeys(heldout)), "--heldout-corpus"
    elif _uses_lexicon(language):
        lines = _cased(_ranked_words(str(language), size + words)[size:], uppercase)
        source = f"built-in lexicon: the {words:,} {language} words ranked after the {size:,} protected"
    else:
        return [], None
    taken = set(protected)
    return [line for line in lines if line not in taken], source
