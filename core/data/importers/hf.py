"""Hugging Face datasets: a `datasets.save_to_disk` folder, parquet/arrow files, or a Hub dataset by its id
(`hf:owner/name[:config][@split]`, loaded with `datasets` from the user's cache: `hub_dataset`), with an
audio column.

The audio column holds the `datasets.Audio` struct (`bytes` and/or `path`) or a file path (relative to
the input folder); the text and the optional speaker column are named by options. A row's id is its
audio file's stem (else `row<N>`); its line in the rejects is its row number, counted from 1 per table.
Other scalar columns are kept as manifest metadata. Parquet and arrow files (a Hub dataset's among them) are read
one record batch at a time, first for the rows' text and audio columns (the audio itself left unread), then again
for each clip's audio as the import converts them in order: the audio held at once does not grow with the split
(a `save_to_disk` folder's tables stay as `datasets` maps them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

from core.confine import inside_folder
from core.errors import InputError
from core.data.importers import Candidate, ImportOptions
from core.data.manifest import Reject
from core.structured import read_json_file

DEFAULT_SPEAKER = "hf"
SAVED_MARKERS = ("state.json", "dataset_dict.json")
HUB_PREFIX = "hf:"
TABLE_EXTENSIONS = (".parquet", ".arrow")
PARQUET_BATCH_ROWS = 100  # rows of a parquet table held at a time (`datasets` writes audio in batches of 100)


def _open_batches(path: Path) -> tuple[list[str], Iterator[Any]]:
    """Return (column names, record batches) of a parquet or arrow (IPC stream or file) table, read from the file as
    they are taken, neither mapped nor read whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        table = pq.ParquetFile(path)
        return table.schema_arrow.names, table.iter_batches(batch_size=PARQUET_BATCH_ROWS)
    source = pa.OSFile(str(path))
    try:
        stream = pa.ipc.open_stream(source)
        return stream.schema.names, iter(stream)
    except pa.ArrowInvalid:
        reader = pa.ipc.open_file(source)
        return reader.schema.names, (reader.get_batch(i) for i in range(reader.num_record_batches))


class _FileBatches:
    """A parquet or arrow file's record batches, one held at a time: the rows of a split larger than memory flow
    through. `batch(i)` reads on from the one held, from the start only when asked for an earlier one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.column_names = self._guarded(lambda: _open_batches(path)[0])
        self._rest: Iterator[Any] | None = None
        self._index, self._held = -1, None

    def _guarded(self, read: Callable[[], Any]) -> Any:
        import pyarrow as pa

        try:
            return read()
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"{self.path}: not a readable {self.path.suffix[1:]} table ({exc}).") from exc

    def batches(self) -> Iterator[Any]:
        """Yield the file's record batches from the start."""
        batches = self._guarded(lambda: _open_batches(self.path)[1])
        while (batch := self._guarded(lambda: next(batches, None))) is not None:
            yield batch

    def batch(self, index: int) -> Any:
        """Return record batch `index`."""
        if self._rest is None or index < self._index:
            self._rest, self._index = self.batches(), -1
        while self._index < index:
            self._held, self._index = next(self._rest), self._index + 1
        return self._held


class _TableBatches:
    """A table `datasets` loaded (memory-mapped), by record batch."""

    def __init__(self, table: Any) -> None:
        self.column_names = table.column_names
        self._batches = table.to_batches()

    def batches(self) -> Iterator[Any]:
        """Yield the table's record batches."""
        return iter(self._batches)

    def batch(self, index: int) -> Any:
        """Return record batch `index`."""
        return self._batches[index]


def _json_object(path: Path) -> dict[str, Any]:
    """Return the JSON object in `path`; raises InputError when it is missing, not JSON or not an object."""
    if not path.is_file():
        raise InputError(f"{path}: missing. A datasets.save_to_disk folder holds state.json and dataset_info.json "
                         "beside its arrow files; save it again with save_to_disk.")
    data = read_json_file(path)  # not JSON, not UTF-8, nested too deep: one line naming the file
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object, found {type(data).__name__}. "
                         "Save the dataset again with save_to_disk.")
    return data


