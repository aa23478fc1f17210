"""Readers that turn one dataset layout into import candidates.

Each format module exposes `collect(source: Path, options: ImportOptions) -> (candidates,
rejects)`. Candidates are checked and converted by `core.data.importing`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FORMAT_NAMES = ("ljspeech", "folder", "srt", "manifest")


@dataclass
class ImportOptions:
    """Options shared by every format."""

    language: str | None = None
    speaker: str | None = None
    padding: float = 0.1


@dataclass
class Candidate:
    """A clip proposed by a format reader; `start`/`end` (seconds) cut a long recording."""

    source: str
    line: int | None
    id: str
    audio: Path
    text: str
    speaker: str
    language: str
    start: float | None = None
    end: float | None = None


def find_sibling(path: Path, extensions: tuple[str, ...]) -> Path | None:
    """Return the first existing file with `path`'s stem and one of `extensions`, or None."""
    for ext in extensions:
        candidate = path.with_suffix(ext)
        if candidate.is_file():
            return candidate
    return None


def read_text_lines(path: Path) -> list[tuple[int, str | None, str | None]]:
    """Return (line number, text or None, decode error or None) for each line of `path`."""
    lines = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                lines.append((number, raw.decode("utf-8").rstrip("\r\n").lstrip("\ufeff"), None))
            except UnicodeDecodeError as exc:
                lines.append((number, None, f"not UTF-8 ({exc.reason})"))
    return lines
