"""The import's output stays byte-identical: manifest, rejects, summary and every wav, for one fixed input
in each format (Common Voice with every filter and planted faults, LJSpeech, folder, srt, manifest with
a tokenizer and filters, Hugging Face), with one worker and with two.

The input is synthesised here from seeded numpy signals (a harmonic "voice" with syllable envelopes; no
espeak, so its bytes do not depend on a speech engine's version). `tests/golden/import_outputs.json`
holds what the importer of commit 02155d2 (threads, before the import moved to worker processes)
wrote for it: the text files with the input folder written as `<ROOT>`, the sha256 of each wav (summary.json's
reject reasons as issue 35 words them: "duration outside 0.3-30s", not "duration outside -").
Regenerate it only for an intended change of the output:
`.venv/bin/python -m tests.test_import_golden --write`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from core.data.filter_config import FilterConfig
from core.data.importers import ImportOptions
from core.data.importing import import_dataset
from core.tokenizers.tokenizer import load_tokenizer
from tests.fixture_paths import INDEXTTS_BPE

GOLDEN = Path(__file__).resolve().parent / "golden" / "import_outputs.json"
RATE = 16000
CV_RATE = 32000
CV_HEADER = ("client_id", "path", "sentence_id", "sentence", "sentence_domain", "up_votes", "down_votes", "age",
             "gender", "accents", "variant", "locale", "segment")
SENTENCES = [
    "The morning train was late again.", "She planted tomatoes in the garden.", "We walked along the river after dinner.",
    "He forgot his umbrella at the station.", "The children sang a song about the moon.", "A cold wind blew across the hills.",
    "My brother fixed the old radio.", "They opened the window to let in the air.",
]
AMHARIC = "ዛሬ 3 ሰዓት ቡና ጠጣሁ።"


def voice(seconds: float, f0: float, seed: int, rate: int = RATE, lead: float = 0.2, trail: float = 0.2) -> np.ndarray:
    """Return a voiced signal (harmonics of a wavering pitch under a syllable envelope) with quiet padding."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.06 * np.sin(2 * np.pi * 1.3 * t + seed))) / rate
    envelope = np.clip(np.sin(np.pi * (3.0 + seed % 3) * t), 0, None) ** 0.6
    speech = 0.25 * sum(np.sin(k * phase) / k for k in range(1, 9)) * envelope + 0.002 * rng.standard_normal(len(t))
    quiet = [0.0001 * rng.standard_normal(int(s * rate)) for s in (lead, trail)]
    return np.concatenate([quiet[0], speech, quiet[1]]).astype(np.float32)


def _mp3(path: Path, wav: np.ndarray, rate: int = CV_RATE) -> None:
    sf.write(str(path), np.clip(wav, -1, 1).astype(np.float32), rate, format="MP3", subtype="MPEG_LAYER_III")


def _cv_row(client: str, name: str, sentence: str, locale: str = "en", votes: str = "2") -> str:
    return "\t".join((client, name, hashlib.sha1(sentence.encode()).hexdigest(), sentence, "", votes, "0", "twenties",
                      "", "", "", locale, ""))


