"""The espeak-ng sample dataset and the hash split, on real rendered audio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf

from core.data.sample import plan_clips, recombined_sentences, sample_dataset
from core.errors import InputError

from core.data.manifest import read_manifest
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES, SPANISH_SENTENCES
from core.data.splits import split_of
from tests.data_helpers import require_espeak


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_sample_cli_renders_two_speakers_per_language(cli, tmp_path: Path) -> None:
    require_espeak()
    out = tmp_path / "sample"
    run = cli("dataset", "sample", "--output", out, "--languages", "en,am", "--per-language", "6", "--json")
    assert run.code == 0, run.stderr
    summary = run.json()
    assert summary["kept"] == 12 and summary["rejected"] == 0
    assert set(summary["per_language"]) == {"en", "am"}
    assert len(summary["per_speaker"]) == 4
    assert all(v["clips"] == 3 for v in summary["per_speaker"].values())
    rows, rejects = read_manifest(out / "manifest.jsonl")
    assert rejects == [] and len(rows) == 12
    am = [r for r in rows if r.language == "am"]
    assert am[0].text == AMHARIC_SENTENCES[0] and any(ch in am[0].text for ch in "ሰላም")
    info = sf.info(str(rows[0].path))
    assert (info.samplerate, info.channels) == (16000, 1)
    assert 1.0 < rows[0].duration < 8.0
    assert abs(rows[0].duration - info.frames / info.samplerate) < 1e-3
    assert json.loads((out / "summary.json").read_text())["kept"] == 12


def test_sample_without_espeak_names_the_install_command(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InputError, match="apt-get install espeak-ng") as caught:
        sample_dataset(tmp_path / "s", 16000, ["en"], 2)
    assert caught.value.exit_code == 2
    assert not (tmp_path / "s").exists()


def test_sample_refuses_unknown_languages_and_too_many_clips() -> None:
    with pytest.raises(InputError, match="--per-language"):
        plan_clips(["en"], 2 * len(ENGLISH_SENTENCES) + 1)
    with pytest.raises(InputError, match="'xx'"):
        plan_clips(["xx"], 2)
    clips = plan_clips(["en", "am"], 4)
    assert [c["id"] for c in clips[:2]] == ["en_0000", "en_0001"]
    assert len({c["speaker"] for c in clips if c["language"] == "am"}) == 2


def test_spanish_is_spoken_by_two_spanish_voices() -> None:
    clips = plan_clips(["es"], 2 * len(SPANISH_SENTENCES))
    assert {c["speaker"] for c in clips} == {"espeak-es-m3", "espeak-es-f3"}
    assert [c["text"] for c in clips[:3]] == list(SPANISH_SENTENCES[:3])


def test_recombined_clips_reshuffle_only_the_spoken_sentences_words() -> None:
    clips = plan_clips(["am"], 10, recombined=40)
    built_in, recombined = clips[:10], clips[10:]
    assert [c["text"] for c in built_in] == list(AMHARIC_SENTENCES[:10])
    assert [c["id"] for c in recombined[:2]] == ["am_r00000", "am_r00001"]
    spoken_words = {w for s in AMHARIC_SENTENCES[:10] for w in s.split()}
    assert all(set(c["text"].split()) <= spoken_words for c in recombined)
    assert len({c["text"] for c in recombined}) > 35  # new sentences, not the old ones again
    assert not {c["text"] for c in recombined} & set(AMHARIC_SENTENCES)
    assert {c["speaker"] for c in recombined} == {c["speaker"] for c in built_in}
    lengths = {len(s.split()) for s in AMHARIC_SENTENCES[:10]}
    assert {len(c["text"].split()) for c in recombined} <= lengths
    assert plan_clips(["am"], 10, recombined=40) == clips  # deterministic
    assert recombined_sentences(["a b", "c d e"], 3, "x") != recombined_sentences(["a b", "c d e"], 3, "y")


def test_split_is_deterministic_and_stable_when_data_grows() -> None:
    ids = [f"clip_{i:05d}" for i in range(4000)]
    first = {i: split_of(i, 0.1) for i in ids}
    assert first == {i: split_of(i, 0.1) for i in ids}
    val_share = sum(s == "val" for s in first.values()) / len(ids)
    assert 0.08 < val_share < 0.12
    grown = ids + [f"new_{i}" for i in range(1000)]
    assert all(split_of(i, 0.1) == first[i] for i in grown[:4000])
    assert all(split_of(i, 0.0) == "train" for i in ids[:100])
