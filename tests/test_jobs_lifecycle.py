"""A real SQLite-backed worker subprocess runs real CLI commands as jobs.

The commands are the stages that exist (`doctor` on the real IndexTTS2 tokenizer; `tokenizer
train` when present). One worker serves the tests of this module to keep the suite short.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Iterator

import pytest

from core.config import load_settings
from core.cli.catalogue import cli_catalogue
from jobs.runner import JobRunner
from jobs.supervise import error_summary, is_alive
from tests.test_jobs_support import JOB_BPE, JobsEnv, has_kind, held_fifo, make_jobs_env, wait_running


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobsEnv]:
    tmp = tmp_path_factory.mktemp("jobs")
    workspace = tmp / "workspace"
    workspace.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
        yield from make_jobs_env(workspace, tmp)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_jobs_finish_gpu_jobs_take_turns_and_queued_cancel_never_starts(env: JobsEnv, tmp_path: Path) -> None:
    runner = env.runner
    override = tmp_path / "gpu.yaml"
    override.write_text("queue: {gpu_kinds: [doctor]}\n")
    gpu_runner = JobRunner(load_settings(override), catalogue=cli_catalogue())
    skipped = runner.submit("doctor", {"tokenizer": JOB_BPE})
    assert runner.cancel(skipped)["status"] == "cancelled"
    holder = gpu_runner.submit("doctor", {"tokenizer": JOB_BPE, "target_config": held_fifo(env, "held.yaml")})
    env.start_worker()
    wait_running(runner, holder)  # it holds the one GPU slot until it is cancelled
    waiting = gpu_runner.submit("doctor", {"tokenizer": JOB_BPE})
    bad = runner.submit("doctor", {"tokenizer": "tokenizers/missing.model"})

    failed = runner.wait(bad, 120)  # a CPU job does not wait behind a GPU job
    assert failed["status"] == "failed" and not failed["gpu"]
    assert failed["exit_code"] == 2
    assert "missing.model" in failed["error"]
    beside = gpu_runner.submit("doctor", {"tokenizer": JOB_BPE, "device": "cpu"})  # a GPU kind told to use the CPU
    ran = runner.wait(beside, 120)  # takes no device slot: it runs while the GPU job holds the slot
    assert (ran["status"], ran["gpu"]) == ("succeeded", 0), runner.read_log(beside)
    assert runner.get_job(holder)["status"] == "running"
    queued = runner.get_job(waiting)
    assert queued["status"] == "queued" and queued["started_at"] is None, "two GPU jobs shared one slot"

    runner.cancel(holder)
    held = runner.wait(holder, 60)
    done = runner.wait(waiting, 180)
    assert held["status"] == "cancelled" and held["gpu"]
    assert done["status"] == "succeeded", runner.read_log(waiting)
    assert done["exit_code"] == 0 and done["gpu"]
    assert done["artifacts"]["checks"][0]["status"] == "pass"
    assert "12000 ids" in done["artifacts"]["checks"][0]["message"]
    assert "$ python -m core doctor --tokenizer" in runner.read_log(waiting)
    assert done["started_at"] >= held["finished_at"], "two GPU jobs overlapped on one slot"

    never = runner.get_job(skipped)
    assert never["status"] == "cancelled" and never["started_at"] is None
    assert not Path(never["log_path"]).exists()


def test_cancel_running_job_stops_its_process_group(env: JobsEnv) -> None:
    """A job that cannot finish on its own (`held_fifo`) runs until the cancel: SIGTERM ends its
    whole process group, and the record says so."""
    runner = env.runner
    if not env.workers:  # run alone (-k), this test starts the module's worker itself
        env.start_worker()
    job_id = runner.submit("doctor", {"tokenizer": JOB_BPE, "target_config": held_fifo(env, "blocked.yaml")})
    running = wait_running(runner, job_id)  # a lasting state: nothing writes the FIFO, so the job waits
    assert os.getpgid(running["pid"]) == running["pid"]  # the job leads its own process group
    assert runner.cancel(job_id)["cancel_requested"]
    job = runner.wait(job_id, 60)
    assert job["status"] == "cancelled" and job["error"] == "cancelled by request"
    assert job["exit_code"] == -signal.SIGTERM  # ended by the signal, not by finishing
    assert job["artifacts"] == {}
    assert not is_alive(running["pid"], running["pid_start"])
    with pytest.raises(ProcessLookupError):
        os.killpg(running["pid"], 0)  # no process of the group is left
    assert "cancelled (sigterm)" in runner.read_log(job_id)


@pytest.mark.skipif(not has_kind("tokenizer.sweep"), reason="the tokenizer commands land from issue 2")
def test_tokenizer_jobs_record_progress_and_artifacts(env: JobsEnv) -> None:
    corpus = env.workspace / "text" / "corpus.txt"
    corpus.parent.mkdir(parents=True, exist_ok=True)
    words = ["selam", "ameseginalehu", "bet", "wuha", "dabo", "gize", "hager", "tena", "lij", "nigus"]
    corpus.write_text("\n".join(" ".join(words[(i + j) % 10] for j in range(8)) for i in range(400)))
    runner = env.runner
    trained = runner.submit(
        "tokenizer.train", {"corpus": ["text/corpus.txt"], "vocab_size": 40, "output": "tokenizers/tiny.model"}
    )
    swept = runner.submit("tokenizer.sweep", {"corpus": ["text/corpus.txt"], "sizes": [30, 40]})
    job = runner.wait(trained, 180)
    assert job["status"] == "succeeded", runner.read_log(trained)
    assert (env.workspace / "tokenizers" / "tiny.model").is_file()
    assert job["artifacts"]["path"].endswith("tokenizers/tiny.model")
    assert job["artifacts"]["size"] == 40
    sweep = runner.wait(swept, 180)
    assert sweep["status"] == "succeeded", runner.read_log(swept)
    assert sweep["progress"]["label"] == "tokenizer sweep"
    assert sweep["progress"]["done"] == sweep["progress"]["total"] == 2
    assert sweep["progress"]["fraction"] == 1.0


def test_a_failed_attempt_is_described_by_its_own_output(tmp_path: Path) -> None:
    """The doctor's table (the `--json` failure's detail) is the error; a later attempt that dies without a
    word is not described by the earlier attempt's table or error line."""
    log = tmp_path / "job.log"
    table = "doctor found problems:\ncheck  status  message\n-----  ------  -------\ntokenizer  FAIL  missing.json\n"
    log.write_text("$ python -m core train --config c.yaml --json\nerror: preflight doctor refused to start: x\n"
                   + json.dumps({"ok": False, "error": "preflight doctor refused to start: x", "detail": table}) + "\n")
    assert error_summary(log) == table
    second = log.stat().st_size
    with open(log, "a") as handle:
        handle.write("$ python -m core train --config c.yaml --json\nstep 3\n")
    assert error_summary(log, second) == "$ python -m core train --config c.yaml --json\nstep 3"
    assert error_summary(log, log.stat().st_size) == "the command failed without output"
    with open(log, "a") as handle:
        handle.write("error: c.yaml: line 2: bad value\n" + json.dumps({"ok": False, "error": "c.yaml: line 2: bad value"}) + "\n")
    assert error_summary(log, second) == "c.yaml: line 2: bad value"
