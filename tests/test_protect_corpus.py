"""`--protect-corpus` protects every line given (issue 23): on the real IndexTTS2 `bpe.model`
extended with Spanish, each of 75 English protect lines — the lines an unprotected extension
changes among them — keeps its exact base encoding; drift on unseen text is measured on
`--heldout-corpus` (or the lexicon's held-out slice), never on the user's protect lines."""

from __future__ import annotations

from pathlib import Path

from core.data.sample_text import ENGLISH_SENTENCES, SPANISH_SENTENCES
from core.tokenizers.protect import HELDOUT_WORDS
from core.tokenizers.report import lines_without_unk, measure_drift
from core.tokenizers.sp_extend import extend_sentencepiece
from core.tokenizers.tokenizer import load_tokenizer

SPANISH = [s.upper() for s in SPANISH_SENTENCES]
PROTECTED = 75


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_every_protect_line_keeps_its_encoding_and_drift_is_measured_on_heldout_lines(
    indextts_bpe: Path, tmp_path: Path, cli,  # noqa: ANN001
) -> None:
    base = load_tokenizer(indextts_bpe)
    english = lines_without_unk(base, [s.upper() for s in ENGLISH_SENTENCES])
    extend_sentencepiece(indextts_bpe, SPANISH, 12500, tmp_path / "free.model", protect_language="none")
    drifting = measure_drift(base, load_tokenizer(tmp_path / "free.model"), english).changed
    assert len(drifting) >= 5, "without protection Spanish pieces change these English lines"
    changed = [line for line, _, _ in drifting]
    protect = changed + [line for line in english if line not in changed][: PROTECTED - len(changed)]
    heldout = [line for line in english if line not in protect]
    run = cli("tokenizer", "extend", "--base", indextts_bpe, "--corpus", _write(tmp_path / "es.txt", SPANISH),
              "--target-size", "12500", "--output", tmp_path / "es.model", "--json",
              "--protect-corpus", _write(tmp_path / "en.txt", protect),
              "--heldout-corpus", _write(tmp_path / "unseen.txt", heldout))
    assert run.code == 0, run.stderr
    extended = load_tokenizer(tmp_path / "es.model")
    assert extended.size > base.size
    kept = [line for line in protect if extended.encode(line) == base.encode(line)]
    assert len(protect) == PROTECTED and kept == protect, "every protect line keeps its exact base encoding"
    drift = run.json()["base_drift"]
    assert drift["protected"]["corpus_lines"] == PROTECTED and drift["lines_changed"] == 0
    unseen = drift["heldout"]
    assert unseen["source"] == "--heldout-corpus" and unseen["lines_checked"] == len(heldout) == len(english) - PROTECTED
    assert unseen["lines_changed"] == measure_drift(base, extended, heldout).lines_changed
    assert "unseen (not protected, from --heldout-corpus)" in cli(
        "tokenizer", "extend", "--base", indextts_bpe, "--corpus", tmp_path / "es.txt", "--target-size", "12500",
        "--output", tmp_path / "es2.model", "--protect-corpus", tmp_path / "en.txt",
        "--heldout-corpus", tmp_path / "unseen.txt").stdout


def test_without_a_heldout_corpus_the_lexicon_slice_after_the_protected_words_is_measured(
    indextts_bpe: Path, tmp_path: Path,
) -> None:
    report = extend_sentencepiece(indextts_bpe, SPANISH, 12200, tmp_path / "es.model", lexicon_size=2000,
                                  protect_lines=[s.upper() for s in ENGLISH_SENTENCES[:20]])
    unseen = report["base_drift"]["heldout"]
    assert unseen["source"] == f"built-in lexicon: the {HELDOUT_WORDS:,} en words ranked after the 2,000 protected"
    assert unseen["lines_checked"] + unseen["lines_skipped_unk"] <= HELDOUT_WORDS
    assert unseen["lines_checked"] > HELDOUT_WORDS * 0.9
    assert report["base_drift"]["protected"]["corpus_lines"] == 20
