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
