"""A damaged `jobs.sqlite` (issue 23): `jobs list` and app.py stop with exit 2 and one line naming the
file and the recovery, never a traceback; doing what the line says brings the workspace back.

The files are really damaged: a real jobs database with its first bytes overwritten (not SQLite any
more), or with the root page of the jobs table overwritten (a malformed page).
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from core.cli.catalogue import cli_catalogue
from core.config import load_settings
from jobs.runner import JobRunner
from tests.conftest import REPO_ROOT
from tests.test_jobs_support import free_port

JOBS = 60  # enough rows that the jobs table spans several pages


def _fill(workspace: Path) -> Path:
    """Submit JOBS doctor jobs (no worker runs them) and return the jobs database, its WAL folded in."""
    (workspace / "tokenizers").mkdir()
    (workspace / "tokenizers" / "t.model").write_bytes(b"x")
    runner = JobRunner(load_settings(), catalogue=cli_catalogue())
    for _ in range(JOBS):
        runner.submit("doctor", {"tokenizer": "tokenizers/t.model"})
    path = workspace / "jobs.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("pragma wal_checkpoint(truncate)")
    return path


def bad_header(path: Path) -> None:
    """Overwrite the 16-byte `SQLite format 3` magic: the file is no database any more."""
    with open(path, "r+b") as handle:
        handle.write(b"not a database!!")


def malformed_page(path: Path) -> None:
    """Overwrite the root page of the jobs table with 0xFF bytes, keeping the header and schema page."""
    with sqlite3.connect(path) as conn:
        page_size = conn.execute("pragma page_size").fetchone()[0]
        root = conn.execute("select rootpage from sqlite_master where name = 'jobs'").fetchone()[0]
    assert root > 1
    with open(path, "r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\xff" * page_size)


def _one_line(stderr: str, path: Path) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    error = [line for line in lines if line.startswith("error:")]
    assert len(error) == 1, stderr
    line = error[0]
    assert str(path) in line and "damaged" in line and "job history is lost" in line and "checkpoints" in line, line
    return line


@pytest.mark.parametrize("damage", [bad_header, malformed_page])
def test_jobs_list_names_the_file_and_the_recovery(workspace: Path, cli, damage) -> None:  # noqa: ANN001
    path = _fill(workspace)
    run_file = workspace / "runs" / "keep" / "status.json"
    run_file.parent.mkdir(parents=True)
    run_file.write_text('{"state": "finished"}')
    damage(path)
    result = cli("jobs", "list")
    assert result.code == 2, result.stderr
    line = _one_line(result.stderr, path)
    # do what the line says: move the files aside, then the workspace works again with an empty history
    recovery = re.search(r"`(mkdir [^`]+)`", line).group(1)
    subprocess.run(["bash", "-c", recovery], check=True)
    assert not path.exists() and (workspace / "jobs-damaged" / "jobs.sqlite").is_file()
    again = cli("jobs", "list", "--json")
    assert again.code == 0 and again.json()["jobs"] == [], again.stderr
    assert run_file.read_text() == '{"state": "finished"}'


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
@pytest.mark.parametrize("damage", [bad_header, malformed_page])
def test_app_start_names_the_file_and_the_recovery(workspace: Path, damage) -> None:  # noqa: ANN001
    path = _fill(workspace)
    damage(path)
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "app.py"), "--port", str(free_port()), "--workspace",
                           str(workspace)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    _one_line(proc.stderr, path)
