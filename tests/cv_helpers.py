"""Test helpers: a Common Voice-shaped release and a Hugging Face datasets folder built from espeak clips.

The release has mp3 clips at 32 kHz in `clips/`, a `validated.tsv` with the real column set, several
client_ids and votes, and three broken rows (a missing clip, an empty sentence, a 0-byte mp3).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from core.audio import read_audio
from core.data.manifest import read_manifest
from tests.data_helpers import make_espeak_dataset

CV_RATE = 32000
HEADER = ("client_id", "path", "sentence_id", "sentence", "sentence_domain", "up_votes", "down_votes", "age",
          "gender", "accents", "variant", "locale", "segment")


@dataclass
class Release:
    """A built release: its folder, the ids expected to be kept, and the TSV line of each broken row."""

    folder: Path
    kept_ids: list[str]
    broken_lines: dict[int, str]
    speakers: dict[str, str]  # espeak speaker → client_id


def client_id(speaker: str) -> str:
    """Return a Common Voice-style client_id (hex digest) for `speaker`."""
    return hashlib.sha512(speaker.encode()).hexdigest()


def write_mp3(path: Path, wav: np.ndarray, rate: int = CV_RATE) -> None:
    """Write the float waveform `wav` (at `rate`) as an mp3 file."""
    sf.write(str(path), wav.astype(np.float32), rate, format="MP3", subtype="MPEG_LAYER_III")


def _row(speaker: str, name: str, sentence: str, votes: tuple[int, int], locale: str) -> str:
    return "\t".join((client_id(speaker), name, hashlib.sha1(sentence.encode()).hexdigest(), sentence, "", str(votes[0]),
                      str(votes[1]), "thirties", "male_masculine", "", "", locale, ""))


def make_release(dest: Path, per_language: int = 4, languages: tuple[str, ...] = ("am",)) -> Release:
    """Build a Common Voice-shaped release from espeak clips in `dest` and return what it holds.

    Rows: every espeak clip as mp3, then a missing clip, an empty sentence and a 0-byte mp3.
    """
    manifest = make_espeak_dataset(dest.parent / f"{dest.name}-espeak", per_language=per_language, languages=languages)
    rows, _ = read_manifest(manifest)
    clips = dest / "clips"
    clips.mkdir(parents=True)
    lines = ["\t".join(HEADER)]
    kept, speakers = [], {}
    for i, row in enumerate(rows):
        name = f"common_voice_{row.language}_{1000 + i}.mp3"
        write_mp3(clips / name, read_audio(row.path, CV_RATE)[0].numpy())
        lines.append(_row(row.speaker, name, row.text, (2 + i % 3, i % 2), row.language))
        kept.append(Path(name).stem)
        speakers[row.speaker] = client_id(row.speaker)
    speaker = rows[0].speaker
    broken = {}
    lines.append(_row(speaker, "common_voice_missing.mp3", "A clip that is not there.", (2, 0), rows[0].language))
    broken[len(lines)] = "not found"
    write_mp3(clips / "common_voice_nosentence.mp3", read_audio(rows[0].path, CV_RATE)[0].numpy())
    lines.append(_row(speaker, "common_voice_nosentence.mp3", "", (2, 0), rows[0].language))
    broken[len(lines)] = "empty text"
    (clips / "common_voice_empty.mp3").write_bytes(b"")
    lines.append(_row(speaker, "common_voice_empty.mp3", "An empty file.", (2, 0), rows[0].language))
    broken[len(lines)] = "empty audio file (0 bytes)"
    (dest / "validated.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (dest / "train.tsv").write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    return Release(dest, kept, broken, speakers)


def make_hf_folder(release: Release, dest: Path) -> Path:
    """Save the release's good rows as a `datasets` folder (Audio column of mp3 bytes) at `dest`; return it."""
    from datasets import Audio, Dataset

    records = {"audio": [], "sentence": [], "client_id": [], "up_votes": []}
    for line in (release.folder / "validated.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        fields = dict(zip(HEADER, line.split("\t")))
        stem = Path(fields["path"]).stem
        if stem not in release.kept_ids:
            continue
        data = (release.folder / "clips" / fields["path"]).read_bytes()
        records["audio"].append({"bytes": data, "path": fields["path"]})
        records["sentence"].append(fields["sentence"])
        records["client_id"].append(fields["client_id"])
        records["up_votes"].append(int(fields["up_votes"]))
    Dataset.from_dict(records).cast_column("audio", Audio(decode=False)).save_to_disk(str(dest))
    return dest


def plant_faults(release: Release, rng_seed: int = 0) -> dict[str, str]:
    """Add six faulty clips to the release's validated.tsv (copies of kept clips); return {clip id: filter}.

    clipped: clip 0 amplified 8× and clipped; padded: clip 1 with 2 s of silence on each side;
    duplicate: clip 2's mp3 bytes under a new name; near-duplicate: clip 3 at 0.7 gain, re-encoded;
    noisy: clip 0 with white noise at 5 dB SNR; wrong_text: clip 1 at half gain with its sentence read four times.
    """
    rng = np.random.default_rng(rng_seed)
    clips = release.folder / "clips"
    table = release.folder / "validated.tsv"
    lines = table.read_text(encoding="utf-8").splitlines()
    rows = {dict(zip(HEADER, line.split("\t")))["path"]: dict(zip(HEADER, line.split("\t"))) for line in lines[1:]}
    source = [rows[f"{stem}.mp3"] for stem in release.kept_ids[:4]]
    waves = [read_audio(clips / r["path"], CV_RATE)[0].numpy() for r in source]
    silence = np.zeros(2 * CV_RATE, np.float32)
    power = float(np.mean(waves[0][np.abs(waves[0]) > 1e-3] ** 2))
    planted = {
        "planted_clipped": ("clipping", source[0], np.clip(waves[0] * 8, -1, 1)),
        "planted_padded": ("silence", source[1], np.concatenate([silence, waves[1], silence])),
        "planted_duplicate": ("duplicate", source[2], None),
        "planted_near_duplicate": ("duplicate", source[3], waves[3] * 0.7),
        "planted_noisy": ("snr", source[0], waves[0] + rng.normal(0, np.sqrt(power / 10 ** 0.5), waves[0].shape)),
        "planted_wrong_text": ("speech_rate", source[1], waves[1] * 0.5),
    }
    expected = {}
    for stem, (caught_by, row, wave) in planted.items():
        if wave is None:
            (clips / f"{stem}.mp3").write_bytes((clips / row["path"]).read_bytes())
        else:
            write_mp3(clips / f"{stem}.mp3", np.clip(wave, -1, 1))
        speaker = next(s for s, c in release.speakers.items() if c == row["client_id"])
        sentence = " ".join([row["sentence"]] * 4) if caught_by == "speech_rate" else row["sentence"]
        lines.append(_row(speaker, f"{stem}.mp3", sentence, (2, 0), row["locale"]).replace(
            client_id(speaker), row["client_id"]))
        expected[stem] = caught_by
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return expected
