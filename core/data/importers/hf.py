"""Hugging Face datasets: a `datasets.save_to_disk` folder, or parquet/arrow files, with an audio column.

The audio column holds the `datasets.Audio` struct (`bytes` and/or `path`) or a file path (relative to
the input folder); the text and the optional speaker column are named by options. A row's id is its
audio file's stem (else `row<N>`); its line in the rejects is its row number, counted from 1 per table.
Other scalar columns are kept as manifest metadata.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import InputError
from core.data.importers import Candidate, ImportOptions
from core.data.manifest import Reject

DEFAULT_SPEAKER = "hf"
SAVED_MARKERS = ("state.json", "dataset_dict.json")
TABLE_EXTENSIONS = (".parquet", ".arrow")


def _read_table(path: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if path.suffix == ".parquet":
            return pq.read_table(path)
        with pa.memory_map(str(path)) as source:
            try:
                return pa.ipc.open_stream(source).read_all()
            except pa.ArrowInvalid:
                return pa.ipc.open_file(source).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: not a readable {path.suffix[1:]} table ({exc}).") from exc


def _saved_tables(source: Path) -> list[tuple[Path, Any]]:
    from datasets import DatasetDict, load_from_disk

    def table_of(dataset: Any) -> Any:
        flat = dataset.flatten_indices(keep_in_memory=True) if dataset._indices is not None else dataset
        return flat.data.table

    loaded = load_from_disk(str(source))
    if isinstance(loaded, DatasetDict):
        return [(source / split, table_of(loaded[split])) for split in loaded]
    return [(source, table_of(loaded))]


def _tables(source: Path) -> list[tuple[Path, Any]]:
    if source.is_dir() and any((source / marker).is_file() for marker in SAVED_MARKERS):
        return _saved_tables(source)
    files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.suffix in TABLE_EXTENSIONS)
    files = [p for p in files if p.suffix in TABLE_EXTENSIONS]
    if not files:
        raise InputError(f"{source}: neither a datasets.save_to_disk folder nor parquet/arrow files. "
                         "Pass the folder written by save_to_disk, or a .parquet/.arrow file or a folder of them.")
    return [(path, _read_table(path)) for path in files]


def _check_columns(where: Path, names: list[str], options: ImportOptions) -> None:
    wanted = {"--audio-column": options.audio_column, "--text-column": options.text_column,
              "--speaker-column": options.speaker_column}
    for option, column in wanted.items():
        if column is not None and column not in names:
            raise InputError(f"{where}: no column {column!r} ({option}); the columns are {', '.join(names)}.")


def _audio_of(value: Any, base: Path, table_file: Path) -> tuple[Path, str | None, bool]:
    """Return (audio path or table file, the audio's own file name, whether bytes are stored)."""
    if isinstance(value, dict):
        name = value.get("path")
        if value.get("bytes"):
            return table_file, name, True
        if name:
            return base / name, name, False
        return table_file, None, False
    if isinstance(value, str) and value:
        return base / value, value, False
    return table_file, None, False


def _loader(table: Any, column: str, row: int, name: str) -> Any:
    return lambda: (table.column(column)[row].as_py()["bytes"], name)


def _meta(record: dict[str, Any], skip: set[str]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in skip and isinstance(v, (str, int, float, bool, type(None)))}


def collect(source: Path, options: ImportOptions) -> tuple[list[Candidate], list[Reject]]:
    """Return candidates and rejects from a save_to_disk folder or parquet/arrow files.

    Raises InputError when no table is found, a table is unreadable or a named column is missing.
    """
    base = source if source.is_dir() else source.parent
    candidates: list[Candidate] = []
    rejects: list[Reject] = []
    skip = {options.audio_column, options.text_column, options.speaker_column}
    for where, table in _tables(source):
        _check_columns(where, table.column_names, options)
        scalar = [c for c in table.column_names if c != options.audio_column]
        records = table.select(scalar).to_pylist()
        audio_values = table.column(options.audio_column)
        for index, record in enumerate(records):
            number = index + 1
            value = audio_values[index].as_py()
            if isinstance(value, dict):
                value = {"path": value.get("path"), "bytes": bool(value.get("bytes"))}
            audio, name, stored = _audio_of(value, base, where)
            if not stored and name is None:
                rejects.append(Reject(str(where), number, f"column {options.audio_column!r} holds no audio bytes or path"))
                continue
            clip_id = Path(name).stem if name else f"row{number:06d}"
            text = record.get(options.text_column)
            speaker = record.get(options.speaker_column) if options.speaker_column else None
            cited = f"{where} row {number}" + (f": {name}" if name else "")
            candidates.append(
                Candidate(
                    source=str(where),
                    line=number,
                    id=clip_id,
                    audio=audio,
                    text=text if isinstance(text, str) else "",
                    speaker=str(speaker).strip() if speaker not in (None, "") else (options.speaker or DEFAULT_SPEAKER),
                    language=options.language or str(record.get("locale") or record.get("language") or ""),
                    data=_loader(table, options.audio_column, index, cited) if stored else None,
                    meta=_meta(record, skip),
                )
            )
    return candidates, rejects
