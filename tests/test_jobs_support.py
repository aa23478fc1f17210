"""Helpers for the job-runner tests: a real `python -m core worker` subprocess and a real redis-server.

Every process started here is stopped in the fixture teardown, including job process groups a
killed worker left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from core.cli.catalogue import cli_catalogue
from core.config import Settings, load_settings
from jobs.runner import JobRunner
from jobs.supervise import is_alive
from tests.fixture_paths import INDEXTTS_BPE, INDEXTTS_CONFIG

REPO_ROOT = Path(__file__).resolve().parent.parent
JOB_BPE = "tokenizers/bpe.model"  # job parameters must lie inside the workspace: a copy of INDEXTTS_BPE


def put_bpe(workspace: Path) -> str:
    """Copy the IndexTTS2 tokenizer fixture to JOB_BPE in `workspace`; return JOB_BPE."""
    (workspace / JOB_BPE).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(INDEXTTS_BPE, workspace / JOB_BPE)
    return JOB_BPE


class WorkerProcess:
    """A real `python -m core worker --settings FILE` in its own session, output to a file."""

    def __init__(self, settings_file: Path, workspace: Path, log: Path) -> None:
        self.settings_file = settings_file
        self.workspace = workspace
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "WorkerProcess":
        """Start the worker and wait until its consumer is up; return self."""
        env = dict(os.environ, LINGUAFORGE_WORKSPACE=str(self.workspace), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        handle = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "core", "worker", "--settings", str(self.settings_file)],
            cwd=REPO_ROOT,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()
        deadline = time.monotonic() + 60
        while "Huey consumer started" not in self.output():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"worker did not start:\n{self.output()}")
            time.sleep(0.2)
        return self

    def output(self) -> str:
        """Return everything the worker printed so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM the worker and wait; SIGKILL it when it does not exit within 60 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def kill9(self) -> None:
        """Kill the worker with SIGKILL (its job processes, in their own sessions, survive)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)


class JobsEnv:
    """A workspace with a settings file, a JobRunner and the workers started for one test."""

    def __init__(self, workspace: Path, tmp: Path, overrides: dict[str, Any]) -> None:
        self.workspace = workspace
        self.tmp = tmp
        self.settings_file = tmp / "settings.yaml"
        queue = {"workers": 2, "gpu_slots": 1, "cancel_grace_s": 30, "term_grace_s": 3}
        queue.update(overrides)
        self.settings_file.write_text(yaml.safe_dump({"queue": queue}))
        self.settings: Settings = load_settings(self.settings_file)
        self.runner = JobRunner(self.settings, catalogue=cli_catalogue())
        self.workers: list[WorkerProcess] = []

    def start_worker(self) -> WorkerProcess:
        """Start one more worker process on this workspace; return it."""
        worker = WorkerProcess(self.settings_file, self.workspace, self.tmp / f"worker{len(self.workers)}.log")
        self.workers.append(worker)
        return worker.start()

    def worker_output(self) -> str:
        """Return the output of every worker started so far."""
        return "\n".join(w.output() for w in self.workers)

    def close(self) -> None:
        """Stop every worker and kill any job process still alive."""
        for worker in self.workers:
            worker.stop()
        for job in self.runner.list_jobs():
            if job["pid"] and is_alive(job["pid"], job["pid_start"]):
                try:
                    os.killpg(job["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass


def wait_running(runner: JobRunner, job_id: str, timeout_s: float = 60) -> dict:
    """Return the record once the job is running with a recorded PID (wait on a job that cannot end
    before the test acts, such as one reading `held_fifo`, so this is a lasting state)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = runner.get_job(job_id)
        if job["status"] == "running" and job["pid"]:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never started: {runner.get_job(job_id)}")


def held_fifo(env: JobsEnv, name: str) -> str:
    """Make a FIFO that no one writes in the workspace; return its workspace path.

    A `doctor` job reading it as its `--target-config` waits there until it is cancelled, so
    what a test sees while that job runs is a lasting state, not a moment it must catch.
    """
    fifo = env.workspace / "configs" / name
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    return f"configs/{name}"


def release_fifo(env: JobsEnv, relative: str) -> None:
    """Put a readable IndexTTS2 target config where `held_fifo` made its FIFO: the next run of the job
    reads it and can finish (a process already waiting on the old FIFO stays where it is)."""
    path = env.workspace / relative
    path.unlink()
    shutil.copyfile(INDEXTTS_CONFIG, path)


def make_jobs_env(workspace: Path, tmp: Path, **overrides: Any) -> Iterator[JobsEnv]:
    """Yield a JobsEnv whose workers and job processes are stopped afterwards."""
    env = JobsEnv(workspace, tmp, overrides)
    put_bpe(workspace)
    try:
        yield env
    finally:
        env.close()


def lm_jobs_env(tmp: Path) -> Iterator[JobsEnv]:
    """Yield a JobsEnv over an LM workspace in `tmp` (the workspace env var set) with one worker started."""
    from tests.trainer_helpers import lm_workspace

    workspace = tmp / "workspace"
    workspace.mkdir()
    lm_workspace(workspace)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
        for env in make_jobs_env(workspace, tmp, cancel_grace_s=60, term_grace_s=5):
            env.start_worker()
            yield env


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def redis_server(tmp: Path) -> Iterator[str]:
    """Start a real redis-server on a free loopback port; yield its URL; stop it afterwards."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (./test.sh installs it where apt is available)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("redis-server did not start")
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def has_kind(kind: str) -> bool:
    """Return True when the CLI has the command `kind` (stages land from other issues)."""
    from core.errors import InputError

    try:
        cli_catalogue().command_parser(kind)
    except InputError:
        return False
    return True