def _check_saved_folder(folder: Path) -> None:
    """Check what one save_to_disk folder's metadata names before anything of it is read: `state.json`'s
    arrow files must be files inside the folder (`core.confine.inside_folder`), `dataset_info.json` an object.

    Raises InputError naming the file, the entry and the fix.
    """
    state_path = folder / "state.json"
    files = _json_object(state_path).get("_data_files")
    if not isinstance(files, list) or not files or not all(isinstance(entry, dict) for entry in files):
        raise InputError(f"{state_path}: no `_data_files` list naming the arrow files. "
                         "Save the dataset again with save_to_disk.")
    for index, entry in enumerate(files):
        table = inside_folder(folder, entry.get("filename"), f"{state_path}: _data_files[{index}].filename")
        if not table.is_file():
            raise InputError(f"{state_path}: _data_files[{index}].filename names {table}, which does not exist. "
                             "Copy the folder whole, or save the dataset again with save_to_disk.")
    _json_object(folder / "dataset_info.json")


def _saved_folders(source: Path) -> list[tuple[str | None, Path]]:
    """Return (split or None, folder) of each save_to_disk folder of `source`, each one's metadata checked."""
    listing = source / "dataset_dict.json"
    if not listing.is_file():
        _check_saved_folder(source)
        return [(None, source)]
    splits = _json_object(listing).get("splits")
    if not isinstance(splits, list) or not splits:
        raise InputError(f"{listing}: no `splits` list. Save the DatasetDict again with save_to_disk.")
    folders = [(split, inside_folder(source, split, f"{listing}: split")) for split in splits]
    for _split, folder in folders:
        _check_saved_folder(folder)
    return folders


def _saved_tables(source: Path) -> list[tuple[Path, _TableBatches]]:
    from datasets import Dataset

    def table_of(dataset: Any) -> Any:
        flat = dataset.flatten_indices(keep_in_memory=True) if dataset._indices is not None else dataset
        return flat.data.table

    tables = []
    for split, folder in _saved_folders(source):
        try:
            loaded = Dataset.load_from_disk(str(folder))
        except (ValueError, TypeError, KeyError, AttributeError, OSError) as exc:
            raise InputError(f"{folder}: not a readable datasets.save_to_disk folder ({type(exc).__name__}: {exc}). "
                             "Save the dataset again with save_to_disk, or pass its parquet/arrow files.") from None
        tables.append((source / split if split is not None else source, _TableBatches(table_of(loaded))))
    return tables


def hub_dataset(spec: str) -> tuple[Path, tuple[Path, ...]]:
    """Return (the cache folder, its arrow files) of the Hub dataset `hf:owner/name[:config][@split]` (every split
    without `@split`), loaded with `datasets.load_dataset` — from the user's cache only under HF_HUB_OFFLINE=1.

    Raises InputError in one line for a malformed id, an id not in the cache when offline (naming what to
    fetch), an unknown config or split, or a dataset the Hub does not have.
    """
    import datasets
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    body, _, split = spec.removeprefix(HUB_PREFIX).partition("@")
    repo, _, config = body.partition(":")
    try:
        validate_repo_id(repo)
    except HFValidationError as exc:
        raise InputError(f"--input {spec}: not a Hub dataset id ({exc}); write hf:owner/name[:config][@split].") from None
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity_error()  # its "using the cached version" notes would break the one-line error
    try:
        loaded = datasets.load_dataset(repo, config or None, split=split or None)
    except ConnectionError as exc:
        raise InputError(f"--input {spec}: {repo} is not in the datasets cache and the Hub cannot be reached "
                         f"({exc}); load it once with the network (python -c \"import datasets; "
                         f"datasets.load_dataset('{repo}'{f', {config!r}' if config else ''})\").") from None
    except (ValueError, FileNotFoundError, datasets.exceptions.DatasetNotFoundError) as exc:
        raise InputError(f"--input {spec}: {str(exc).splitlines()[0]}") from None
    finally:
        datasets.logging.set_verbosity(verbosity)
    parts = list(loaded.values()) if isinstance(loaded, datasets.DatasetDict) else [loaded]
    files = tuple(Path(f["filename"]) for part in parts for f in part.cache_files)
    if not files:
        raise InputError(f"--input {spec}: the dataset is not backed by cached arrow files; save it with save_to_disk "
                         "and import that folder.")
    return files[0].parent, files


