"""`tokenizer extend` on the real IndexTTS2 SentencePiece model (12,000 pieces)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import InputError
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES, SPANISH_SENTENCES
from core.tokenizers.sp_extend import check_target_size, extend_sentencepiece
from core.tokenizers.sp_proto import NORMAL, parse_model_proto
from core.tokenizers.tokenizer import load_tokenizer
from core.tokenizers.report import measure_drift
from tests.fixture_paths import INDEXTTS_BPE

CHINESE = ["今天天气很好，我们去公园散步。", "他在学校学习中文和数学。", "请把门关上，外面很冷。", "我喜欢喝茶，不喜欢喝咖啡。"]
ENGLISH_UPPER = [s.upper() for s in ENGLISH_SENTENCES]


def _write(path: Path, lines) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def amharic_extension(tmp_path_factory) -> tuple[Path, Path, dict]:
    folder = tmp_path_factory.mktemp("am")
    base = folder / "bpe.model"
    base.write_bytes(INDEXTTS_BPE.read_bytes())
    report = extend_sentencepiece(base, AMHARIC_SENTENCES, 12600, folder / "am.model")
    return base, folder / "am.model", report


def test_base_pieces_unchanged_and_new_pieces_well_formed(amharic_extension):
    base_path, out_path, report = amharic_extension
    base = parse_model_proto(base_path.read_bytes())
    new = parse_model_proto(out_path.read_bytes())
    assert len(base.pieces) == 12000 and len(new.pieces) == 12600
    for old, kept in zip(base.pieces, new.pieces[:12000]):
        assert (old.piece, old.score, old.type) == (kept.piece, kept.score, kept.type)
    added = new.pieces[12000:]
    assert all(p.type == NORMAL for p in added)
    texts = [p.piece for p in new.pieces]
    assert len(set(texts)) == len(texts)
    assert max(p.score for p in added) < min(p.score for p in base.pieces)
    assert report["reached_target"] and report["pieces_added"] == 600
    vocab_lines = out_path.with_suffix(".vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab_lines) == 12600 and vocab_lines[12000].split("\t")[0] == added[0].piece


def test_amharic_encodes_without_unk_and_uses_new_ids(amharic_extension):
    base_path, out_path, report = amharic_extension
    base, extended = load_tokenizer(base_path), load_tokenizer(out_path)
    assert base.unk_id in base.encode(AMHARIC_SENTENCES[1]), "the base cannot encode Amharic"
    ethiopic = {c for s in AMHARIC_SENTENCES for c in s if "\u1200" <= c <= "\u137f"}
    assert report["characters_forced"] == 463 and report["scripts_added"] == {"ethiopic": 463 - len(ethiopic)}
    for sentence in AMHARIC_SENTENCES:
        ids = extended.encode(sentence)
        assert extended.unk_id not in ids
        assert extended.decode(ids) == sentence
    assert report["unk_rate"] == 0.0
    assert len(ethiopic) <= report["added_pieces_used"] <= 600
    assert report["corpus"]["share_at_or_above_base"] > 0.5


def test_english_and_chinese_encode_identically(amharic_extension):
    base_path, out_path, _ = amharic_extension
    drift = measure_drift(load_tokenizer(base_path), load_tokenizer(out_path), ENGLISH_UPPER + CHINESE)
    assert drift.lines_checked == len(ENGLISH_UPPER) + 4 and drift.lines_changed == 0


def test_stops_short_and_says_how_many_candidates(indextts_bpe, tmp_path):
    report = extend_sentencepiece(indextts_bpe, AMHARIC_SENTENCES, 13000, tmp_path / "big.model")
    assert not report["reached_target"]
    kept = report["candidates_available"] - report["candidates_pruned"]
    assert report["new_size"] == 12000 + report["characters_forced"] + kept
    assert report["new_size"] < 13000
    assert load_tokenizer(tmp_path / "big.model").size == report["new_size"]


def test_spanish_drift_without_and_with_protection(indextts_bpe, tmp_path, cli):
    spanish = _write(tmp_path / "es.txt", [s.upper() for s in SPANISH_SENTENCES])
    english = _write(tmp_path / "en.txt", ENGLISH_UPPER)
    base = load_tokenizer(indextts_bpe)
    unprotected = extend_sentencepiece(indextts_bpe, [s.upper() for s in SPANISH_SENTENCES], 12100,
                                       tmp_path / "free.model", protect_language="none")
    assert unprotected["base_drift"] is None
    free_drift = measure_drift(base, load_tokenizer(tmp_path / "free.model"), ENGLISH_UPPER)
    assert free_drift.lines_changed >= 1, "Spanish pieces below the base minimum still change English"
    run = cli("tokenizer", "extend", "--base", indextts_bpe, "--corpus", spanish, "--target-size", "12100",
              "--output", tmp_path / "safe.model", "--protect-corpus", english, "--json")
    assert run.code == 0, run.stderr
    report = run.json()
    protected = report["base_drift"]["protected"]
    assert protected["corpus_lines"] == len(ENGLISH_UPPER) and protected["lexicon_lines"] > 0
    assert report["base_drift"]["lines_changed"] == 0 and report["base_drift"]["heldout"]["rate"] <= 0.02
    assert report["candidates_pruned"] >= 1 and 12000 < report["new_size"] <= 12100
    assert measure_drift(base, load_tokenizer(tmp_path / "safe.model"), ENGLISH_UPPER).lines_changed == 0
    assert (tmp_path / "safe.vocab").is_file() and (tmp_path / "safe.report.json").is_file()


def test_protect_lines_the_base_cannot_encode_are_skipped(indextts_bpe, tmp_path):
    protect = ENGLISH_UPPER[:20] + ["PRICE: 42 (CAFÉ)", "lower case"]
    report = extend_sentencepiece(indextts_bpe, [s.upper() for s in SPANISH_SENTENCES], 12060,
                                  tmp_path / "x.model", protect_lines=protect, protect_language="none")
    drift = report["base_drift"]
    assert drift["lines_skipped_unk"] >= 1
    assert drift["lines_checked"] + drift["lines_skipped_unk"] == 22 and drift["heldout"] is None


def test_wrong_file_type_as_base(chatterbox_tokenizer, tmp_path):
    with pytest.raises(InputError, match="tokenizer merge"):
        extend_sentencepiece(chatterbox_tokenizer, AMHARIC_SENTENCES, 13000, tmp_path / "o.model")
    text = tmp_path / "notes.model"
    text.write_text("just some notes\n", encoding="utf-8")
    with pytest.raises(InputError, match="neither a SentencePiece model"):
        extend_sentencepiece(text, AMHARIC_SENTENCES, 13000, tmp_path / "o.model")
    assert not (tmp_path / "o.model").exists()


def test_target_below_or_at_base_size(indextts_bpe, tmp_path):
    for target in (11000, 12000):
        with pytest.raises(InputError, match="not above the base size 12000"):
            extend_sentencepiece(indextts_bpe, AMHARIC_SENTENCES, target, tmp_path / "o.model")
    with pytest.raises(InputError, match="cannot hold the 463 characters .*with every letter of ethiopic"):
        extend_sentencepiece(indextts_bpe, AMHARIC_SENTENCES, 12100, tmp_path / "o.model")
    assert not (tmp_path / "o.model").exists()
    # the dashboard's form makes the same check before it queues a job (no job waits in line to fail on it)
    with pytest.raises(InputError, match="cannot hold the 463 characters .*Pass --target-size 12463 or more"):
        check_target_size(indextts_bpe, AMHARIC_SENTENCES, 12462)
    check_target_size(indextts_bpe, AMHARIC_SENTENCES, 12463)


def test_bad_corpus_exits_2_with_line_number(indextts_bpe, tmp_path, cli):
    bad = tmp_path / "bad.txt"
    bad.write_bytes("ሰላም ነው።\n".encode() + b"caf\xe9 latin-1\n")
    run = cli("tokenizer", "extend", "--base", indextts_bpe, "--corpus", bad, "--target-size", "12500",
              "--output", tmp_path / "o.model", "--json")
    assert run.code == 2
    assert "bad.txt line 2: not UTF-8 (byte 0xe9" in run.stderr and "Traceback" not in run.stderr
    assert run.json()["ok"] is False
    assert not (tmp_path / "o.model").exists()


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_extend_a_bpe_base(tmp_path):
    from core.tokenizers.train import train_tokenizer

    train_tokenizer(ENGLISH_SENTENCES, "sentencepiece", 800, tmp_path / "en.model")
    base = load_tokenizer(tmp_path / "en.model")
    report = extend_sentencepiece(tmp_path / "en.model", AMHARIC_SENTENCES, 1400, tmp_path / "am.model")
    extended = load_tokenizer(tmp_path / "am.model")
    assert report["reached_target"] and extended.size == 1400 and report["unk_rate"] == 0.0
    assert extended.pieces()[:800] == base.pieces()
    assert "▁ቤት" in [extended.piece(i) for i in extended.encode("ቤት")]
    assert measure_drift(base, extended, ENGLISH_SENTENCES).lines_changed == 0
    safe = extend_sentencepiece(tmp_path / "en.model", SPANISH_SENTENCES, 1000, tmp_path / "es.model",
                                protect_lines=ENGLISH_SENTENCES)
    assert safe["candidates_pruned"] >= 1
    assert measure_drift(base, load_tokenizer(tmp_path / "es.model"), ENGLISH_SENTENCES).lines_changed == 0
