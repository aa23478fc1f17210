"""Chatterbox-Turbo's text preparation: ONE function used by feature extraction and by synthesis.

It is what `ChatterboxTurboTTS.generate` does to a text: the published `punc_norm`, then the
tokenizer's ids as they are (GPT-2's byte-level BPE adds no start/stop tokens). A new language's
tag (`[am]`, from `tokenizer merge --language-tag am`) goes in front of the text before `punc_norm`,
exactly as a user of the published `generate` types it (`generate("[am]ሰላም …")`); English, the
base language, takes no tag. A tokenizer with language tags but none for a clip's language (other
than English) is refused.
"""

from __future__ import annotations

from core.errors import InputError
from core.families.chatterbox.text import language_tags
from core.tokenizers.tokenizer import Tokenizer

TEXT_PREP_VERSION = "chatterbox-turbo-text-1"
BASE_LANGUAGE = "en"
_TAGS: dict[str, set[str]] = {}


def tokenizer_tags(tokenizer: Tokenizer) -> set[str]:
    """Return the language codes the tokenizer has a `[xx]` tag for (read once per tokenizer fingerprint:
    GPT-2's 50k pieces are slow to scan per clip)."""
    if tokenizer.fingerprint not in _TAGS:
        _TAGS[tokenizer.fingerprint] = language_tags(tokenizer)
    return _TAGS[tokenizer.fingerprint]


def prepare_text(text: str, language: str | None, tags: set[str]) -> str:
    """Return `text` as Turbo's `generate` tokenises it: `[language]` in front when `tags` hold it, then `punc_norm`."""
    from chatterbox.tts_turbo import punc_norm

    code = (language or "").lower()
    return punc_norm(f"[{code}]{text}" if code in tags else text)


def text_ids(tokenizer: Tokenizer, text: str, language: str | None) -> list[int]:
    """Return the tokenizer's ids for `text` in `language` after `prepare_text`.

    Raises InputError when the tokenizer has language tags but none for `language` (English excepted).
    """
    tags = tokenizer_tags(tokenizer)
    code = (language or "").lower()
    if tags and code and code != BASE_LANGUAGE and code not in tags:
        raise InputError(
            f"{tokenizer.path}: no language tag [{code}] (it has {', '.join(sorted(tags))}). Add it with "
            f"`python -m core tokenizer merge … --language-tag {code}` and extend the checkpoint to the new tokenizer."
        )
    return tokenizer.encode(prepare_text(text, language, tags))
