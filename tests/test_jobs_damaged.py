"""Damaged job records (issue 17): shown as damaged, skipped by the worker, never a traceback."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from core.cli import main as cli_main
from core.config import load_settings
from core.cli.catalogue import cli_catalogue
from jobs.runner import JobRunner
from jobs.worker import Worker

DAMAGE = {
    "params": "update jobs set params = '{not json' where id = ?",
    "progress": "update jobs set progress = 'oops', status = 'running', worker = 'gone:1' where id = ?",
    "argv": "update jobs set argv = '[\"doctor\"' where id = ?",
    "created_at": "update jobs set created_at = 'yesterday' where id = ?",
}


@pytest.fixture
def damaged(workspace: Path) -> tuple[JobRunner, dict[str, str], str]:
    """A workspace with four damaged jobs (one per field) and one good queued job."""
    (workspace / "tokenizers").mkdir()
    (workspace / "tokenizers" / "t.model").write_bytes(b"x")
    runner = JobRunner(load_settings(), catalogue=cli_catalogue())
    ids = {field: runner.submit("doctor", {"tokenizer": "tokenizers/t.model"}) for field in DAMAGE}
    good = runner.submit("doctor", {"tokenizer": "tokenizers/t.model"})
    with sqlite3.connect(workspace / "jobs.sqlite") as conn:
        for field, sql in DAMAGE.items():
            conn.execute(sql, (ids[field],))
    return runner, ids, good


def test_list_show_logs_resume_name_the_damage(damaged, capsys: pytest.CaptureFixture) -> None:
    runner, ids, good = damaged
    assert cli_main(["jobs", "list", "--json"]) == 0
    listed = {job["id"]: job for job in json.loads(capsys.readouterr().out)["jobs"]}
    assert {i for i, job in listed.items() if job["damaged"]} == set(ids.values())
    assert listed[good]["damaged"] is None
    for field, job_id in ids.items():
        assert field in listed[job_id]["damaged"]
    assert cli_main(["jobs", "list"]) == 0
    assert capsys.readouterr().out.count("damaged") >= 4
    for job_id in ids.values():
        assert cli_main(["jobs", "show", job_id]) == 0
        assert "damaged record" in capsys.readouterr().out
        assert cli_main(["jobs", "logs", job_id]) == 0
        capsys.readouterr()
    assert cli_main(["jobs", "resume", ids["params"]]) == 2
    err = capsys.readouterr().err
    assert "damaged record" in err and "Traceback" not in err


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_worker_starts_skips_damaged_and_runs_the_rest(damaged) -> None:
    runner, ids, good = damaged
    worker = Worker(load_settings(), workers=1)
    report = worker.recover()
    assert set(report["damaged"]) == set(ids.values())
    worker.consumer.start()
    try:
        assert runner.wait(good, 120)["status"] in ("succeeded", "failed")
    finally:
        worker.stop()
    assert runner.get_job(ids["progress"])["status"] == "running"  # recovery leaves a damaged record alone
    for field in ("params", "argv", "created_at"):  # queued damaged jobs end failed with the reason
        job = runner.get_job(ids[field])
        assert job["status"] == "failed" and "damaged job record" in job["error"] and field in job["error"]
