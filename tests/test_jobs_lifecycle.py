"""A real SQLite-backed worker subprocess runs real CLI commands as jobs.

The commands are the stages that exist (`doctor` on the real IndexTTS2 tokenizer; `tokenizer
train` when present). One worker serves the tests of this module to keep the suite short.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

from core.config import load_settings
from jobs.runner import JobRunner
from jobs.supervise import is_alive
from test_jobs_support import FIXTURE_BPE, JobsEnv, has_kind, make_jobs_env


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobsEnv]:
    tmp = tmp_path_factory.mktemp("jobs")
    workspace = tmp / "workspace"
    workspace.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
        yield from make_jobs_env(workspace, tmp)


def wait_running(runner: JobRunner, job_id: str, timeout_s: float = 60) -> dict:
    """Return the record once the job is running with a recorded PID."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = runner.get_job(job_id)
        if job["status"] == "running" and job["pid"]:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never started: {runner.get_job(job_id)}")


def test_jobs_run_to_completion_and_queued_cancel_never_starts(env: JobsEnv) -> None:
    runner = env.runner
    skipped = runner.submit("doctor", {"tokenizer": str(FIXTURE_BPE)})
    assert runner.cancel(skipped)["status"] == "cancelled"
    ok = runner.submit("doctor", {"tokenizer": str(FIXTURE_BPE)})
    bad = runner.submit("doctor", {"tokenizer": "tokenizers/missing.model"})
    env.start_worker()

    done = runner.wait(ok, 120)
    assert done["status"] == "succeeded", runner.read_log(ok)
    assert done["exit_code"] == 0
    assert done["artifacts"]["checks"][0]["status"] == "pass"
    assert "12000 ids" in done["artifacts"]["checks"][0]["message"]
    assert done["started_at"] <= done["finished_at"]
    assert "$ python -m core doctor --tokenizer" in runner.read_log(ok)

    failed = runner.wait(bad, 120)
    assert failed["status"] == "failed"
    assert failed["exit_code"] == 2
    assert "missing.model" in failed["error"]

    never = runner.get_job(skipped)
    assert never["status"] == "cancelled" and never["started_at"] is None
    assert not Path(never["log_path"]).exists()


def test_cancel_running_job_stops_its_process_group(env: JobsEnv) -> None:
    runner = env.runner
    job_id = runner.submit("doctor", {"tokenizer": str(FIXTURE_BPE)})
    running = wait_running(runner, job_id)
    assert runner.cancel(job_id)["cancel_requested"]
    job = runner.wait(job_id, 60)
    assert job["status"] == "cancelled"
    assert not is_alive(running["pid"], running["pid_start"])
    assert "cancelled (sigterm)" in runner.read_log(job_id)


def test_gpu_jobs_take_turns_and_cpu_jobs_do_not_wait(env: JobsEnv, tmp_path: Path) -> None:
    override = tmp_path / "gpu.yaml"
    override.write_text("queue: {gpu_kinds: [doctor]}\n")
    gpu_runner = JobRunner(load_settings(override))
    first = gpu_runner.submit("doctor", {"tokenizer": str(FIXTURE_BPE)})
    second = gpu_runner.submit("doctor", {"tokenizer": str(FIXTURE_BPE)})
    cpu = env.runner.submit("doctor", {"tokenizer": str(FIXTURE_BPE)})
    a, b, c = (env.runner.wait(job, 180) for job in (first, second, cpu))
    assert a["gpu"] and b["gpu"] and not c["gpu"]
    assert {a["status"], b["status"], c["status"]} == {"succeeded"}
    gpu_jobs = sorted([a, b], key=lambda j: j["started_at"])
    assert gpu_jobs[1]["started_at"] >= gpu_jobs[0]["finished_at"]
    assert c["started_at"] < gpu_jobs[0]["finished_at"]


def test_kill9_worker_interrupts_then_resume_finishes(env: JobsEnv) -> None:
    runner = env.runner
    job_id = runner.submit("doctor", {"tokenizer": str(FIXTURE_BPE)})
    running = wait_running(runner, job_id)
    env.workers[-1].kill9()
    assert runner.get_job(job_id)["status"] == "running"
    env.start_worker()
    job = runner.get_job(job_id)
    assert job["status"] == "interrupted"
    assert job["interruptions"] == 1
    assert not is_alive(running["pid"], running["pid_start"])
    assert runner.resume(job_id)["status"] == "queued"
    done = runner.wait(job_id, 120)
    assert done["status"] == "succeeded"
    assert done["attempts"] == 2


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
    assert job["artifacts"]["output"].endswith("tokenizers/tiny.model")
    sweep = runner.wait(swept, 180)
    assert sweep["status"] == "succeeded", runner.read_log(swept)
    assert sweep["progress"]["label"] == "tokenizer sweep"
    assert sweep["progress"]["done"] == sweep["progress"]["total"] == 2
    assert sweep["progress"]["fraction"] == 1.0