def make_commonvoice(dest: Path) -> None:
    """Eight clips of three speakers, six planted faults (one per filter), five broken rows."""
    clips = dest / "clips"
    clips.mkdir(parents=True)
    waves = [voice(1.4 + 0.25 * i, 100 + 17 * i, i, CV_RATE) for i in range(8)]
    clients = [hashlib.sha512(f"speaker{i % 3}".encode()).hexdigest() for i in range(8)]
    lines = ["\t".join(CV_HEADER)]
    for i, wave in enumerate(waves):
        _mp3(clips / f"cv_{i:03d}.mp3", wave)
        lines.append(_cv_row(clients[i], f"cv_{i:03d}.mp3", SENTENCES[i], votes=str(2 + i % 3)))
    rng = np.random.default_rng(99)
    power = float(np.mean(waves[0][np.abs(waves[0]) > 1e-3] ** 2))
    planted = {
        "planted_clipped": (0, np.clip(waves[0] * 8, -1, 1), SENTENCES[0]),
        "planted_padded": (1, np.concatenate([np.zeros(2 * CV_RATE, np.float32), waves[1], np.zeros(2 * CV_RATE, np.float32)]), SENTENCES[1]),
        "planted_near_duplicate": (3, waves[3] * 0.7, SENTENCES[3]),
        "planted_noisy": (4, waves[4] + rng.normal(0, np.sqrt(power / 10 ** 0.5), waves[4].shape), SENTENCES[4]),
        "planted_wrong_text": (5, waves[5] * 0.5, " ".join([SENTENCES[5]] * 4)),
    }
    for name, (source, wave, sentence) in planted.items():
        _mp3(clips / f"{name}.mp3", wave)
        lines.append(_cv_row(clients[source], f"{name}.mp3", sentence))
    shutil.copyfile(clips / "cv_002.mp3", clips / "planted_duplicate.mp3")
    lines.append(_cv_row(clients[2], "planted_duplicate.mp3", SENTENCES[2]))
    _mp3(clips / "cv_amharic.mp3", voice(2.0, 150, 11, CV_RATE))
    lines.append(_cv_row(clients[0], "cv_amharic.mp3", AMHARIC, locale="am"))
    _mp3(clips / "cv_digits.mp3", voice(2.0, 160, 12, CV_RATE))
    lines.append(_cv_row(clients[1], "cv_digits.mp3", "I have 3 cats."))
    lines.append(_cv_row(clients[0], "cv_missing.mp3", "A clip that is not there."))
    _mp3(clips / "cv_nosentence.mp3", waves[0])
    lines.append(_cv_row(clients[0], "cv_nosentence.mp3", ""))
    (clips / "cv_empty.mp3").write_bytes(b"")
    lines.append(_cv_row(clients[0], "cv_empty.mp3", "An empty file."))
    lines.append("only\ttwo")
    (dest / "validated.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_ljspeech(dest: Path) -> None:
    """Good wav, stereo 22.05 kHz wav and 44.1 kHz flac clips; garbage, short, silent, missing and broken rows."""
    wavs = dest / "wavs"
    wavs.mkdir(parents=True)
    sf.write(str(wavs / "lj_0.wav"), voice(1.6, 120, 20), RATE, subtype="PCM_16")
    stereo = voice(1.8, 140, 21, 22050)
    sf.write(str(wavs / "lj_1.wav"), np.stack([stereo, 0.5 * stereo], axis=1), 22050, subtype="PCM_16")
    sf.write(str(wavs / "lj_2.flac"), voice(2.1, 180, 22, 44100), 44100)
    (wavs / "garbage.wav").write_bytes(b"RIFF not really a wave file" * 10)
    sf.write(str(wavs / "short.wav"), np.full(1600, 0.1, dtype=np.float32), RATE)
    sf.write(str(wavs / "silent.wav"), np.zeros(RATE, dtype=np.float32), RATE)
    lines = ["lj_0|The morning train, raw.|The  morning train was late again.", "lj_1|She planted tomatoes.",
             "lj_2.flac|A flac clip|A flac clip at a higher rate.", "missing|Hello there.", "only_one_field", "lj_0|A duplicate id.",
             "garbage|Some text.", "__BAD__", "short|Too short.", "silent|Quiet."]
    body = "\n".join(lines).encode("utf-8").replace(b"__BAD__", b"bad\xff\xfe|text")
    (dest / "metadata.csv").write_bytes(body + b"\n")


def make_folder(dest: Path) -> None:
    """Two speakers' clips (wav, ogg, flac) with .txt/.lab transcripts, an orphan transcript, a clip without one."""
    for speaker in ("alice", "bob"):
        (dest / speaker).mkdir(parents=True)
    sf.write(str(dest / "alice" / "a.wav"), voice(1.5, 200, 30), RATE)
    (dest / "alice" / "a.txt").write_text("Good morning to you.\n", encoding="utf-8")
    sf.write(str(dest / "alice" / "b.ogg"), voice(1.7, 210, 31), RATE, format="OGG", subtype="VORBIS")
    (dest / "alice" / "b.lab").write_text("See you tomorrow", encoding="utf-8")
    sf.write(str(dest / "bob" / "c.flac"), voice(1.9, 95, 32, 24000), 24000)
    (dest / "bob" / "c.txt").write_text("  The   end.  ", encoding="utf-8")
    (dest / "bob" / "orphan.txt").write_text("no audio", encoding="utf-8")
    sf.write(str(dest / "bob" / "d.wav"), voice(1.0, 90, 33), RATE)


def make_srt(dest: Path) -> None:
    """A flac recording of three voiced stretches and its subtitles, with a backwards and a late block."""
    dest.mkdir(parents=True)
    gap = np.zeros(RATE // 2, np.float32)
    parts, times, cursor = [gap], [], 0.5
    for i in range(3):
        wave = voice(1.6 + 0.3 * i, 130 + 30 * i, 40 + i)
        parts += [wave, gap]
        times.append((cursor, cursor + len(wave) / RATE))
        cursor += len(wave) / RATE + 0.5
    sf.write(str(dest / "talk.flac"), np.concatenate(parts), RATE)

    def stamp(t: float) -> str:
        ms = int(round(t * 1000))
        return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"

    blocks = [f"{i + 1}\n{stamp(a)} --> {stamp(b)}\n{SENTENCES[i]}" for i, (a, b) in enumerate(times)]
    blocks += [f"4\n{stamp(2.0)} --> {stamp(1.0)}\nBackwards.", f"5\n{stamp(cursor + 5)} --> {stamp(cursor + 7)}\nAfter the end."]
    (dest / "talk.srt").write_text("\n\n".join(blocks) + "\n", encoding="utf-8")


def make_manifest(dest: Path) -> None:
    """A manifest of wav clips re-validated with a tokenizer (Amharic cannot be encoded) and the filters."""
    dest.mkdir(parents=True)
    for i in range(6):
        sf.write(str(dest / f"m{i}.wav"), voice(1.5 + 0.2 * i, 110 + 25 * i, 50 + i), RATE, subtype="PCM_16")
    rows = [{"id": f"m{i}", "audio": f"m{i}.wav", "text": SENTENCES[i], "speaker": f"s{i % 2}", "language": "en"} for i in range(5)]
    rows.append({"id": "m5", "audio": "m5.wav", "text": "ሰላም ነው", "speaker": "s0", "language": "am"})
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    lines += ["{not json", json.dumps({"id": "x", "audio": "m0.wav", "speaker": "s0", "language": "en"}),
              json.dumps({"id": "m0", "audio": "m1.wav", "text": "again", "speaker": "s0", "language": "en"})]
    (dest / "manifest.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_hf(commonvoice: Path, dest: Path) -> None:
    """Save four Common Voice clips as a `datasets` folder (an Audio column of mp3 bytes)."""
    from datasets import Audio, Dataset

    lines = (commonvoice / "validated.tsv").read_text(encoding="utf-8").splitlines()[1:5]
    fields = [dict(zip(CV_HEADER, line.split("\t"))) for line in lines]
    records = {"audio": [{"bytes": (commonvoice / "clips" / f["path"]).read_bytes(), "path": f["path"]} for f in fields],
               "sentence": [f["sentence"] for f in fields], "client_id": [f["client_id"][:12] for f in fields]}
    Dataset.from_dict(records).cast_column("audio", Audio(decode=False)).save_to_disk(str(dest))


def make_inputs(root: Path) -> None:
    """Write every format's input under `root`."""
    make_commonvoice(root / "cv")
    make_ljspeech(root / "lj")
    make_folder(root / "folder")
    make_srt(root / "srt")
    make_manifest(root / "man")
    make_hf(root / "cv", root / "hf")


def run_imports(root: Path, out: Path, workers: int) -> dict[str, Any]:
    """Import every input of `root` into `out`; return each import's files (text with `<ROOT>`, wav sha256)."""
    bpe = load_tokenizer(INDEXTTS_BPE)
    imports = {
        "commonvoice": ("commonvoice", root / "cv", {"filters": FilterConfig()}),
        "ljspeech": ("ljspeech", root / "lj", {"options": ImportOptions(speaker="lj")}),
        "folder": ("folder", root / "folder", {"options": ImportOptions(language="en")}),
        "srt": ("srt", root / "srt" / "talk.srt", {"options": ImportOptions(language="en", padding=0.1)}),
        "manifest": ("manifest", root / "man" / "manifest.jsonl",
                     {"tokenizer": bpe, "uppercase": True, "filters": FilterConfig(off=["speech_rate"], min_snr=10.0)}),
        "hf": ("hf", root / "hf", {"options": ImportOptions(text_column="sentence", speaker_column="client_id", language="en")}),
    }
    outputs = {}
    for name, (fmt, source, kwargs) in imports.items():
        import_dataset(fmt, source, out / name, RATE, workers=workers, **kwargs)
        outputs[name] = files_of(out / name, {str(root): "<ROOT>", str(out / name): "<OUT>"})
    return outputs


def files_of(folder: Path, replace: dict[str, str]) -> dict[str, Any]:
    """Return the text files of an import (paths replaced) and the sha256 of each of its wavs."""
    files: dict[str, Any] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if path.suffix == ".wav":
            files[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            text = path.read_text(encoding="utf-8")
            for old, new in replace.items():
                text = text.replace(old, new)
            files[name] = text
    return files


@pytest.fixture(scope="module")
def inputs(module_tmp: Path) -> Path:
    root = module_tmp / "input"
    make_inputs(root)
    return root


@pytest.mark.parametrize("workers", [1, 2])
def test_import_output_is_byte_identical_to_the_golden_output(inputs: Path, tmp_path: Path, workers: int) -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    outputs = run_imports(inputs, tmp_path / "out", workers)
    assert sorted(outputs) == sorted(golden)
    for name, files in golden.items():
        assert sorted(outputs[name]) == sorted(files), name
        for file, content in files.items():
            assert outputs[name][file] == content, f"{name}/{file} differs from the golden output"
    removed = json.loads(golden["commonvoice"]["summary.json"])["filters"]["removed"]
    assert all(removed[name] >= 1 for name in ("clipping", "snr", "duplicate", "speech_rate", "text")), removed
    assert sum(1 for f in golden["commonvoice"] if f.endswith(".wav")) >= 8


def write_golden() -> None:
    """Write GOLDEN from the importer of this checkout."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "input"
        make_inputs(root)
        outputs = run_imports(root, Path(tmp) / "out", workers=2)
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(outputs, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.test_import_golden --write")
    write_golden()
