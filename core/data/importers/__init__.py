"""Readers that turn one dataset layout into import candidates.

Each format module exposes `collect(source: Path, options: ImportOptions) -> (candidates,
rejects)`. Candidates are checked and converted by `core.data.importing`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from core.data.manifest import Reject

FORMAT_NAMES = ("ljspeech", "folder", "srt", "manifest", "commonvoice", "hf")


@dataclass
class ImportOptions:
    """Options of the format readers; each reader uses those that apply to it.

    `tsv`: the Common Voice table read (validated.tsv, train.tsv, …). `audio_column`, `text_column`,
    `speaker_column`: the Hugging Face columns (no speaker column: `speaker`, else one speaker "hf").
    `tables`: see below.
    """

    language: str | None = None
    speaker: str | None = None
    padding: float = 0.1
    tsv: str = "validated.tsv"
    audio_column: str = "audio"
    text_column: str = "text"
    speaker_column: str | None = None
    #: hf: the arrow files of a Hub dataset in the user's `datasets` cache (`hf.hub_dataset`), read instead of
    #: scanning the input folder (their cache folder)
    tables: tuple[Path, ...] = ()


@dataclass
class Candidate:
    """A clip proposed by a format reader; `start`/`end` (seconds) cut a long recording.

    `data`, when set, returns the encoded audio bytes and the name to cite (a row of a parquet/arrow table; `audio` then
    names the table file); `meta` is kept in the manifest row (Common Voice votes, age, …).
    """

    source: str
    line: int | None
    id: str
    audio: Path
    text: str
    speaker: str
    language: str
    start: float | None = None
    end: float | None = None
    data: Callable[[], tuple[bytes, str]] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


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


def table_lines(path: Path, rejects: list[Reject]) -> Iterator[tuple[int, str]]:
    """Yield (line number, text) for each non-blank line of `path`; a line that is not UTF-8 is
    appended to `rejects` instead."""
    for number, line, error in read_text_lines(path):
        if error:
            rejects.append(Reject(str(path), number, error))
        elif line.strip():
            yield number, line
