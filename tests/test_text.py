"""Tests for text normalisation and the built-in sample sentences."""

from __future__ import annotations

import unicodedata

import pytest

from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES, SPANISH_SENTENCES
from core.text import ETHIOPIC_PUNCTUATION, NORMALIZER_VERSION, normalize_text


def test_nfc_and_whitespace_collapse():
    decomposed = "cafe\u0301  au\tlait\n\n ok "
    assert normalize_text(decomposed) == "caf\u00e9 au lait ok"
    assert unicodedata.is_normalized("NFC", normalize_text(decomposed))


def test_invisible_characters_removed():
    assert normalize_text("\ufeffsel\u200bam") == "selam"


def test_ethiopic_punctuation_spacing():
    assert normalize_text("ሰላም ነው ።እንዴት ነህ ?") == "ሰላም ነው። እንዴት ነህ ?"
    assert normalize_text("ቡና፣ ሻይ ፣ወተት ።") == "ቡና፣ ሻይ፣ ወተት።"
    assert normalize_text("ጥያቄ አለኝ ፦ነገ") == "ጥያቄ አለኝ፦ ነገ"


def test_amharic_full_stop_stand_ins_only_for_amharic():
    assert normalize_text("ሰላም ::", language="am") == "ሰላም።"
    assert normalize_text("ሰላም፡፡ ቤት", language="am") == "ሰላም። ቤት"
    assert normalize_text("a :: b") == "a :: b"


def test_uppercase_option():
    assert normalize_text("hello  World", uppercase=True) == "HELLO WORLD"
    assert normalize_text("ሰላም", uppercase=True) == "ሰላም"


def test_idempotent_on_samples():
    for sentence in AMHARIC_SENTENCES + ENGLISH_SENTENCES + SPANISH_SENTENCES:
        once = normalize_text(sentence)
        assert normalize_text(once) == once
        assert once == sentence, "sample sentences are stored normalised"


def test_rejects_non_string():
    with pytest.raises(TypeError):
        normalize_text(b"bytes")  # type: ignore[arg-type]


def test_sample_sets_are_large_and_in_script():
    assert len(set(ENGLISH_SENTENCES)) >= 150
    assert len(set(AMHARIC_SENTENCES)) >= 150
    assert len(set(SPANISH_SENTENCES)) >= 30
    ethiopic = [s for s in AMHARIC_SENTENCES if any("\u1200" <= c <= "\u137f" for c in s)]
    assert len(ethiopic) == len(AMHARIC_SENTENCES)
    assert sum(any(p in s for p in ETHIOPIC_PUNCTUATION) for s in AMHARIC_SENTENCES) >= 150
    assert NORMALIZER_VERSION.startswith("lf-norm-")


def test_sample_sets_meet_the_dataset_sample_minimum():
    # Issue 4: `dataset sample` needs at least 300 distinct sentences per language in the repo.
    assert len(set(ENGLISH_SENTENCES)) >= 300
    assert len(set(AMHARIC_SENTENCES)) >= 300
    # Amharic: Ethiopic letters, Ethiopic punctuation and spaces only. The one exception is "?",
    # the question mark modern Amharic writes in place of the archaic `፧`.
    for sentence in AMHARIC_SENTENCES:
        stray = {c for c in sentence if not ("\u1200" <= c <= "\u137f" or c in " ?")}
        assert not stray, f"non-Ethiopic characters {stray} in {sentence!r}"
        assert sentence[-1] in "።?", sentence


# Readings from languagesandnumbers.com "How to count in Amharic" (0-19, tens, 100, 1,000, one million)
# and numbersdata.com "Numbers in Amharic" (54, 78, 200, 2000); 536 and 8,593 from ethiopia.limbo13.com
# "Numbers" ("5-100-30-6", "8-ši-5-100-90-3"); 105 and 157 from the UW-Madison LCTL "Numbers" chapter.
AMHARIC_READINGS = {
    0: "ዜሮ", 1: "አንድ", 2: "ሁለት", 3: "ሶስት", 4: "አራት", 5: "አምስት", 6: "ስድስት", 7: "ሰባት", 8: "ስምንት",
    9: "ዘጠኝ", 10: "አስር", 11: "አስራ አንድ", 15: "አስራ አምስት", 19: "አስራ ዘጠኝ", 20: "ሃያ", 30: "ሰላሳ",
    40: "አርባ", 50: "ኃምሳ", 60: "ስልሳ", 70: "ሰባ", 80: "ሰማንያ", 90: "ዘጠና", 54: "ኃምሳ አራት", 78: "ሰባ ስምንት",
    100: "መቶ", 105: "መቶ አምስት", 157: "መቶ ኃምሳ ሰባት", 200: "ሁለት መቶ", 536: "አምስት መቶ ሰላሳ ስድስት",
    1000: "ሺህ", 2000: "ሁለት ሺህ", 8593: "ስምንት ሺህ አምስት መቶ ዘጠና ሶስት", 1_000_000: "አንድ ሚሊዮን",
}
# Ge'ez numerals from adamyts.wixsite.com/learnamharic "Ethiopic Numerals" (፲፻ = 1,000, ፻፼ = 1,000,000,
# 8,234,309 = ፰፻፳፫፼፵፫፻፱).
GEEZ_VALUES = {"፩": 1, "፱": 9, "፲": 10, "፺": 90, "፻": 100, "፪፻": 200, "፲፻": 1000, "፼": 10_000,
               "፻፼": 1_000_000, "፰፻፳፫፼፵፫፻፱": 8_234_309, "፲፱፻፹፭": 1985}


@pytest.mark.parametrize("number,words", sorted(AMHARIC_READINGS.items()))
def test_amharic_number_words_match_the_published_readings(number: int, words: str) -> None:
    from core.amharic_numbers import number_words

    assert number_words(number) == words


def test_geez_numerals_and_digits_are_spoken_in_amharic_text_only() -> None:
    from core.amharic_numbers import geez_value

    assert {g: geez_value(g) for g in GEEZ_VALUES} == GEEZ_VALUES
    assert normalize_text("በ2010 ዓ.ም. 3.5 ኪሎ፣ 1,000 ብር", language="am") == (
        "በ ሁለት ሺህ አስር ዓ.ም. ሶስት ነጥብ አምስት ኪሎ፣ ሺህ ብር")
    assert normalize_text("ምዕራፍ ፲፪።", language="am") == "ምዕራፍ አስራ ሁለት።"
    assert normalize_text("ምዕራፍ 12", language="en") == "ምዕራፍ 12"
    assert not any(c.isdigit() or 0x1369 <= ord(c) <= 0x137C for c in normalize_text("፻፼ 42 ፳፭", language="am"))
