"""`tokenizer merge` on the real Chatterbox multilingual tokenizer (2,454 ids)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from core.cli.common import Result
from core.cli.tokenizer import register
from core.errors import InputError
from core.tokenizers.hf_merge import merge_hf_tokenizer
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES, SPANISH_SENTENCES
from core.tokenizers.tokenizer import load_tokenizer
from core.tokenizers.report import measure_drift
from core.tokenizers.train import train_hf_bpe_json

ENGLISH_TAGGED = ["[en]" + s.lower() for s in ENGLISH_SENTENCES]


def _write(path: Path, lines) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run_command(*argv) -> Result:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="group"))
    args = parser.parse_args([str(a) for a in argv])
    return args.handler(args)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_amharic_merge_keeps_base_and_adds_tag(chatterbox_tokenizer, tmp_path):
    corpus = _write(tmp_path / "am.txt", AMHARIC_SENTENCES)
    out = tmp_path / "merged.json"
    result = _run_command("tokenizer", "merge", "--base", chatterbox_tokenizer, "--corpus", corpus,
                          "--vocab-size", "400", "--language-tag", "am", "--output", out, "--json")
    report = json.loads(json.dumps(result.data))
    assert result.exit_code == 0 and "language tag  [am] = id" in result.text
    base_spec = json.loads(chatterbox_tokenizer.read_text(encoding="utf-8"))
    merged_spec = json.loads(out.read_text(encoding="utf-8"))
    for token, token_id in base_spec["model"]["vocab"].items():
        assert merged_spec["model"]["vocab"][token] == token_id
    assert merged_spec["model"]["merges"][: len(base_spec["model"]["merges"])] == base_spec["model"]["merges"]
    assert merged_spec["normalizer"] == base_spec["normalizer"]
    assert merged_spec["pre_tokenizer"] == base_spec["pre_tokenizer"]
    new_ids = [i for t, i in merged_spec["model"]["vocab"].items() if t not in base_spec["model"]["vocab"]]
    assert min(new_ids) == 2454 and sorted(new_ids) == list(range(2454, 2454 + len(new_ids)))
    all_ids = list(merged_spec["model"]["vocab"].values()) + [t["id"] for t in merged_spec["added_tokens"]]
    assert len(set(merged_spec["model"]["vocab"].values())) == len(merged_spec["model"]["vocab"])

    base, merged = load_tokenizer(chatterbox_tokenizer), load_tokenizer(out)
    assert merged.size == max(all_ids) + 1 == report["new_size"]
    tag_ids = merged.encode("[am]")
    assert tag_ids == [report["language_tag_id"]] and tag_ids[0] >= 2454
    assert any(t["content"] == "[am]" and t["special"] for t in merged_spec["added_tokens"])
    for sentence in AMHARIC_SENTENCES:
        ids = merged.encode("[am]" + sentence)
        assert merged.unk_id not in ids and ids[0] == tag_ids[0]
    assert base.unk_id in base.encode(AMHARIC_SENTENCES[0])
    assert report["unk_rate"] == 0.0 and report["characters_forced"] >= 180
    assert report["added_pieces_used"] > 0.8 * (report["pieces_added"] - report["scripts_added"]["ethiopic"])
    assert measure_drift(base, merged, ENGLISH_TAGGED).lines_changed == 0
    for merge in merged_spec["model"]["merges"][len(base_spec["model"]["merges"]):]:
        a, b = merge.split(" ")
        assert a in merged_spec["model"]["vocab"] and b in merged_spec["model"]["vocab"]
        assert a + b in merged_spec["model"]["vocab"]


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_add_existing_tokenizer_file(chatterbox_tokenizer, tmp_path):
    addition = train_hf_bpe_json(AMHARIC_SENTENCES, 300)
    add_path = tmp_path / "am.json"
    add_path.write_text(json.dumps(addition, ensure_ascii=False), encoding="utf-8")
    report = merge_hf_tokenizer(chatterbox_tokenizer, tmp_path / "out.json", add_path=add_path, language_tag="am")
    merged = load_tokenizer(tmp_path / "out.json")
    assert report["corpus"] is None and report["pieces_added"] > 180
    assert "[UNK]" not in [merged.piece(i) for i in merged.encode(AMHARIC_SENTENCES[5])]
    assert report["language_tag_id"] == report["new_size"] - 1


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_existing_tag_keeps_its_id(chatterbox_tokenizer, tmp_path):
    report = merge_hf_tokenizer(chatterbox_tokenizer, tmp_path / "o.json", corpus_lines=AMHARIC_SENTENCES,
                                vocab_size=300, language_tag="en")
    assert report["language_tag_id"] == 708


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_spanish_merge_drift_and_protection(chatterbox_tokenizer, tmp_path):
    spanish = [s.lower() for s in SPANISH_SENTENCES]
    base = load_tokenizer(chatterbox_tokenizer)
    merge_hf_tokenizer(chatterbox_tokenizer, tmp_path / "free.json", corpus_lines=spanish, vocab_size=300,
                       protect_language="none")
    assert measure_drift(base, load_tokenizer(tmp_path / "free.json"), ENGLISH_TAGGED).lines_changed > 10
    report = merge_hf_tokenizer(chatterbox_tokenizer, tmp_path / "safe.json", corpus_lines=spanish, vocab_size=300,
                                protect_lines=ENGLISH_TAGGED)
    assert report["base_drift"]["lines_changed"] == 0 and report["merges_pruned"] >= 1
    assert measure_drift(base, load_tokenizer(tmp_path / "safe.json"), ENGLISH_TAGGED).lines_changed == 0
    assert report["pieces_added"] > 0


def test_merge_bad_inputs(chatterbox_tokenizer, indextts_bpe, tmp_path):
    with pytest.raises(InputError, match="tokenizer extend"):
        merge_hf_tokenizer(indextts_bpe, tmp_path / "o.json", corpus_lines=AMHARIC_SENTENCES, vocab_size=300)
    with pytest.raises(InputError, match="either --add"):
        merge_hf_tokenizer(chatterbox_tokenizer, tmp_path / "o.json")
    with pytest.raises(InputError, match="the maximum is"):
        merge_hf_tokenizer(chatterbox_tokenizer, tmp_path / "o.json", corpus_lines=AMHARIC_SENTENCES,
                           vocab_size=100000)
    assert not (tmp_path / "o.json").exists()
