"""Text corpora: reading corpus files safely and collecting a corpus from a dataset manifest.

`read_corpus_lines` is what every tokenizer command reads its `--corpus` files with: it reports a
missing file, a non-UTF-8 line (with its line number), an empty corpus and a degenerate corpus
(one character repeated) as InputErrors. `collect_corpus` writes the normalised `text` fields of a
manifest to a corpus file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from core.errors import InputError
from core.fsutil import atomic_write
from core.text import normalize_text
from core.structured import loads_json

LANGUAGE_FIELDS = ("language", "lang")


def read_corpus_file(path: str | os.PathLike[str]) -> list[str]:
    """Return the non-blank lines of one UTF-8 text file, stripped of line endings.

    Raises InputError when the file is missing, is a directory, or holds a line that is not
    UTF-8 (the message names the line number and the byte offset).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: corpus file not found. Pass an existing UTF-8 text file.")
    lines: list[str] = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{path} line {number}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}). "
                    "Convert the file to UTF-8 (for example `iconv -f LATIN1 -t UTF-8`) or remove the line."
                ) from exc
            text = text.lstrip("\ufeff") if number == 1 else text
            text = text.rstrip("\r\n")
            if text.strip():
                lines.append(text)
    return lines


def read_corpus_lines(paths: Sequence[str | os.PathLike[str]], check_variety: bool = True) -> list[str]:
    """Return the non-blank lines of every file in `paths`, in order.

    Raises InputError for a missing or non-UTF-8 file, when the files hold no text at all, and
    (with `check_variety`) when the whole corpus is a single character repeated.
    """
    if not paths:
        raise InputError("no corpus files given. Pass --corpus FILE [FILE …].")
    lines: list[str] = []
    for path in paths:
        lines.extend(read_corpus_file(path))
    names = ", ".join(str(p) for p in paths)
    if not lines:
        raise InputError(f"{names}: the corpus is empty (no non-blank lines). Pass a file with text in it.")
    if check_variety:
        distinct = corpus_characters(lines) - {" "}
        if len(distinct) < 2:
            only = next(iter(distinct)) if distinct else " "
            raise InputError(
                f"{names}: the corpus is the single character {only!r} repeated; a tokenizer cannot learn "
                "from it. Pass real sentences in the language."
            )
    return lines


def corpus_characters(lines: Iterable[str]) -> set[str]:
    """Return the set of distinct characters in `lines` (whitespace other than space excluded)."""
    chars: set[str] = set()
    for line in lines:
        chars.update(line)
    return {c for c in chars if c == " " or not c.isspace()}


@dataclass
class CollectSummary:
    """What `collect_corpus` did: lines written, manifest rows skipped and why."""

    output: Path
    lines_written: int
    rows_read: int
    skipped_language: int
    skipped_empty: int
    characters: int

    def as_dict(self) -> dict[str, object]:
        """Return the summary as a JSON-ready mapping."""
        return {**asdict(self), "output": str(self.output)}


def _manifest_rows(manifest: Path) -> Iterable[tuple[int, dict]]:
    if not manifest.is_file():
        raise InputError(f"{manifest}: manifest not found. Pass the manifest.jsonl of an imported data set.")
    for number, line in enumerate(read_manifest_text(manifest).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = loads_json(line, f"{manifest} line {number}")
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{manifest} line {number}: not valid JSON ({exc.msg}). Each line must be one JSON object."
            ) from exc
        if not isinstance(row, dict):
            raise InputError(f"{manifest} line {number}: expected a JSON object, found {type(row).__name__}.")
        yield number, row


def read_manifest_text(manifest: Path) -> str:
    """Return the manifest's text; raises InputError naming the line when it is not UTF-8."""
    data = manifest.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{manifest} line {line}: not UTF-8. Re-save the manifest as UTF-8.") from exc


def collect_corpus(
    manifest: str | os.PathLike[str], output: str | os.PathLike[str], language: str | None = None
) -> CollectSummary:
    """Write the normalised `text` field of each manifest row (of `language`, when given) to `output`.

    Rows whose `language`/`lang` field differs from `language` are skipped; rows without a
    language field are kept. Returns a CollectSummary. Raises InputError for a missing or
    malformed manifest, a row without a string `text` field, or when no line would be written.
    """
    manifest = Path(manifest)
    output = Path(output)
    lines: list[str] = []
    rows = skipped_language = skipped_empty = 0
    for number, row in _manifest_rows(manifest):
        rows += 1
        text = row.get("text")
        if not isinstance(text, str):
            raise InputError(
                f"{manifest} line {number}: no string \"text\" field (found {text!r}). Every row needs the transcript."
            )
        row_language = next((row[f] for f in LANGUAGE_FIELDS if isinstance(row.get(f), str)), None)
        if language and row_language and row_language.lower() != language.lower():
            skipped_language += 1
            continue
        normalised = normalize_text(text, language=language or row_language)
        if not normalised:
            skipped_empty += 1
            continue
        lines.append(normalised)
    if not lines:
        wanted = f" with language {language!r}" if language else ""
        raise InputError(f"{manifest}: no rows{wanted} with non-empty text ({rows} rows read). Check --language.")
    with atomic_write(output) as tmp:
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return CollectSummary(output, len(lines), rows, skipped_language, skipped_empty, sum(map(len, lines)))
