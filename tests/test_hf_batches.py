"""The hf reader takes parquet and arrow tables (a Hub dataset's cached split among them) one record batch at a
time: `collect` reads the rows without their audio, and each clip's bytes come from the batch that holds it when
the import asks for them — in order, and again from the start when asked for an earlier one."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from core.data.importers import ImportOptions
from core.data.importers.hf import PARQUET_BATCH_ROWS, collect

AUDIO = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
SCHEMA = pa.schema([("audio", AUDIO), ("text", pa.string())])


def _rows(start: int, count: int) -> pa.RecordBatch:
    """Rows `start`…: clip<i>.wav holding the bytes b"audio <i>"; row 3's audio is null."""
    audio = [None if i == 3 else {"bytes": f"audio {i}".encode(), "path": f"clip{i}.wav"} for i in range(start, start + count)]
    return pa.record_batch([pa.array(audio, AUDIO), pa.array([f"text {i}" for i in range(start, start + count)])], schema=SCHEMA)


def test_each_clip_of_an_arrow_stream_reads_its_own_bytes_from_its_batch(tmp_path: Path) -> None:
    path = tmp_path / "train.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, SCHEMA) as writer:
        for start in (0, 2, 4):
            writer.write_batch(_rows(start, 2))
    candidates, rejects = collect(tmp_path, ImportOptions(tables=(path,)))
    assert [(r.line, r.reason) for r in rejects] == [(4, "column 'audio' holds no audio bytes or path")]
    assert [(c.id, c.line, c.text) for c in candidates] == [(f"clip{i}", i + 1, f"text {i}") for i in (0, 1, 2, 4, 5)]
    assert all(c.audio == path for c in candidates)
    assert [c.data() for c in candidates] == [(f"audio {i}".encode(), f"{path} row {i + 1}: clip{i}.wav") for i in (0, 1, 2, 4, 5)]
    assert candidates[1].data()[0] == b"audio 1"  # an earlier batch: read again from the file's start


def test_a_parquet_table_longer_than_a_batch_gives_each_row_its_bytes(tmp_path: Path) -> None:
    rows = PARQUET_BATCH_ROWS * 2 + 50
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_batches([_rows(0, rows)]), path)
    candidates, rejects = collect(path, ImportOptions())
    assert len(candidates) == rows - 1 and [r.line for r in rejects] == [4]
    picked = [candidates[i] for i in (0, PARQUET_BATCH_ROWS, rows - 2)]  # rows 0, 101 and the last (row 3 rejected)
    assert [c.data()[0] for c in picked] == [b"audio 0", f"audio {PARQUET_BATCH_ROWS + 1}".encode(), f"audio {rows - 1}".encode()]
