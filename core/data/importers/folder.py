"""Folder layout: audio files with a same-stem `.txt` or `.lab` transcript, searched recursively."""

from __future__ import annotations

from pathlib import Path

from core.audio import AUDIO_EXTENSIONS
from core.errors import InputError
from core.data.importers import Candidate, ImportOptions, find_sibling
from core.data.manifest import Reject

TRANSCRIPT_EXTENSIONS = (".txt", ".lab")


def collect(source: Path, options: ImportOptions) -> tuple[list[Candidate], list[Reject]]:
    """Return candidates and rejects from a folder of clips with transcripts.

    The speaker is `--speaker`, else the clip's parent folder name. Raises InputError when
    `source` is not a folder.
    """
    if not source.is_dir():
        raise InputError(f"{source}: not a folder. Pass the folder holding the clips and transcripts.")
    candidates: list[Candidate] = []
    rejects: list[Reject] = []
    files = sorted(p for p in source.rglob("*") if p.is_file())
    audio_stems = {p.with_suffix("") for p in files if p.suffix.lower() in AUDIO_EXTENSIONS}
    for path in files:
        suffix = path.suffix.lower()
        if suffix in TRANSCRIPT_EXTENSIONS and path.with_suffix("") not in audio_stems:
            rejects.append(Reject(str(path), None, "transcript without a same-stem audio file"))
            continue
        if suffix not in AUDIO_EXTENSIONS:
            continue
        transcript = find_sibling(path, TRANSCRIPT_EXTENSIONS)
        relative = path.relative_to(source).with_suffix("")
        clip_id = "_".join(relative.parts)
        if transcript is None:
            rejects.append(Reject(str(path), None, "no same-stem .txt or .lab transcript", clip_id))
            continue
        try:
            text = transcript.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            rejects.append(Reject(str(transcript), None, f"transcript not UTF-8 ({exc.reason})", clip_id))
            continue
        except OSError as exc:  # one unreadable transcript rejects its clip; the others import
            rejects.append(Reject(str(transcript), None, f"transcript unreadable ({exc.strerror or exc})", clip_id))
            continue
        speaker = options.speaker or (path.parent.name if path.parent != source else "speaker")
        candidates.append(
            Candidate(
                source=str(transcript),
                line=1,
                id=clip_id,
                audio=path,
                text=text,
                speaker=speaker,
                language=options.language or "",
            )
        )
    return candidates, rejects
