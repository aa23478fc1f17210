"""A jobs.sqlite written by an older LinguaForge gains the columns added since."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from jobs.records import JobStore, table_columns


def test_old_jobs_table_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("create table jobs (id text primary key, kind text not null)")
    conn.execute("insert into jobs (id, kind) values ('old', 'tokenizer.train')")
    conn.commit()
    conn.close()

    JobStore(path)

    conn = sqlite3.connect(path)
    present = [row[1] for row in conn.execute("pragma table_info(jobs)")]
    nproc = conn.execute("select nproc, kind from jobs where id = 'old'").fetchone()
    conn.close()
    assert set(table_columns()) <= set(present)
    assert "nproc" in present
    assert nproc == (1, "tokenizer.train")
