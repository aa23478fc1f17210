"""The Huey task that runs one job: claim it, take a slot of its lane and its GPU slots if needed, supervise its process.

`register_tasks(huey, context)` returns the `run_job` task wrapper bound to a `JobContext`.
Submitters register it without one (to enqueue); only a consumer, which has one, executes it.
A job's process loads the settings file recorded with the job, else the one its worker was started with.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from huey import Huey
from huey.api import TaskWrapper
from huey.exceptions import RetryTask

from core.config import Settings
from core.errors import InputError
from core.fsutil import last_json_line, open_append
from core.runs import RunFolder
from jobs.lanes import DEVICE, WorkSlots, lane_counts, lane_of
from jobs.progress import TrainProgress, file_progress
from jobs.queue import jobs_db_path
from jobs.records import JobStore
from jobs.slots import GpuSlots
from jobs.states import CANCELLED, FAILED, QUEUED, SUCCEEDED
from jobs.supervise import (
    error_summary,
    launch,
    process_start_time,
    stop_process_group,
    worker_identity,
)

POLL_S = 0.5
PROGRESS_EVERY_S = 1.0
RETRY_DELAY_S = 1.0  # how soon a job whose slot was busy is tried again


@dataclass
class JobContext:
    """What running jobs in one consumer process share: settings, records, lane and GPU slots, children."""

    settings: Settings
    store: JobStore
    gpu_slots: GpuSlots
    lanes: WorkSlots
    worker_id: str = field(default_factory=worker_identity)
    active: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    shutting_down: threading.Event = field(default_factory=threading.Event)

    @property
    def cancel_grace_s(self) -> float:
        """Seconds a cancelled training run gets to save and exit after its STOP file."""
        return float(self.settings.get("queue.cancel_grace_s", 60))

    @property
    def term_grace_s(self) -> float:
        """Seconds between SIGTERM and SIGKILL when stopping a job's process group."""
        return float(self.settings.get("queue.term_grace_s", 10))


def make_context(settings: Settings, heavy: int | None = None) -> JobContext:
    """Return a JobContext for `settings` with `queue.gpu_slots` GPU slots (default 1) over this process's
    `CUDA_VISIBLE_DEVICES` (`jobs.slots`) and each lane's slots (`jobs.lanes`; `heavy` overrides `queue.workers`)."""
    slots = int(settings.get("queue.gpu_slots", 1) or 1)
    return JobContext(settings, JobStore(jobs_db_path(settings)), GpuSlots(slots, os.environ.get("CUDA_VISIBLE_DEVICES")),
                      WorkSlots(lane_counts(settings, heavy)))


def register_tasks(huey: Huey, context: JobContext | None = None) -> TaskWrapper:
    """Register and return the `run_job(job_id)` task on `huey`; `context` is needed to execute it."""

    @huey.task(name="linguaforge.run_job")
    def run_job(job_id: str) -> None:
        if context is None:
            raise RuntimeError("run_job executed without a JobContext; start it through jobs.worker")
        execute(context, job_id)

    return run_job


def execute(ctx: JobContext, job_id: str) -> None:
    """Run job `job_id` unless it is no longer queued; while no slot of its lane (`jobs.lanes`) or not its GPU
    slots (one per process) are free, record what it waits for and retry later; fail it when it needs more GPU
    slots than the worker has."""
    try:
        job = ctx.store.get(job_id)
    except InputError:
        return
    if job["status"] != QUEUED:
        return
    if job["damaged"]:
        ctx.store.reject(job_id, f"damaged job record ({job['damaged']}); submit the job again")
        return
    needed = int(job["nproc"]) if job["gpu"] else 0
    if needed > ctx.gpu_slots.count:
        ctx.store.reject(job_id, f"needs {needed} GPU slots (--nproc {needed}) but worker {ctx.worker_id} has "
                                 f"{ctx.gpu_slots.count} (queue.gpu_slots); raise queue.gpu_slots or submit with fewer processes")
        return
    lane = ctx.lanes.take(lane_of(job["kind"]))
    if lane is None:
        _wait(ctx, job, lane_of(job["kind"]))
    devices = ctx.gpu_slots.take(needed) if needed else []
    if devices is None:
        ctx.lanes.give_back(lane)
        _wait(ctx, job, DEVICE)
    try:
        settings_file = job["settings_path"] or (str(ctx.settings.source) if ctx.settings.source else None)
        if ctx.store.claim(job_id, ctx.worker_id, settings_file):
            _supervise(ctx, job_id, devices)
    finally:
        ctx.gpu_slots.give_back(devices)
        ctx.lanes.give_back(lane)


def _wait(ctx: JobContext, job: dict[str, Any], resource: str) -> NoReturn:
    """Record that `job` waits for `resource` (a lane or the device slot) and raise RetryTask to try it again soon."""
    if job.get("waiting") != resource:
        ctx.store.wait_for(job["id"], resource)
    raise RetryTask(delay=RETRY_DELAY_S)


