"""LJSpeech layout: `metadata.csv` lines `file|text` or `file|raw|normalized`, audio in `wavs/`."""

from __future__ import annotations

from pathlib import Path

from core.errors import InputError
from core.data.importers import Candidate, ImportOptions, table_lines
from core.data.manifest import Reject

DEFAULT_SPEAKER = "ljspeech"


def _find_audio(wavs: Path, name: str) -> Path:
    direct = wavs / name
    if direct.suffix:
        return direct
    for ext in (".wav", ".flac", ".ogg", ".mp3"):
        if (wavs / f"{name}{ext}").is_file():
            return wavs / f"{name}{ext}"
    return wavs / f"{name}.wav"


def collect(source: Path, options: ImportOptions) -> tuple[list[Candidate], list[Reject]]:
    """Return candidates and rejects from an LJSpeech folder (or its metadata.csv).

    Raises InputError when metadata.csv is missing.
    """
    metadata = source if source.is_file() else source / "metadata.csv"
    if not metadata.is_file():
        raise InputError(f"{metadata}: not found. An LJSpeech folder holds metadata.csv and wavs/.")
    wavs = metadata.parent / "wavs"
    candidates: list[Candidate] = []
    rejects: list[Reject] = []
    for number, line in table_lines(metadata, rejects):
        fields = line.split("|")
        if len(fields) not in (2, 3):
            rejects.append(Reject(str(metadata), number, f"expected 2 or 3 '|'-separated fields, found {len(fields)}"))
            continue
        name = fields[0].strip()
        text = fields[-1].strip() or fields[1].strip()
        if not name:
            rejects.append(Reject(str(metadata), number, "empty file name"))
            continue
        candidates.append(
            Candidate(
                source=str(metadata),
                line=number,
                id=Path(name).stem if Path(name).suffix else name,
                audio=_find_audio(wavs, name),
                text=text,
                speaker=options.speaker or DEFAULT_SPEAKER,
                language=options.language or "en",
            )
        )
    return candidates, rejects
