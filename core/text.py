"""Text normalisation shared by corpus collection, dataset import and preprocessing.

`normalize_text` is the one place text is cleaned before it reaches a tokenizer. Its behaviour
is versioned by `NORMALIZER_VERSION`: the preprocessing cache includes it in its fingerprint, so
any change to the rules below must bump the version.
"""

from __future__ import annotations

import re
import unicodedata

from core.amharic_numbers import verbalize_numbers

NORMALIZER_NAME = "lf-norm"
NORMALIZER_VERSION = "lf-norm-2"

# Ethiopic wordspace, full stop, comma, semicolon, colon, preface colon, question mark, paragraph separator.
ETHIOPIC_PUNCTUATION = "፡።፣፤፥፦፧፨"

_INVISIBLE = dict.fromkeys(map(ord, "\ufeff\u200b\u200e\u200f\u00ad"), None)
_WHITESPACE = re.compile(r"\s+")
_SPACE_BEFORE_ETHIOPIC = re.compile(rf"\s+([{ETHIOPIC_PUNCTUATION}])")
_NO_SPACE_AFTER_ETHIOPIC = re.compile(rf"([{ETHIOPIC_PUNCTUATION}])(?=[^\s{ETHIOPIC_PUNCTUATION}])")
# Two ASCII colons or two wordspaces are the common keyboard stand-ins for `።`.
_FULL_STOP_STAND_IN = re.compile(r"\s*(?::\s?:|፡\s?፡)")


def normalize_text(text: str, language: str | None = None, uppercase: bool = False) -> str:
    """Return `text` normalised for tokenisation.

    Rules: Unicode NFC; byte-order marks, zero-width spaces, direction marks and soft hyphens
    removed; every run of whitespace (newlines and tabs included) becomes one space, and the
    ends are stripped. Ethiopic punctuation stays as its own characters with no space before it
    and one space after it (unless another punctuation mark or the end follows). For Amharic
    (`language` "am"), the stand-ins `::` and `፡፡` become `።`, and Arabic-digit numbers and Ge'ez
    numerals become Amharic number words (`core.amharic_numbers`). With `uppercase`, the result is
    upper-cased (for tokenizers trained on upper-case text, such as IndexTTS2's).
    Raises nothing; a non-string raises TypeError.
    """
    if not isinstance(text, str):
        raise TypeError(f"normalize_text expects str, got {type(text).__name__}")
    result = unicodedata.normalize("NFC", text).translate(_INVISIBLE)
    if language is not None and language.lower().startswith("am"):
        result = verbalize_numbers(_FULL_STOP_STAND_IN.sub("።", result))
    result = _WHITESPACE.sub(" ", result).strip()
    if any(mark in result for mark in ETHIOPIC_PUNCTUATION):
        result = _SPACE_BEFORE_ETHIOPIC.sub(r"\1", result)
        result = _NO_SPACE_AFTER_ETHIOPIC.sub(r"\1 ", result)
    if uppercase:
        result = result.upper()
    return result
