"""Dataset import in every format, with deliberately broken rows, on real espeak audio."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from core.text import NORMALIZER_VERSION
from core.data.importing import import_dataset
from core.errors import InputError
from core.data.importers import ImportOptions
from core.data.manifest import read_manifest
from core.tokenizers.tokenizer import load_tokenizer
from tests.data_helpers import make_espeak_dataset, run_cli

RATE = 16000


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Four real espeak clips per language, by id."""
    manifest = make_espeak_dataset(tmp_path_factory.mktemp("espeak"), per_language=4)
    rows, _ = read_manifest(manifest)
    return {row.id: row.path for row in rows}


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def reasons_by_line(summary) -> dict[int | None, str]:
    return {r.line: r.reason for r in summary.rejects}


def write_stereo_22k(source: Path, dest: Path) -> None:
    data, rate = sf.read(str(source), dtype="float32")
    up = np.interp(np.arange(0, len(data), rate / 22050), np.arange(len(data)), data).astype(np.float32)
    sf.write(str(dest), np.stack([up, up * 0.5], axis=1), 22050)


def test_ljspeech_import_keeps_good_rows_and_rejects_each_broken_one(clips, tmp_path: Path) -> None:
    src = tmp_path / "lj"
    (src / "wavs").mkdir(parents=True)
    shutil.copy(clips["en_0000"], src / "wavs" / "en_0000.wav")
    write_stereo_22k(clips["en_0001"], src / "wavs" / "en_0001.flac")
    shutil.copy(clips["en_0002"], src / "wavs" / "en_0002.wav")
    (src / "wavs" / "garbage.wav").write_bytes(b"RIFF not really a wave file" * 10)
    sf.write(str(src / "wavs" / "short.wav"), np.full(1600, 0.1, dtype=np.float32), RATE)
    sf.write(str(src / "wavs" / "silent.wav"), np.zeros(RATE, dtype=np.float32), RATE)
    lines = [
        "en_0000|The morning train, raw.|The  morning train was late again.",
        "en_0001|She planted tomatoes.",
        "missing_file|Hello there.",
        "only_one_field",
        "en_0002||",
        "en_0000|A duplicate id.",
        "garbage|Some text.",
        "__BAD_UTF8__",
        "short|Too short.",
        "silent|Quiet.",
    ]
    body = "\n".join(lines).encode("utf-8").replace(b"__BAD_UTF8__", b"bad\xff\xfe|text")
    (src / "metadata.csv").write_bytes(body + b"\n")
    before = tree_digest(src)
    summary = import_dataset("ljspeech", src, tmp_path / "out", RATE, ImportOptions(speaker="lj"))
    assert tree_digest(src) == before, "the input must never be modified"
    assert (summary.kept, summary.rejected) == (2, 8)
    reasons = reasons_by_line(summary)
    assert "not found" in reasons[3]
    assert "expected 2 or 3" in reasons[4]
    assert reasons[5] == "empty text"
    assert "duplicate id (first at line 1)" == reasons[6]
    assert "unreadable" in reasons[7]
    assert "not UTF-8" in reasons[8]
    assert "duration 0.10s outside" in reasons[9]
    assert "silent" in reasons[10]
    rows, rejects = read_manifest(summary.manifest)
    assert rejects == [] and [r.id for r in rows] == ["en_0000", "en_0001"]
    assert rows[0].text == "The morning train was late again.", "normalised column, whitespace collapsed"
    converted = sf.info(str(rows[1].path))
    assert (converted.samplerate, converted.channels) == (RATE, 1)
    assert abs(rows[1].duration - sf.info(str(clips["en_0001"])).duration) < 0.01
    written = [json.loads(line) for line in summary.rejects_path.read_text().splitlines()]
    assert len(written) == 8 and all(w["source"].endswith("metadata.csv") for w in written)
    on_disk = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert on_disk["kept"] == 2 and on_disk["per_speaker"]["lj"]["clips"] == 2
    assert on_disk["normalizer"]["version"] == NORMALIZER_VERSION


def test_folder_import_pairs_transcripts_and_reports_orphans(clips, tmp_path: Path) -> None:
    src = tmp_path / "folder"
    spk = src / "alice"
    spk.mkdir(parents=True)
    shutil.copy(clips["am_0000"], spk / "a.wav")
    (spk / "a.txt").write_text("ሰላም ነው? እንዴት አደርክ?\n", encoding="utf-8")
    data, _ = sf.read(str(clips["am_0001"]), dtype="float32")
    sf.write(str(spk / "b.ogg"), data, RATE, format="OGG", subtype="VORBIS")
    (spk / "b.lab").write_text("ዛሬ ጠዋት ቡና ጠጣሁ::", encoding="utf-8")
    shutil.copy(clips["am_0002"], spk / "c.wav")
    (spk / "orphan.txt").write_text("no audio", encoding="utf-8")
    shutil.copy(clips["am_0003"], spk / "d.wav")
    (spk / "d.txt").write_text("   \n", encoding="utf-8")
    before = tree_digest(src)
    with pytest.raises(InputError, match="--language"):
        import_dataset("folder", src, tmp_path / "out", RATE)
    summary = import_dataset("folder", src, tmp_path / "out", RATE, ImportOptions(language="am"))
    assert tree_digest(src) == before
    assert summary.kept == 2
    reasons = {Path(r.source).name: r.reason for r in summary.rejects}
    assert reasons == {
        "c.wav": "no same-stem .txt or .lab transcript",
        "orphan.txt": "transcript without a same-stem audio file",
        "d.txt": "empty text",
    }
    rows, _ = read_manifest(summary.manifest)
    assert [r.id for r in rows] == ["alice_a", "alice_b"]
    assert rows[1].text == "ዛሬ ጠዋት ቡና ጠጣሁ።", "Amharic full-stop stand-in normalised"
    assert {r.speaker for r in rows} == {"alice"} and {r.language for r in rows} == {"am"}


