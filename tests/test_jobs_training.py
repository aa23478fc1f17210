"""Training as a supervised job: a tiny real LM run to completion, cancel while running, kill -9 + resume.

Only the trainer's run-folder contract (`core/runs.py`) is used: runs/<run>/status.json, metrics.jsonl, checkpoints/, STOP.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from core.checkpoint import load_checkpoint
from jobs.supervise import is_alive
from tests.test_jobs_support import JobsEnv, has_kind, lm_jobs_env, wait_running

pytestmark = pytest.mark.skipif(not has_kind("train"), reason="the trainer (`python -m core train`) is not present")

SCHEDULE = {"val_every": 1000, "keep_last": 2, "log_every": 1}


@pytest.fixture(scope="module")
def env(module_tmp: Path) -> Iterator[JobsEnv]:
    yield from lm_jobs_env(module_tmp)


def submit_run(env: JobsEnv, name: str, max_steps: int, save_every: int) -> str:
    """Write a tiny LM run config and submit it as a `train` job; return the job id."""
    from tests.trainer_helpers import lm_config

    config = lm_config(env.workspace, name, schedule={**SCHEDULE, "max_steps": max_steps, "save_every": save_every})
    return env.runner.submit("train", {"config": str(config.relative_to(env.workspace))})


def run_status(env: JobsEnv, name: str) -> dict[str, Any]:
    """Return runs/<name>/status.json ({} before the trainer wrote it)."""
    path = env.workspace / "runs" / name / "status.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow  # 33 s at load 12 (issue 50: the quick loop keeps tests under ~5 s)
def test_tiny_training_job_finishes_with_progress(env: JobsEnv) -> None:
    job_id = submit_run(env, "tiny", max_steps=6, save_every=3)
    job = env.runner.wait(job_id, 240)
    assert job["status"] == "succeeded", env.runner.read_log(job_id)
    assert job["params"]["resume"] == "auto" and job["resume"] == "auto"
    assert job["argv"][-3:] == ["--resume", "auto", "--json"]
    assert job["progress"]["done"] == 6 and job["progress"]["total"] == 6
    assert job["progress"]["fraction"] == 1.0
    assert "loss" in job["progress"]["metrics"]
    assert job["artifacts"]["state"] == "finished"
    log = env.runner.read_log(job_id)
    assert "doctor: all checks passed" in log  # the trainer's own doctor, the one gate after submission
    assert "python -m core doctor" not in log and log.count("$ python -m core") == 1


@pytest.mark.parametrize("name, override, check, found, fix", [
    ("broken", {"tokenizer": "tokenizers/missing.json"}, "tokenizer", "missing.json: tokenizer file not found",
     "Pass --tokenizer PATH"),
    ("overfrozen", {"freeze": {"mode": "base-rows", "until": 100000}}, "freeze.range", "freeze_until 100000 is outside",
     "Set freeze_until to the base tokenizer's size"),
])
@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_failing_doctor_fails_the_job_with_its_table_before_training(
    env: JobsEnv, name: str, override: dict[str, Any], check: str, found: str, fix: str,
) -> None:
    """The trainer's doctor is the gate: the job fails with the doctor's table and fixes as its error."""
    from tests.trainer_helpers import lm_config

    config = lm_config(env.workspace, name, **override)
    job_id = env.runner.submit("train", {"config": f"runs_cfg/{name}.yaml"})
    job = env.runner.wait(job_id, 120)
    assert job["status"] == "failed" and job["exit_code"] == 2, env.runner.read_log(job_id)
    lines = job["error"].splitlines()
    assert lines[0] == "doctor found problems:" and lines[1].split() == ["check", "status", "message"]
    rows = [line.split()[:2] for line in lines[3:lines.index("")]]  # one line per check
    assert [row for row in rows if row[1] == "FAIL"] == [[check, "FAIL"]]
    assert found in next(line for line in lines[3:] if line.startswith(f"{check} "))
    assert lines[lines.index("fixes:") + 1].startswith(f"  {check}: {fix}")
    assert lines[-1] == "doctor: 1 check(s) failed"
    assert config.is_file()
    status = run_status(env, name)
    assert status["state"] == "failed" and f"preflight doctor refused to start: {check}:" in status["error"]
    assert not (env.workspace / "runs" / name / "checkpoints").exists()


@pytest.mark.slow  # 25 s at load 12
def test_cancel_running_training_saves_a_loadable_checkpoint(env: JobsEnv) -> None:
    job_id = submit_run(env, "long", max_steps=100000, save_every=1000)
    wait_for(lambda: run_status(env, "long").get("step", 0) >= 2, 240, "training steps")
    env.runner.cancel(job_id)
    job = env.runner.wait(job_id, 120)
    assert job["status"] == "cancelled"
    assert "cancelled (stop-file)" in env.runner.read_log(job_id)
    status = run_status(env, "long")
    assert status["state"] == "stopped"
    checkpoint = load_checkpoint(status["last_checkpoint"])
    assert checkpoint.meta["step"] == status["step"] >= 2


@pytest.mark.slow  # 58 s at load 12
def test_kill9_worker_mid_training_resumes_to_the_requested_step(env: JobsEnv) -> None:
    """The worker dies (kill -9) while its training job runs; the next worker stops the orphan and the
    job resumes to step 16. The job's process group is held (SIGSTOP) from its start-up until the worker
    is dead, so the job cannot finish first however fast the machine; where the orphan then stops (on
    the STOP file, or at its last step) does not change what the resumed run must show."""
    job_id = submit_run(env, "crash", max_steps=16, save_every=2)
    running = wait_running(env.runner, job_id)
    os.killpg(running["pid"], signal.SIGSTOP)
    try:
        assert run_status(env, "crash").get("state") != "finished"
        env.workers[-1].kill9()
        assert is_alive(running["pid"], running["pid_start"])  # orphaned, not finished
    finally:
        os.killpg(running["pid"], signal.SIGCONT)
    env.start_worker()
    job = env.runner.wait(job_id, 300)
    assert job["status"] == "succeeded", env.runner.read_log(job_id)
    assert job["interruptions"] == 1 and job["attempts"] == 2
    status = run_status(env, "crash")
    assert status["state"] == "finished" and status["step"] == 16
    assert status["resumed_from"], status
    log = env.runner.read_log(job_id)
    assert log.count("--resume auto") == 2
    recovery = [line for line in env.workers[-1].output().splitlines() if "recovery: " in line]
    report = ast.literal_eval(recovery[-1].split("recovery: ", 1)[1])
    assert report["interrupted"] == [job_id] and report["requeued"] == [job_id], report  # re-queued once
    metrics = [json.loads(line) for line in (env.workspace / "runs" / "crash" / "metrics.jsonl").read_text().splitlines()]
    steps = [m["step"] for m in metrics if m["split"] == "train"]
    assert steps == sorted(set(steps)), steps  # one process at a time: the orphan stopped before the resume began
    final = load_checkpoint(job["artifacts"]["last_checkpoint"])
    assert job["artifacts"]["last_checkpoint"] == status["last_checkpoint"]
    assert final.extra["step"] == job["artifacts"]["step"] == 16
    assert job["artifacts"]["best_val_loss"] == final.extra["best_val_loss"]


@pytest.mark.slow
def test_light_job_passes_a_running_journey_and_a_waiting_training(env: JobsEnv) -> None:
    """The quickstart's complaint: a tokenizer job waited 14 minutes behind the journey and its training. With a
    training holding the device slot, a second one waiting for it and an LM quickstart running (its stage jobs wait
    for the same slot), a tokenizer job still runs at once in the light lane and ends before the journey does; the
    waiting training's record (and `jobs show`) says what it waits for and its place."""
    from tests.data_helpers import run_cli
    from tests.test_quickstart import REDUCED_LM

    long_id = submit_run(env, "long", max_steps=100000, save_every=100000)
    started: list[str] = [long_id]
    try:
        wait_running(env.runner, long_id)  # it holds the device slot; only then the second one (else it may win the slot)
        next_id = submit_run(env, "next", max_steps=6, save_every=3)
        started.append(next_id)
        wait_for(lambda: env.runner.get_job(next_id)["waits_for"] != "waiting for a worker to pick it up", 60,
                 "the worker to see the second training")
        assert env.runner.get_job(next_id)["waits_for"] == "waiting for the device slot held by training 'long', none ahead"
        shown = run_cli("jobs", "show", next_id)
        assert "waiting for the device slot held by training 'long', none ahead" in shown.stdout, shown.stdout
        preset = env.workspace / "presets" / "lm-small.yaml"
        preset.parent.mkdir(parents=True, exist_ok=True)
        preset.write_text(json.dumps(REDUCED_LM), encoding="utf-8")
        journey_id = env.runner.submit("quickstart.lm", {"corpus": ["corpus/en.txt"], "preset": "presets/lm-small.yaml",
                                                         "name": "lanes-qs", "external_worker": True})
        started.append(journey_id)
        wait_running(env.runner, journey_id)
        tokenizer_id = env.runner.submit("tokenizer.train", {"corpus": ["corpus/en.txt"], "vocab_size": 60,
                                                             "output": "tokenizers/lanes.model"})
        started.append(tokenizer_id)
        tokenizer = env.runner.wait(tokenizer_id, 240)
        assert tokenizer["status"] == "succeeded", env.runner.read_log(tokenizer_id)
        assert env.runner.get_job(journey_id)["status"] == "running"
        assert env.runner.get_job(next_id)["status"] == "queued" and env.runner.get_job(long_id)["status"] == "running"
    finally:
        for job_id in reversed(started):
            if env.runner.get_job(job_id)["status"] in ("queued", "running"):
                env.runner.cancel(job_id)
        for job_id in started:
            env.runner.wait(job_id, 180)
