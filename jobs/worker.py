"""The job consumer: a Huey consumer with thread workers, crash recovery first, clean shutdown.

`Worker(settings).run()` blocks (the `python -m core worker` command; SIGTERM or SIGINT stop it).
`Worker(settings).start()` runs it in the background of another process (the dashboard) until
`stop()`. On shutdown, running jobs' processes are stopped (STOP file for training, then
SIGTERM/SIGKILL) and the jobs marked `interrupted`, to be resumed by the next worker start.
A job runs with the settings file it was submitted with, else the one the worker was started with.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from huey.consumer import Consumer

from core.config import WORKSPACE_ENV, Settings
from core.runs import RunFolder
from jobs.lanes import HEAVY
from jobs.queue import build_huey, describe as describe_queue
from jobs.records import with_busy_retry
from jobs.recovery import recover
from jobs.supervise import stop_process_group
from jobs.tasks import make_context, register_tasks

SHUTDOWN_GRACE_S = 30.0


class _Consumer(Consumer):
    """A Huey consumer that installs signal handlers only when started from the main thread."""

    def _set_signal_handlers(self) -> None:
        if threading.current_thread() is threading.main_thread():
            super()._set_signal_handlers()


class Worker:
    """One consumer process's job runner: one thread per lane slot (`queue.workers` heavy, `queue.light_workers`
    light, `queue.journey_workers` journey: `jobs.lanes`), `queue.gpu_slots` GPU slots.

    Creating it sets LINGUAFORGE_WORKSPACE in this process to the settings' workspace, so job
    commands see the same workspace as the worker. It runs recorded argv only: the catalogue that
    checked them stays with the submitter (`JobRunner`).
    """

    def __init__(self, settings: Settings, workers: int | None = None) -> None:
        self.settings = settings
        os.environ[WORKSPACE_ENV] = str(settings.workspace)
        self.huey = build_huey(settings)
        self.context = make_context(settings, workers)
        self.task = register_tasks(self.huey, self.context)
        self.workers = self.context.lanes.counts[HEAVY]
        self.consumer = _Consumer(
            self.huey,
            workers=self.context.lanes.total,
            worker_type="thread",
            periodic=False,
            initial_delay=0.1,
            max_delay=1.0,
            flush_locks=True,
        )
        self._stopped = False

    def recover(self) -> dict[str, list[str]]:
        """Recover jobs a crashed worker left behind; return what changed (see jobs.recovery)."""
        queued_ids = with_busy_retry(self._queued_ids, "read the queue")
        ctx = self.context
        return recover(ctx.store, self.task, queued_ids, min(ctx.cancel_grace_s, SHUTDOWN_GRACE_S), ctx.term_grace_s)

    def _queued_ids(self) -> set[str]:
        tasks = list(self.huey.pending()) + list(self.huey.scheduled())
        return {str(t.args[0]) for t in tasks if t.args}

    def describe(self) -> dict[str, Any]:
        """Return what this worker serves: queue backend and location, heavy threads, each lane's slots, GPU slots, identity,
        and the settings file its jobs load when they were submitted without one."""
        return {
            **describe_queue(self.settings),
            "settings": str(self.settings.source) if self.settings.source else None,
            "workers": self.workers,
            "lanes": dict(self.context.lanes.counts),
            "gpu_slots": int(self.settings.get("queue.gpu_slots", 1) or 1),
            "worker": self.context.worker_id,
        }

    def run(self) -> dict[str, list[str]]:
        """Recover, then consume until SIGINT/SIGTERM; stop running jobs; return the recovery report."""
        report = self.recover()
        logging.getLogger("linguaforge.jobs").info("recovery: %s", report)
        try:
            self.consumer.run()
        finally:
            self._stop_children()
        return report

    def start(self) -> dict[str, list[str]]:
        """Recover, then consume in background threads; return the recovery report."""
        report = self.recover()
        self.consumer.start()
        return report

    def stop(self, graceful: bool = False) -> None:
        """Stop consuming; with `graceful`, wait for running jobs, else stop their processes."""
        self.consumer.stop(graceful=graceful)
        self._stop_children()

    def _stop_children(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        ctx = self.context
        ctx.shutting_down.set()
        for job_id, proc in list(ctx.active.items()):
            job = ctx.store.get(job_id)
            stop_file = RunFolder(Path(job["run_dir"])).stop_file if job["run_dir"] else None
            stop_process_group(
                proc.pid,
                lambda: proc.poll() is not None,
                min(ctx.cancel_grace_s, SHUTDOWN_GRACE_S),
                stop_file,
                term_grace_s=ctx.term_grace_s,
            )
            ctx.store.interrupt(job_id, f"worker {ctx.worker_id} shut down while the job ran")