def _supervise(ctx: JobContext, job_id: str, devices: list[str]) -> None:
    supervisor = Supervisor(ctx, ctx.store.get(job_id), devices)
    try:
        supervisor.run()
    except Exception as exc:  # the job edge: record the failure, never leave it `running`
        supervisor.log(traceback.format_exc())
        supervisor.finish(FAILED, error=f"internal error in the job runner: {exc}")


class Supervisor:
    """Runs one claimed job's process to the end and records progress and outcome."""

    def __init__(self, ctx: JobContext, job: dict[str, Any], devices: list[str] | None = None) -> None:
        self.ctx = ctx
        self.job = job
        self.devices = devices or []  # the GPUs of its slots (none for a CPU kind)
        self.id = job["id"]
        self.log_path = Path(job["log_path"])
        self.progress_path = Path(job["progress_path"])
        self.run_dir = RunFolder(Path(job["run_dir"])) if job["run_dir"] else None
        self.train = TrainProgress(self.run_dir) if self.run_dir else None
        self.attempt_offset = 0  # where this attempt's output starts in the job log

    def log(self, line: str) -> None:
        """Append one line from the runner to the job log (best effort: an unwritable log loses the line)."""
        try:
            with open_append(self.log_path) as handle:
                handle.write(f"[jobs] {line}\n")
        except OSError:
            pass

    def run(self) -> None:
        """Run the command; record the final status.

        A training job's doctor runs inside the trainer (on the tokenizer and checkpoint it
        loaded), the one gate after submission; its report becomes the job's error when it fails.
        A folder the job must write (logs/, the run folder) that is not writable ends it `failed`
        with an error naming the folder.
        """
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open_append(self.log_path):
                pass
            self.log(f"job {self.id} ({self.job['kind']}) attempt {self.job['attempts']} on {self.ctx.worker_id}")
            self._prepare_run_dir()
            settings_file = Path(self.job["settings_path"]) if self.job["settings_path"] else None
            self.log(f"settings: {settings_file or 'config/default.yaml alone'}")
            self.attempt_offset = self.log_path.stat().st_size
            proc = launch(self.job["argv"], self.ctx.settings.workspace, self.log_path, self.progress_path,
                          self.job["nproc"], settings_file, self.devices)
        except OSError as exc:
            where = Path(exc.filename).parent if exc.filename else None
            detail = f"{where} is not writable ({exc.strerror}: {exc.filename})" if where else str(exc)
            self.finish(FAILED, error=f"could not start the command: {detail}. Make the folder writable and resume the job.")
            return
        self.ctx.active[self.id] = proc
        try:
            self.ctx.store.update(self.id, pid=proc.pid, pid_start=process_start_time(proc.pid))
            cancelled = self._watch(proc)
        finally:
            self.ctx.active.pop(self.id, None)
        if self.ctx.shutting_down.is_set() and not cancelled:
            return
        self._record_outcome(proc.returncode, cancelled)

    def _prepare_run_dir(self) -> None:
        if self.run_dir is not None:
            self.run_dir.stop_file.unlink(missing_ok=True)

    def _watch(self, proc: subprocess.Popen[bytes]) -> bool:
        last = 0.0
        while proc.poll() is None:
            time.sleep(POLL_S)
            if time.monotonic() - last < PROGRESS_EVERY_S:
                continue
            last = time.monotonic()
            self._save_progress()
            if self.ctx.store.get(self.id)["cancel_requested"]:
                self.cancel(proc)
                return True
        self._save_progress()
        return bool(self.ctx.store.get(self.id)["cancel_requested"])

    def cancel(self, proc: subprocess.Popen[bytes]) -> str:
        """Stop the job's process group (STOP file first for training); return how it ended."""
        stop_file = self.run_dir.stop_file if self.run_dir is not None else None
        how = stop_process_group(
            proc.pid,
            lambda: proc.poll() is not None,
            self.ctx.cancel_grace_s,
            stop_file,
            self.log,
            self.ctx.term_grace_s,
        )
        self.log(f"cancelled ({how})")
        return how

    def _save_progress(self) -> None:
        state = self.train.read() if self.train is not None else file_progress(self.progress_path)
        if state:
            self.ctx.store.update(self.id, progress=state)

    def _record_outcome(self, code: int | None, cancelled: bool) -> None:
        if cancelled:
            self.finish(CANCELLED, exit_code=code, error="cancelled by request")
            return
        if code == 0:
            result = last_json_line(self.log_path) or {}
            if result.get("state") == "stopped":
                self.finish(CANCELLED, exit_code=code, artifacts=result,
                            error="the run was stopped outside the job runner (STOP file or SIGTERM)")
                return
            self.finish(SUCCEEDED, exit_code=code, artifacts=result)
            return
        self.finish(FAILED, exit_code=code, error=error_summary(self.log_path, self.attempt_offset))

    def finish(self, outcome: str, **fields: Any) -> None:
        """Record the final `outcome` (only while the job is still running) with `fields`."""
        self.log(f"finished: {outcome}")
        self.ctx.store.finish(self.id, outcome, **fields)
