"""The job lifecycle against a real redis-server on a free loopback port (queue.url: redis://…)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from jobs.supervise import is_alive
from tests.test_jobs_support import JOB_BPE, JobsEnv, held_fifo, make_jobs_env, redis_server, release_fifo, wait_running


@pytest.fixture
def env(workspace: Path, tmp_path: Path) -> Iterator[JobsEnv]:
    for url in redis_server(tmp_path):
        yield from make_jobs_env(workspace, tmp_path, url=url)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_redis_queue_runs_cancels_and_recovers_jobs(env: JobsEnv) -> None:
    runner = env.runner
    assert runner.huey.__class__.__name__ == "RedisHuey"
    skipped = runner.submit("doctor", {"tokenizer": JOB_BPE})
    runner.cancel(skipped)
    ok = runner.submit("doctor", {"tokenizer": JOB_BPE})
    env.start_worker()
    assert runner.wait(ok, 120)["status"] == "succeeded", runner.read_log(ok)
    assert runner.get_job(skipped)["started_at"] is None

    target = held_fifo(env, "held.yaml")
    crashed = runner.submit("doctor", {"tokenizer": JOB_BPE, "target_config": target})
    running = wait_running(runner, crashed)  # it cannot finish: its target config is a FIFO no one writes
    env.workers[-1].kill9()
    env.start_worker()
    assert runner.get_job(crashed)["status"] == "interrupted"
    assert not is_alive(running["pid"], running["pid_start"])
    release_fifo(env, target)
    runner.resume(crashed)
    done = runner.wait(crashed, 120)
    assert done["status"] == "succeeded" and done["attempts"] == 2
    assert "locked" not in env.worker_output().lower()