def _tables(source: Path, options: ImportOptions) -> list[tuple[Path, _FileBatches | _TableBatches]]:
    if options.tables:
        return [(path, _FileBatches(path)) for path in options.tables]
    if source.is_dir() and any((source / marker).is_file() for marker in SAVED_MARKERS):
        return _saved_tables(source)
    files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.suffix in TABLE_EXTENSIONS)
    files = [p for p in files if p.suffix in TABLE_EXTENSIONS]
    if not files:
        raise InputError(f"{source}: neither a datasets.save_to_disk folder nor parquet/arrow files. "
                         "Pass the folder written by save_to_disk, or a .parquet/.arrow file or a folder of them.")
    return [(path, _FileBatches(path)) for path in files]


def _check_columns(where: Path, names: list[str], options: ImportOptions) -> None:
    wanted = {"--audio-column": options.audio_column, "--text-column": options.text_column,
              "--speaker-column": options.speaker_column}
    for option, column in wanted.items():
        if column is not None and column not in names:
            raise InputError(f"{where}: no column {column!r} ({option}); the columns are {', '.join(names)}.")


def _audio_problem(value: Any) -> str | None:
    """Return what is wrong with one audio cell (the `datasets.Audio` struct or a path), or None."""
    if isinstance(value, dict):
        if value.get("bytes") is not None and not isinstance(value["bytes"], bytes):
            return f"its `bytes` is {type(value['bytes']).__name__}, not encoded audio bytes"
        if value.get("path") is not None and not isinstance(value["path"], str):
            return f"its `path` is {type(value['path']).__name__}, not a file name"
        return None
    if value is not None and not isinstance(value, str):
        return f"it holds {type(value).__name__}, neither the datasets.Audio struct nor a file path"
    return None


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


def _audio_cells(column: Any) -> list[Any]:
    """Return a batch's audio cells as Python values without reading the audio: the `datasets.Audio` struct's
    `bytes` stands as one byte when it holds some (b"" empty, None null); other columns as they are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    index = kind.get_field_index("bytes") if pa.types.is_struct(kind) else -1
    if index < 0 or not (pa.types.is_binary(kind.field(index).type) or pa.types.is_large_binary(kind.field(index).type)):
        return column.to_pylist()
    fields = column.flatten()  # the children, null where the struct is
    values = {kind.field(i).name: fields[i].to_pylist() for i in range(kind.num_fields) if i != index}
    values["bytes"] = [None if n is None else b"\0" if n else b"" for n in pc.binary_length(fields[index]).to_pylist()]
    nulls = column.is_null().to_pylist()
    return [None if null else {name: cells[row] for name, cells in values.items()} for row, null in enumerate(nulls)]


def _loader(rows: _FileBatches | _TableBatches, batch: int, offset: int, column: str, name: str) -> Any:
    return lambda: (rows.batch(batch).column(column)[offset].as_py()["bytes"], name)


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
    for where, rows in _tables(source, options):
        _check_columns(where, rows.column_names, options)
        scalar = [c for c in rows.column_names if c != options.audio_column]
        number = 0
        for batch_index, batch in enumerate(rows.batches()):
            cells = _audio_cells(batch.column(options.audio_column))
            for offset, (record, value) in enumerate(zip(batch.select(scalar).to_pylist(), cells)):
                number += 1
                problem = _audio_problem(value)
                if problem is not None:
                    rejects.append(Reject(str(where), number, f"column {options.audio_column!r}: {problem}"))
                    continue
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
                        data=_loader(rows, batch_index, offset, options.audio_column, cited) if stored else None,
                        meta=_meta(record, skip),
                    )
                )
    return candidates, rejects
