"""The line a Stop, Cancel or Resume click leaves follows its job's record in a real SQLite job store, run by a
real worker process: it says the job is stopping while it still runs, and cancelled once it stopped (issue 49:
'Stop requested … (now running)' stayed on the page after the job had stopped)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import gradio as gr
import pytest

from core.cli.catalogue import cli_catalogue
from gradio_app.common import follow_request, job_line, request_message
from gradio_app.runner import JobRunner
from tests.test_jobs_support import JOB_BPE, JobsEnv, held_fifo, make_jobs_env, wait_running


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobsEnv]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
    yield from make_jobs_env(workspace, tmp_path)


def test_a_stop_line_says_stopping_while_the_job_runs_and_cancelled_once_it_stopped(env: JobsEnv) -> None:
    ui = JobRunner(env.settings, cli_catalogue())  # the dashboard's door to the jobs
    never = ui.submit("doctor", {"tokenizer": JOB_BPE})  # no worker yet: it stays queued
    line, followed = request_message("Stop", ui.cancel(never))
    assert line == f"Stop requested. Doctor check job `{never}`: **cancelled** — cancelled by request"
    assert followed is None  # it has ended: its line changes no more

    job_id = ui.submit("doctor", {"tokenizer": JOB_BPE, "target_config": held_fifo(env, "held.yaml")})
    env.start_worker()
    wait_running(env.runner, job_id)  # it reads a FIFO no one writes: running until stopped
    line, followed = request_message("Stop", ui.cancel(job_id))
    assert line == f"Stop requested. Doctor check job `{job_id}`: **running** — stopping"
    assert followed == {"asked": "Stop", "job": job_id, "line": line}

    assert env.runner.wait(job_id, 60)["status"] == "cancelled"
    assert follow_request(ui, followed, line) == (
        f"Stop requested. Doctor check job `{job_id}`: **cancelled** — cancelled by request", None)
    # a message that shows something else (an error since, or nothing yet when the tick was sent) is left alone
    for other in ("**Error:** no training job to resume; Start one first.", None):
        assert follow_request(ui, followed, other) == (gr.update(), followed)
    assert follow_request(ui, None, "") == (gr.update(), None)

    line, followed = request_message("Resume", ui.resume(job_id))
    # the attempt it was stopped in is over: its error ("cancelled by request") is not this one's
    assert line == f"Resume requested. Doctor check job `{job_id}`: **queued**" and followed
    wait_running(env.runner, job_id)  # the same FIFO holds it again
    shown, followed = follow_request(ui, followed, line)
    assert shown == f"Resume requested. Doctor check job `{job_id}`: **running**" and followed["line"] == shown
    ui.cancel(job_id)
    env.runner.wait(job_id, 60)


def test_a_training_job_asked_to_stop_says_it_saves_a_checkpoint_first() -> None:
    job = {"id": "t1", "kind": "train", "status": "running", "cancel_requested": True, "progress": {}}
    stopping = "Training job `t1`: **running** — stopping: it saves a checkpoint, then exits"
    assert job_line(job, with_progress=False) == stopping
    assert job_line({**job, "status": "cancelled"}, with_progress=False) == "Training job `t1`: **cancelled**"
