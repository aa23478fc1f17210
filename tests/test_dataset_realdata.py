"""Common Voice and Hugging Face imports, measured filters with planted faults, speaker splits (issue 26)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf

from core.audio import read_audio
from core.data.filter_config import FilterConfig
from core.data.filters import text_check
from core.data.importers import ImportOptions
from core.data.importing import import_dataset
from core.data.manifest import read_manifest
from core.errors import InputError
from tests.cv_helpers import CV_RATE, Release, make_hf_folder, make_release, plant_faults
from tests.data_helpers import run_cli

RATE = 16000


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """A Common Voice-shaped release: six Amharic espeak clips (two client_ids) as mp3, three broken rows."""
    return make_release(tmp_path_factory.mktemp("cv") / "cv-corpus-am", per_language=6)


def test_commonvoice_import_keeps_good_rows_and_rejects_broken_ones_by_line(release: Release, tmp_path: Path) -> None:
    summary = import_dataset("commonvoice", release.folder, tmp_path / "out", RATE)
    assert (summary.kept, summary.rejected) == (6, 3)
    by_line = {r.line: r.reason for r in summary.rejects}
    assert set(by_line) == set(release.broken_lines)
    for line, words in release.broken_lines.items():
        assert words in by_line[line], (line, by_line[line])
    rows, _ = read_manifest(summary.manifest)
    assert [r.id for r in rows] == release.kept_ids
    assert {r.speaker for r in rows} == set(release.speakers.values()) and len(release.speakers) == 2
    first = json.loads(summary.manifest.read_text(encoding="utf-8").splitlines()[0])
    assert (first["up_votes"], first["down_votes"], first["gender"], first["age"]) == (2, 0, "male_masculine", "thirties")
    assert first["language"] == "am" and first["text"] == "ሰላም ነው? እንዴት አደርክ?"
    mp3 = sf.info(str(release.folder / "clips" / f"{rows[0].id}.mp3"))
    assert mp3.samplerate == CV_RATE and abs(rows[0].duration - mp3.duration) < 0.06
    train = import_dataset("commonvoice", release.folder, tmp_path / "train", RATE, ImportOptions(tsv="train.tsv"))
    assert train.kept == 2
    with pytest.raises(InputError, match="dev.tsv: not found .*--tsv"):
        import_dataset("commonvoice", release.folder, tmp_path / "dev", RATE, ImportOptions(tsv="dev.tsv"))


def test_hf_folder_and_parquet_give_the_same_clips(release: Release, tmp_path: Path) -> None:
    cv = import_dataset("commonvoice", release.folder, tmp_path / "cv", RATE)
    folder = make_hf_folder(release, tmp_path / "hf")
    options = ImportOptions(text_column="sentence", speaker_column="client_id", language="am")
    hf = import_dataset("hf", folder, tmp_path / "hf-out", RATE, options)
    from datasets import load_from_disk

    load_from_disk(str(folder)).to_parquet(str(tmp_path / "pq" / "train.parquet"))
    pq = import_dataset("hf", tmp_path / "pq", tmp_path / "pq-out", RATE, options)
    expected = [(r.id, r.text, r.speaker, r.duration) for r in read_manifest(cv.manifest)[0]]
    for summary in (hf, pq):
        rows, _ = read_manifest(summary.manifest)
        assert [(r.id, r.text, r.speaker, r.duration) for r in rows] == expected
        assert rows[0].meta["up_votes"] == 2
    a, b = read_audio(read_manifest(cv.manifest)[0][0].path)[0], read_audio(read_manifest(hf.manifest)[0][0].path)[0]
    assert a.shape == b.shape and float((a - b).abs().max()) == 0.0
    with pytest.raises(InputError, match="no column 'transcript' \\(--text-column\\)"):
        import_dataset("hf", folder, tmp_path / "bad", RATE, ImportOptions(text_column="transcript"))


def test_each_planted_fault_is_caught_by_its_filter_and_no_clean_clip_is_removed(release: Release, tmp_path: Path) -> None:
    faulty = make_release(tmp_path / "faulty", per_language=6)
    expected = plant_faults(faulty)
    summary = import_dataset("commonvoice", faulty.folder, tmp_path / "out", RATE, filters=FilterConfig())
    caught = {r.id: r.reason.split(":", 1)[0].removeprefix("filter ") for r in summary.rejects if r.reason.startswith("filter ")}
    assert caught == {k: v for k, v in expected.items() if v != "silence"}
    rows, _ = read_manifest(summary.manifest)
    assert [r.id for r in rows] == [*faulty.kept_ids, "planted_padded"], "no clean clip removed"
    padded = next(r for r in rows if r.id == "planted_padded")
    original = next(r for r in rows if r.id == faulty.kept_ids[1])
    assert padded.meta["lead_silence"] > 1.9 and padded.meta["trail_silence"] > 1.9
    assert abs(padded.duration - original.duration) < 0.5 and padded.duration < original.duration + 2.0
    assert sf.info(str(padded.path)).duration == pytest.approx(padded.duration, abs=0.01)
    for row in rows:
        assert row.meta["snr_db"] >= 15 and row.meta["clipping"] <= 0.001 and row.meta["chars_per_s"] > 0
    record = json.loads((tmp_path / "out" / "summary.json").read_text())["filters"]
    assert record["removed"] == {"duration": 0, "clipping": 1, "snr": 1, "silence": 0, "text": 0, "speech_rate": 1, "duplicate": 2}
    assert record["trimmed"] == 1 and record["thresholds"]["min_snr"] == 15.0
    assert sum(record["duration_histogram"].values()) == len(rows)
    off = import_dataset("commonvoice", faulty.folder, tmp_path / "off", RATE,
                         filters=FilterConfig(off=["duplicate", "snr"]))
    kept = {r.id for r in read_manifest(off.manifest)[0]}
    assert {"planted_duplicate", "planted_near_duplicate", "planted_noisy"} <= kept and "planted_clipped" not in kept
    assert json.loads((tmp_path / "off" / "summary.json").read_text())["filters"]["thresholds"]["off"] == ["duplicate", "snr"]


def test_text_filter_verbalises_amharic_digits_and_rejects_digits_it_cannot_read() -> None:
    config = FilterConfig()
    text, verbalised, problem = text_check("በ2 ሰዓት", "am", config)
    assert (" ".join(text.split()), verbalised, problem) == ("በ ሁለት ሰዓት", True, None)
    assert "no number verbaliser for language 'en'" in text_check("At 2 pm", "en", config)[2]
    assert text_check("At 2 pm", "en", FilterConfig(off=["text"])) == ("At 2 pm", False, None)


def test_speaker_split_holds_out_whole_speakers(release: Release, tmp_path: Path) -> None:
    extra = make_release(tmp_path / "en", per_language=4, languages=("en",))
    summary = import_dataset("commonvoice", release.folder, tmp_path / "out", RATE)
    more = import_dataset("commonvoice", extra.folder, tmp_path / "out-en", RATE)
    manifest = tmp_path / "out" / "manifest.jsonl"
    with open(manifest, "a", encoding="utf-8") as handle:
        for line in more.manifest.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            handle.write(json.dumps({**row, "audio": str(tmp_path / "out-en" / row["audio"])}, ensure_ascii=False) + "\n")
    run = run_cli("dataset", "split", "--manifest", manifest, "--by", "speaker", "--val-ratio", "0.2",
                  "--eval-ratio", "0.2", "--write", "--json")
    assert run.code == 0, run.stderr
    data = run.json()
    assert data["train"] + data["val"] + data["eval"] == summary.kept + more.kept == 10
    assert min(data["train"], data["val"], data["eval"]) >= 2
    speakers = {}
    for name in ("train", "val", "eval"):
        rows, _ = read_manifest(tmp_path / "out" / f"manifest.{name}.jsonl")
        speakers[name] = {r.speaker for r in rows}
        assert all(data["speakers"][s]["split"] == name for s in speakers[name])
    assert not (speakers["train"] & speakers["val"]) and not (speakers["train"] & speakers["eval"])
    assert not (speakers["val"] & speakers["eval"]) and len(set().union(*speakers.values())) == 4
    too_few = run_cli("dataset", "split", "--manifest", tmp_path / "out-en" / "manifest.jsonl", "--by", "speaker",
                      "--val-ratio", "0.2", "--eval-ratio", "0.2")
    assert too_few.code == 2 and "2 speaker(s), 3 needed" in too_few.stderr


def test_reader_names_a_missing_codec_and_a_zero_byte_file(release: Release, monkeypatch: pytest.MonkeyPatch) -> None:
    clip = release.folder / "clips" / f"{release.kept_ids[0]}.mp3"
    with pytest.raises(InputError, match="common_voice_empty.mp3: empty audio file \\(0 bytes\\)"):
        read_audio(release.folder / "clips" / "common_voice_empty.mp3")
    formats = {k: v for k, v in sf.available_formats().items() if k != "MP3"}
    monkeypatch.setattr(sf, "available_formats", lambda: formats)  # a libsndfile older than 1.1 lacks MP3
    with pytest.raises(InputError, match=f"{clip.name}: this machine's libsndfile .* cannot decode MP3; install libsndfile >= 1.1"):
        read_audio(clip)
