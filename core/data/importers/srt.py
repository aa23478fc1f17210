"""SRT layout: a long recording plus its `.srt`; one clip per subtitle, padded on both sides."""

from __future__ import annotations

import re
from pathlib import Path

from core.audio import AUDIO_EXTENSIONS, audio_duration
from core.errors import InputError
from core.data.importers import Candidate, ImportOptions, find_sibling, read_text_lines
from core.data.manifest import Reject

_TIMING = re.compile(
    r"^\s*(\d+):(\d{1,2}):(\d{1,2})[,.](\d{1,3})\s*-->\s*(\d+):(\d{1,2}):(\d{1,2})[,.](\d{1,3})"
)


def _seconds(h: str, m: str, s: str, ms: str) -> float:
    return int(h) * 3600 + int(m) * 60 + int(s) + int(ms.ljust(3, "0")) / 1000.0


def _blocks(srt: Path) -> tuple[list[tuple[int, list[tuple[int, str]]]], list[Reject]]:
    blocks: list[tuple[int, list[tuple[int, str]]]] = []
    rejects: list[Reject] = []
    current: list[tuple[int, str]] = []
    for number, line, error in read_text_lines(srt):
        if error:
            rejects.append(Reject(str(srt), number, error))
            continue
        if line.strip():
            current.append((number, line.strip()))
        elif current:
            blocks.append((current[0][0], current))
            current = []
    if current:
        blocks.append((current[0][0], current))
    return blocks, rejects


def parse_srt(srt: Path, recording: Path, options: ImportOptions) -> tuple[list[Candidate], list[Reject]]:
    """Return one candidate per subtitle block of `srt` cut from `recording`, and rejects.

    Each clip spans the subtitle's times widened by `options.padding` on both sides, clamped to
    the recording. Raises InputError when the recording is unreadable.
    """
    total = audio_duration(recording)
    blocks, rejects = _blocks(srt)
    candidates: list[Candidate] = []
    for start_line, lines in blocks:
        timing_at = 1 if len(lines) > 1 and lines[0][1].isdigit() else 0
        match = _TIMING.match(lines[timing_at][1]) if timing_at < len(lines) else None
        if match is None:
            rejects.append(Reject(str(srt), start_line, "subtitle block without a 'HH:MM:SS,mmm --> HH:MM:SS,mmm' line"))
            continue
        begin, end = _seconds(*match.groups()[:4]), _seconds(*match.groups()[4:])
        index = lines[0][1] if timing_at else str(len(candidates) + len(rejects) + 1)
        clip_id = f"{srt.stem}_{int(index):05d}" if index.isdigit() else f"{srt.stem}_{start_line:05d}"
        if end <= begin:
            rejects.append(Reject(str(srt), lines[timing_at][0], f"end time {end:.3f}s is not after start {begin:.3f}s", clip_id))
            continue
        if begin >= total:
            rejects.append(Reject(str(srt), lines[timing_at][0], f"starts at {begin:.3f}s, after the recording ends ({total:.3f}s)", clip_id))
            continue
        text = " ".join(text for _, text in lines[timing_at + 1 :])
        candidates.append(
            Candidate(
                source=str(srt),
                line=lines[timing_at][0],
                id=clip_id,
                audio=recording,
                text=text,
                speaker=options.speaker or srt.stem,
                language=options.language or "",
                start=max(0.0, begin - options.padding),
                end=min(total, end + options.padding),
            )
        )
    return candidates, rejects


def collect(source: Path, options: ImportOptions) -> tuple[list[Candidate], list[Reject]]:
    """Return candidates from an `.srt` file (recording beside it) or a folder of such pairs.

    An unreadable recording rejects its subtitle file (the reason in the rejects). Raises InputError when
    no .srt file is found.
    """
    srts = [source] if source.is_file() else sorted(source.glob("*.srt")) if source.is_dir() else []
    if not srts:
        raise InputError(f"{source}: no .srt file found. Pass an .srt file or a folder of recordings with .srt files.")
    candidates: list[Candidate] = []
    rejects: list[Reject] = []
    for srt in srts:
        recording = find_sibling(srt, AUDIO_EXTENSIONS)
        if recording is None:
            rejects.append(Reject(str(srt), None, "no recording with the same stem (.wav, .flac, .ogg or .mp3)"))
            continue
        try:
            found, bad = parse_srt(srt, recording, options)
        except InputError as exc:  # one damaged recording rejects its subtitles; the other pairs import
            rejects.append(Reject(str(srt), None, f"recording {exc}"))
            continue
        candidates.extend(found)
        rejects.extend(bad)
    return candidates, rejects