def test_srt_import_cuts_padded_clips_and_rejects_bad_blocks(clips, tmp_path: Path) -> None:
    src = tmp_path / "srt"
    src.mkdir()
    gap = np.zeros(RATE // 2, dtype=np.float32)
    parts, times, cursor = [gap], [], 0.5
    for clip_id in ("en_0000", "en_0001", "en_0002"):
        data, _ = sf.read(str(clips[clip_id]), dtype="float32")
        parts += [data, gap]
        times.append((cursor, cursor + len(data) / RATE))
        cursor += len(data) / RATE + 0.5
    recording = np.concatenate(parts)
    sf.write(str(src / "talk.flac"), recording, RATE)
    total = len(recording) / RATE

    def stamp(t: float) -> str:
        ms = int(round(t * 1000))
        return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"

    blocks = [f"{i + 1}\n{stamp(a)} --> {stamp(b)}\nSentence number {i + 1}." for i, (a, b) in enumerate(times)]
    blocks += [
        "4\nnot a timing line\nBroken.",
        f"5\n{stamp(2.0)} --> {stamp(1.0)}\nBackwards.",
        f"6\n{stamp(total + 5)} --> {stamp(total + 7)}\nAfter the end.",
        f"7\n{stamp(1.0)} --> {stamp(1.3)}\nToo short.",
    ]
    (src / "talk.srt").write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    summary = import_dataset("srt", src / "talk.srt", tmp_path / "out", RATE, ImportOptions(language="en", padding=0.1))
    assert summary.kept == 3
    reasons = [r.reason for r in summary.rejects]
    assert any("without a 'HH:MM:SS,mmm" in r for r in reasons)
    assert any("is not after start" in r for r in reasons)
    assert any("after the recording ends" in r for r in reasons)
    assert any(r.startswith("duration 0.50s outside 1-15s") for r in reasons)
    rows, _ = read_manifest(summary.manifest)
    assert [r.id for r in rows] == ["talk_00001", "talk_00002", "talk_00003"]
    for row, (a, b) in zip(rows, times):
        assert abs(row.duration - (b - a + 0.2)) < 0.01
    assert rows[1].text == "Sentence number 2." and rows[0].speaker == "talk"


def test_manifest_import_revalidates_every_row(clips, tmp_path: Path, indextts_bpe: Path) -> None:
    src = tmp_path / "m"
    src.mkdir()
    shutil.copy(clips["en_0000"], src / "one.wav")
    shutil.copy(clips["am_0000"], src / "two.wav")
    lines = [
        json.dumps({"id": "a", "audio": "one.wav", "text": "HELLO WORLD", "speaker": "s", "language": "en"}),
        "{not json",
        json.dumps({"id": "b", "audio": "one.wav", "speaker": "s", "language": "en"}),
        json.dumps({"id": "a", "audio": "one.wav", "text": "AGAIN", "speaker": "s", "language": "en"}),
        json.dumps({"id": "c", "audio": "gone.wav", "text": "GONE", "speaker": "s", "language": "en"}),
        json.dumps({"id": "d", "audio": "two.wav", "text": "ሰላም ነው", "speaker": "s", "language": "am"}),
        json.dumps(["a", "list"]),
        json.dumps({"id": "e", "audio": str(src / "one.wav"), "text": "absolute path", "speaker": "s", "language": "en"}),
    ]
    (src / "manifest.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = tree_digest(src)
    summary = import_dataset(
        "manifest", src / "manifest.jsonl", tmp_path / "out", RATE,
        tokenizer=load_tokenizer(indextts_bpe), uppercase=True,
    )
    assert tree_digest(src) == before
    reasons = reasons_by_line(summary)
    assert "bad JSON" in reasons[2]
    assert "missing field(s): text" in reasons[3]
    assert "duplicate id" in reasons[4]
    assert "not found" in reasons[5]
    assert "cannot encode" in reasons[6] and "ሰ" in reasons[6]
    assert "expected a JSON object" in reasons[7]
    rows, _ = read_manifest(summary.manifest)
    assert [(r.id, r.text) for r in rows] == [("a", "HELLO WORLD"), ("e", "ABSOLUTE PATH")]


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_import_cli_strict_json_and_input_guard(cli, clips, tmp_path: Path) -> None:
    src = tmp_path / "m"
    src.mkdir()
    shutil.copy(clips["en_0000"], src / "one.wav")
    rows = [
        {"id": "a", "audio": "one.wav", "text": "Hello.", "speaker": "s", "language": "en"},
        {"id": "b", "audio": "one.wav", "text": "", "speaker": "s", "language": "en"},
    ]
    (src / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run = cli("dataset", "import", "--format", "manifest", "--input", src / "manifest.jsonl", "--output", tmp_path / "o", "--json")
    assert run.code == 0, run.stderr
    assert (run.json()["kept"], run.json()["rejected"]) == (1, 1)
    strict = run_cli("dataset", "import", "--format", "manifest", "--input", src, "--output", tmp_path / "o2", "--strict")
    assert strict.code == 2 and "line 2: empty text" in strict.stderr and "Traceback" not in strict.stderr
    with pytest.raises(InputError, match="never modified"):
        import_dataset("manifest", src / "manifest.jsonl", src, RATE)
