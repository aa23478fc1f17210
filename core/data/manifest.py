"""The manifest format (`manifest.jsonl`) and its structural validation.

One JSON object per line: `id`, `audio` (relative to the manifest's folder, or absolute),
`text`, `speaker`, `language`, `duration` (seconds); any other keys (Common Voice votes, the filters'
measured values) are kept as the row's `meta`. `read_manifest` never stops at the first
bad line: every line it cannot use becomes a `Reject` with its line number and reason.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from core.confine import check_path_text
from core.errors import InputError
from core.fsutil import atomic_write_text
from core.structured import StructureError, loads_json

REQUIRED_FIELDS = ("id", "audio", "text", "speaker", "language")
ROW_FIELDS = (*REQUIRED_FIELDS, "duration")


@dataclass
class ManifestRow:
    """One clip. `path` is the absolute audio path; `line` the manifest line it came from."""

    id: str
    audio: str
    text: str
    speaker: str
    language: str
    duration: float | None = None
    path: Path = field(default=Path(), compare=False)
    line: int = 0
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Return the row as written to manifest.jsonl (without `path` and `line`; `meta` keys after the fields)."""
        return {
            "id": self.id,
            "audio": self.audio,
            "text": self.text,
            "speaker": self.speaker,
            "language": self.language,
            "duration": None if self.duration is None else round(float(self.duration), 4),
            **{k: v for k, v in self.meta.items() if k not in ROW_FIELDS},
        }


@dataclass
class Reject:
    """A row that was not kept: where it came from and why; `audio` names the clip's file when a filter
    removed a readable clip (so it can be listened to)."""

    source: str
    line: int | None
    reason: str
    id: str | None = None
    audio: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the reject as written to rejects.jsonl (`audio` only when set)."""
        data = asdict(self)
        if data["audio"] is None:
            del data["audio"]
        return data

    def message(self) -> str:
        """Return `source line N: reason` for people."""
        where = f"{self.source} line {self.line}" if self.line else self.source
        return f"{where}: {self.reason}"


def resolve_audio(audio: str, base_dir: Path) -> Path:
    """Return the absolute path of a manifest `audio` value relative to `base_dir`.

    Raises InputError when the value cannot name a file (`core.confine.check_path_text`).
    """
    candidate = Path(os.path.expanduser(check_path_text(audio, "audio")))
    return candidate if candidate.is_absolute() else (base_dir / candidate).resolve()


def parse_row(
    obj: Any, line: int, source: Path, defaults: dict[str, str] | None = None
) -> ManifestRow | Reject:
    """Return a ManifestRow from one decoded JSON line, or a Reject saying what is wrong.

    `defaults` fills absent `speaker`/`language` fields. Raises nothing.
    """
    if not isinstance(obj, dict):
        return Reject(str(source), line, f"expected a JSON object, found {type(obj).__name__}")
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return Reject(str(source), line, f"holds text that is not valid UTF-8 (a lone surrogate {exc.object[exc.start]!a})")
    data = dict(defaults or {})
    data.update({k: v for k, v in obj.items() if v is not None})
    clip_id = data.get("id")
    missing = [name for name in REQUIRED_FIELDS if name not in data]
    if missing:
        return Reject(str(source), line, f"missing field(s): {', '.join(missing)}", _str_or_none(clip_id))
    for name in REQUIRED_FIELDS:
        if not isinstance(data[name], str):
            return Reject(str(source), line, f"field {name!r} must be a string", _str_or_none(clip_id))
    if not data["id"].strip():
        return Reject(str(source), line, "empty id")
    if not data["text"].strip():
        return Reject(str(source), line, "empty text", data["id"])
    duration = data.get("duration")
    if duration is not None and (isinstance(duration, bool) or not isinstance(duration, (int, float))
                                 or not math.isfinite(duration)):
        return Reject(str(source), line, "field 'duration' must be a number of seconds", data["id"])
    try:
        path = resolve_audio(data["audio"], source.parent)
    except InputError as exc:
        return Reject(str(source), line, f"field {exc}", data["id"])
    return ManifestRow(
        id=data["id"],
        audio=data["audio"],
        text=data["text"],
        speaker=data["speaker"],
        language=data["language"],
        duration=None if duration is None else float(duration),
        path=path,
        line=line,
        meta={k: v for k, v in obj.items() if k not in ROW_FIELDS},
    )


def read_manifest(
    path: str | os.PathLike[str], defaults: dict[str, str] | None = None, check_audio: bool = True
) -> tuple[list[ManifestRow], list[Reject]]:
    """Return (rows, rejects) of a manifest.jsonl.

    Rejected lines: bad JSON or UTF-8, not an object, missing or mistyped fields, empty text,
    duplicate id, and (with `check_audio`) a missing audio file. Blank lines are skipped.
    Raises InputError when the manifest itself is missing.
    """
    source = Path(path).resolve()
    if not source.is_file():
        raise InputError(f"{source}: manifest not found. Pass the path to a manifest.jsonl.")
    rows: list[ManifestRow] = []
    rejects: list[Reject] = []
    seen: dict[str, int] = {}
    with open(source, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                rejects.append(Reject(str(source), number, f"not UTF-8 ({exc.reason})"))
                continue
            if not text:
                continue
            try:
                obj = loads_json(text, "the row")
            except json.JSONDecodeError as exc:
                rejects.append(Reject(str(source), number, f"bad JSON ({exc.msg} at column {exc.colno})"))
                continue
            except StructureError as exc:
                rejects.append(Reject(str(source), number, str(exc)))
                continue
            parsed = parse_row(obj, number, source, defaults)
            if isinstance(parsed, Reject):
                rejects.append(parsed)
                continue
            if parsed.id in seen:
                rejects.append(Reject(str(source), number, f"duplicate id (first at line {seen[parsed.id]})", parsed.id))
                continue
            if check_audio and not parsed.path.is_file():
                rejects.append(Reject(str(source), number, f"audio file not found: {parsed.path}", parsed.id))
                continue
            seen[parsed.id] = number
            rows.append(parsed)
    return rows, rejects


def load_manifest_rows(path: str | os.PathLike[str]) -> list[ManifestRow]:
    """Return the usable rows of a manifest, for stages that consume a validated manifest.

    Raises InputError when the manifest is missing or has no usable row.
    """
    rows, rejects = read_manifest(path)
    if not rows:
        detail = f" First problem: {rejects[0].message()}" if rejects else ""
        raise InputError(f"{path}: no usable rows.{detail}")
    return rows


def manifest_text(rows: Iterable[ManifestRow]) -> str:
    """Return the JSONL text of `rows`."""
    return "".join(json.dumps(row.to_dict(), ensure_ascii=False) + "\n" for row in rows)


def write_manifest(path: str | os.PathLike[str], rows: Iterable[ManifestRow]) -> Path:
    """Write `rows` to `path` as manifest.jsonl atomically and return the Path."""
    return atomic_write_text(path, manifest_text(rows))


def write_rejects(path: str | os.PathLike[str], rejects: Iterable[Reject]) -> Path:
    """Write `rejects` to `path` as rejects.jsonl atomically and return the Path."""
    body = "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in rejects)
    return atomic_write_text(path, body)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
