"""Chatterbox's text preparation: ONE function used by feature extraction and by synthesis.

It follows `ChatterboxMultilingualTTS.generate` + `MTLTokenizer.encode` of the published code:
`punc_norm`, lower-casing, NFKD, the `[<language>]` tag in front, spaces as `[SPACE]`; the
ids then come from the run's tokenizer and are wrapped in `[START]` 255 / `[STOP]` 0 by the
model's collate. The English release's tokenizer has no language tags and no lower-casing;
a tokenizer with tags but none for the clip's language is refused.
"""

from __future__ import annotations

import re
from unicodedata import normalize

from core.errors import InputError
from core.tokenizers.tokenizer import Tokenizer

TEXT_PREP_VERSION = "chatterbox-mtl-text-1"
SPACE = "[SPACE]"
_TAG = re.compile(r"\[([a-z]{2,3})\]\Z")
#: languages whose published preparation needs extra packages (pykakasi, dicta, …) LinguaForge does not ship
SCRIPT_CONVERTERS = ("zh", "ja", "he", "ko", "ru")


def language_tags(tokenizer: Tokenizer) -> set[str]:
    """Return the language codes the tokenizer has a `[xx]` tag piece for (empty: English release)."""
    found = set()
    for piece in tokenizer.pieces():
        match = _TAG.match(piece)
        if match:
            found.add(match.group(1))
    return found


def prepare_text(text: str, language: str | None, multilingual: bool = True) -> str:
    """Return `text` as Chatterbox feeds it to its tokenizer (punctuation normalised, lower-cased,
    NFKD, `[language]` in front, `[SPACE]` for spaces); `multilingual=False` is the English release
    (punctuation and `[SPACE]` only). Raises InputError for a language needing a converter LinguaForge lacks."""
    from chatterbox.mtl_tts import punc_norm

    prepared = punc_norm(text)
    if multilingual:
        if language and language.lower() in SCRIPT_CONVERTERS:
            raise InputError(
                f"language {language!r}: Chatterbox prepares it with an extra converter "
                f"({', '.join(SCRIPT_CONVERTERS)} need pykakasi, dicta, …) that LinguaForge does not run; "
                "train new languages, not these."
            )
        prepared = normalize("NFKD", prepared.lower())
        if language:
            prepared = f"[{language.lower()}]{prepared}"
    return prepared.replace(" ", SPACE)


def text_ids(tokenizer: Tokenizer, text: str, language: str | None) -> list[int]:
    """Return the run tokenizer's ids for `text` in `language` after `prepare_text` (not yet wrapped
    in start/stop). Raises InputError when the tokenizer has language tags but none for `language`."""
    tags = language_tags(tokenizer)
    multilingual = bool(tags)
    if multilingual and language and language.lower() not in tags:
        raise InputError(
            f"{tokenizer.path}: no language tag [{language.lower()}] (it has {len(tags)} tags). Add it with "
            f"`python -m core tokenizer merge … --language-tag {language.lower()}` and extend the checkpoint to the new tokenizer."
        )
    return tokenizer.encode(prepare_text(text, language if multilingual else None, multilingual))
