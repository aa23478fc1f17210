"""`tokenizer train`, `inspect`, `sweep` and `encode`, and the corpus checks every command shares."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from core.cli.tokenizer import register
from core.tokenizers.corpus import read_corpus_lines
from core.errors import InputError
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES
from core.tokenizers.sp_proto import parse_model_proto
from core.tokenizers.tokenizer import load_tokenizer
from core.tokenizers.report import inspect_tokenizer
from core.tokenizers.sweep import recommend, sweep_vocabulary_sizes
from core.tokenizers.train import SentencePieceOptions, VocabularyTooLarge, train_tokenizer


def _write(path: Path, lines) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_train_sentencepiece_with_indextts_ids(tmp_path):
    options = SentencePieceOptions(user_defined_symbols=("፡", "።", "፣"))
    summary = train_tokenizer(AMHARIC_SENTENCES, "sentencepiece", 600, tmp_path / "am.model", options)
    tokenizer = load_tokenizer(tmp_path / "am.model")
    assert summary["size"] == tokenizer.size == 600
    assert tokenizer.special_ids() == {"bos": 0, "eos": 1, "unk": 2, "pad": None}
    assert [tokenizer.piece(i) for i in range(3, 6)] == ["፡", "።", "፣"]
    assert all(tokenizer.unk_id not in tokenizer.encode(s) for s in AMHARIC_SENTENCES)
    assert len((tmp_path / "am.vocab").read_text(encoding="utf-8").splitlines()) == 600
    assert parse_model_proto((tmp_path / "am.model").read_bytes()).trainer_spec.model_type == 2  # BPE


def test_train_hf_bpe(tmp_path):
    summary = train_tokenizer(ENGLISH_SENTENCES, "hf-bpe", 500, tmp_path / "en.json")
    tokenizer = load_tokenizer(tmp_path / "en.json")
    assert tokenizer.kind == "hf" and tokenizer.size == summary["size"] == 500
    assert tokenizer.unk_id == summary["special_ids"]["unk"] == 0
    assert tokenizer.unk_id not in tokenizer.encode(ENGLISH_SENTENCES[0])


def test_train_vocab_larger_than_corpus_states_maximum(tmp_path, cli):
    corpus = _write(tmp_path / "am.txt", AMHARIC_SENTENCES)
    run = cli("tokenizer", "train", "--corpus", corpus, "--kind", "sentencepiece", "--vocab-size", "20000",
              "--output", tmp_path / "t.model", "--json")
    assert run.code == 2 and "Traceback" not in run.stderr
    maximum = int(run.stderr.split("the maximum is ")[1].split(".")[0])
    assert 2000 < maximum < 20000
    assert not (tmp_path / "t.model").exists()
    summary = train_tokenizer(AMHARIC_SENTENCES, "sentencepiece", maximum, tmp_path / "t.model")
    assert summary["size"] == maximum
    with pytest.raises(VocabularyTooLarge) as info:
        train_tokenizer(AMHARIC_SENTENCES, "hf-bpe", 20000, tmp_path / "t.json")
    assert info.value.maximum < 20000 and "--vocab-size" in str(info.value)


def test_bad_corpora(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(InputError, match="the corpus is empty"):
        read_corpus_lines([empty])
    repeated = _write(tmp_path / "aaa.txt", ["ሀሀሀሀሀሀ"] * 50)
    with pytest.raises(InputError, match="single character 'ሀ' repeated"):
        read_corpus_lines([repeated])
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"one\ntwo\nthr\xe9e\n")
    with pytest.raises(InputError, match=r"latin1.txt line 3: not UTF-8"):
        read_corpus_lines([latin1])
    with pytest.raises(InputError, match="corpus file not found"):
        read_corpus_lines([tmp_path / "missing.txt"])


def test_inspect_reports_unk_and_unused_share(indextts_bpe, tmp_path, cli):
    corpus = _write(tmp_path / "am.txt", AMHARIC_SENTENCES[:40])
    run = cli("tokenizer", "inspect", "--tokenizer", indextts_bpe, "--corpus", corpus, "--base-size", "12000",
              "--json")
    assert run.code == 0, run.stderr
    stats = run.json()["corpus"]
    assert run.json()["size"] == 12000 and run.json()["special_ids"]["unk"] == 2
    assert stats["unk_rate"] > 0.3
    assert {u["char"] for u in stats["unknown_characters"]} >= {"ሰ", "ላ", "ም"}
    assert stats["unused_share"] > 0.99 and stats["tokens_at_or_above_base"] == 0
    assert stats["bytes_per_token"] > stats["chars_per_token"] > 0


def test_inspect_english_compression(indextts_bpe):
    report = inspect_tokenizer(indextts_bpe, [s.upper() for s in ENGLISH_SENTENCES])
    stats = report["corpus"]
    assert stats["unk_rate"] == 0.0 and stats["unknown_characters"] == []
    assert 2.5 < stats["chars_per_token"] < 6.0
    assert 0.5 < stats["unused_share"] < 1.0


def test_sweep_recommends_and_reports_too_large(tmp_path):
    result = sweep_vocabulary_sizes(AMHARIC_SENTENCES, [300, 600, 20000])
    rows = {r["size"]: r for r in result["rows"]}
    assert rows[600]["chars_per_token"] > rows[300]["chars_per_token"] > 1.0
    assert rows[600]["unused_share"] > rows[300]["unused_share"]
    assert "supports at most" in rows[20000]["error"]
    assert result["recommended"] in (300, 600) and result["reason"]
    assert result["lines_heldout"] == len(AMHARIC_SENTENCES) // 10


def test_recommend_rule():
    rows = [
        {"size": 1000, "chars_per_token": 2.0, "unused_share": 0.01, "error": None},
        {"size": 2000, "chars_per_token": 2.5, "unused_share": 0.04, "error": None},
        {"size": 4000, "chars_per_token": 2.52, "unused_share": 0.06, "error": None},
        {"size": 8000, "chars_per_token": 3.0, "unused_share": 0.3, "error": None},
    ]
    size, reason = recommend(rows)
    assert size == 2000 and "0.8%" in reason
    assert recommend([dict(rows[3])])[0] == 8000
    assert recommend([{"size": 5, "error": "too large"}])[0] is None


def test_encode(indextts_bpe):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="group"))
    args = parser.parse_args(["tokenizer", "encode", "--tokenizer", str(indextts_bpe), "--text", "HELLO WORLD"])
    result = args.handler(args)
    data = result.data
    assert result.text.startswith("ids ") and "(0 unk)" in result.text
    tokenizer = load_tokenizer(indextts_bpe)
    assert data["ids"] == tokenizer.encode("HELLO WORLD") and data["unk_count"] == 0
    assert "".join(data["pieces"]).replace("▁", " ").strip() == "HELLO WORLD"


def test_every_command_has_help_and_json(capsys):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="group"))
    for command in ("train", "extend", "merge", "inspect", "sweep", "encode"):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(["tokenizer", command, "--help"])
        assert exit_info.value.code == 0
        assert "--json" in capsys.readouterr().out
