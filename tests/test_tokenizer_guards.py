"""Issue 16 regressions: base-language drift on held-out text, whole-script coverage for Ethiopic."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES, SPANISH_SENTENCES
from core.tokenizers.hf_merge import merge_hf_tokenizer
from core.tokenizers.protect import builtin_lexicon
from core.tokenizers.report import lines_without_unk, measure_drift
from core.tokenizers.scripts import dominant_script, script_characters
from core.tokenizers.sp_extend import extend_sentencepiece
from core.tokenizers.tokenizer import load_tokenizer

# Held-out English: the project's own sample sentences (not from wordfreq, never passed as protection),
# plus lines with numbers for the digit-merge finding.
HELDOUT_EN = list(ENGLISH_SENTENCES) + [f"In {1950 + i} the fare rose to {i * 3 % 97} cents, page {i * 11}." for i in range(70)]
AMHARIC_WITH_DIGITS = list(AMHARIC_SENTENCES) + [f"በ{1900 + i} ዓ.ም. {i * 7} ብር ከ{i % 60} ደቂቃ" for i in range(120)]


def test_builtin_lexicon_is_cased_like_the_base_and_downloads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the built-in lexicon tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    upper = builtin_lexicon("en", 1000, uppercase=True)
    assert upper[:3] == ["THE", "TO", "AND"] and "1999" in upper and "0" in upper
    mixed = builtin_lexicon("es", 1000)
    assert {"de", "De", "que", "Que"} <= set(mixed)
    assert len(builtin_lexicon("en", 20_000, uppercase=True)) >= 29_000


def test_indextts_spanish_extension_keeps_heldout_english(indextts_bpe: Path, tmp_path: Path) -> None:
    spanish = [s.upper() for s in SPANISH_SENTENCES]
    english = lines_without_unk(load_tokenizer(indextts_bpe), [s.upper() for s in HELDOUT_EN])
    base = load_tokenizer(indextts_bpe)
    extend_sentencepiece(indextts_bpe, spanish, 12500, tmp_path / "free.model", protect_language="none")
    free = measure_drift(base, load_tokenizer(tmp_path / "free.model"), english)
    assert free.rate > 0.02, "without protection Spanish pieces change unseen English"
    report = extend_sentencepiece(indextts_bpe, spanish, 12500, tmp_path / "es.model",
                                  protect_lines=[s.upper() for s in ENGLISH_SENTENCES[:100]])
    drift = measure_drift(base, load_tokenizer(tmp_path / "es.model"), english)
    assert len(english) > 300 and drift.rate <= 0.02, drift.as_dict()
    assert report["unk_rate"] == 0.0 and report["candidates_pruned"] >= 1
    protected = report["base_drift"]["protected"]
    assert protected["language"] == "en" and protected["uppercase"] and protected["lexicon_lines"] > 29_000
    assert protected["corpus_lines"] == 100
    heldout = report["base_drift"]["heldout"]
    assert heldout["source"].startswith("built-in lexicon") and heldout["lines_checked"] > 1900 and heldout["rate"] <= 0.02


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_chatterbox_amharic_merge_keeps_heldout_english_and_its_numbers(chatterbox_tokenizer: Path, tmp_path: Path) -> None:
    base = load_tokenizer(chatterbox_tokenizer)
    english = lines_without_unk(base, HELDOUT_EN)
    merge_hf_tokenizer(chatterbox_tokenizer, tmp_path / "free.json", corpus_lines=AMHARIC_WITH_DIGITS, vocab_size=1000,
                       language_tag="am", protect_language="none")
    free = measure_drift(base, load_tokenizer(tmp_path / "free.json"), english)
    assert free.rate > 0.02 and any(c.isdigit() for c in free.changed[0][0])
    report = merge_hf_tokenizer(chatterbox_tokenizer, tmp_path / "am.json", corpus_lines=AMHARIC_WITH_DIGITS,
                                vocab_size=1000, language_tag="am")
    merged = load_tokenizer(tmp_path / "am.json")
    drift = measure_drift(base, merged, english)
    assert drift.rate <= 0.02, drift.as_dict()
    assert report["unk_rate"] == 0.0 and report["merges_pruned"] >= 1
    assert report["scripts_added"]["ethiopic"] > 0
    assert all(merged.unk_id not in merged.encode(c) for c in script_characters("ethiopic"))


def test_every_ethiopic_letter_is_added(indextts_bpe: Path, tmp_path: Path) -> None:
    letters = script_characters("ethiopic")
    assert len([c for c in letters if 0x1200 <= ord(c) <= 0x137F]) == 358 and len(letters) == 463
    assert dominant_script(AMHARIC_SENTENCES) == "ethiopic" and dominant_script(ENGLISH_SENTENCES) is None
    corpus_only = extend_sentencepiece(indextts_bpe, AMHARIC_SENTENCES, 12300, tmp_path / "corpus.model",
                                       add_script="none", protect_language="none")
    sparse = load_tokenizer(tmp_path / "corpus.model")
    unknown = [c for c in letters[:358] if sparse.unk_id in sparse.encode(c)]
    assert len(unknown) >= 140, "finding 6: letters the corpus never shows stay unknown"
    report = extend_sentencepiece(indextts_bpe, AMHARIC_SENTENCES, 12600, tmp_path / "all.model", protect_language="none")
    full = load_tokenizer(tmp_path / "all.model")
    assert report["scripts_added"] == {"ethiopic": 463 - corpus_only["characters_forced"]}
    assert [c for c in letters if full.unk_id in full.encode(c)] == []
    assert all(full.decode(full.encode(c)) == c for c in unknown)
