"""The job runner's public API, used by `python -m core jobs …`, the journeys and the dashboard.

    runner = JobRunner(settings, catalogue=catalogue)   # the catalogue comes from the entry point
    job_id = runner.submit("tokenizer.train", {"corpus": ["text/am.txt"], "vocab_size": 800})
    runner.get_job(job_id)["status"]      # one of jobs.states.STATES: queued, running, succeeded, …
    runner.read_log(job_id, tail=50)
    runner.cancel(job_id); runner.resume(job_id)
    worker = start_worker(settings); …; worker.stop()
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

from core.config import Settings, load_settings
from core.errors import InputError
from core.runs import run_folder_of_config
from core.training.run_config import load_run_config
from jobs.kinds import JobCatalogue, is_gpu_kind
from jobs.param_paths import check_job_params, job_params
from jobs.queue import build_huey, jobs_db_path
from jobs.records import JobStore, new_job_id
from jobs.recovery import enqueue, requeue, stop_orphan
from jobs.states import CANCELLED, FINAL, QUEUED, RESUMABLE, RUNNING
from jobs.supervise import tail_text, worker_alive
from jobs.tasks import register_tasks
from jobs.waiting import with_reasons
from jobs.worker import Worker


class JobRunner:
    """Submit, inspect, cancel and resume jobs in one workspace's queue.

    `catalogue` (built by the entry point from the CLI's parsers) checks submitted parameters.
    Each job records the settings file of `settings` (`settings.source`), which its process loads.
    Raises InputError when the jobs database cannot be opened (a read-only workspace, a damaged file).
    """

    def __init__(self, settings: Settings | None = None, *, catalogue: JobCatalogue) -> None:
        self.settings = settings or load_settings()
        self.catalogue = catalogue
        self.huey = build_huey(self.settings)
        self.task = register_tasks(self.huey)
        self.store = JobStore(jobs_db_path(self.settings))

    def submit(self, kind: str, params: dict[str, Any] | None = None, nproc: int = 1) -> str:
        """Validate `params` for `kind` exactly like the CLI, record the job and enqueue it; return its id.

        `nproc` > 1 runs a `train` job under torchrun with that many processes (GPUs).
        Raises InputError with the command's own message when the kind or a parameter is wrong,
        or when `nproc` is below 1 or above 1 for a kind other than `train`.
        """
        if nproc < 1 or (nproc > 1 and kind != "train"):
            raise InputError(f"nproc {nproc}: use 1, or more than 1 (one process per GPU) for `train` only.")
        given = job_params(kind, params or {})  # jobs/param_paths.JOB_VALUES: e.g. dataset.import confines its audio
        check_job_params(self.settings, kind, given, self.catalogue.path_options(kind))  # as given: `a,../../b` must not collapse into the workspace
        params, argv = self.plan(kind, given)
        run_dir = self._run_dir(kind, params)
        resume = "auto" if (kind == "train" and params.get("resume") == "auto") else "never"  # never for `fresh`
        logs = self.settings.workspace / "logs" / "jobs"
        logs.mkdir(parents=True, exist_ok=True)
        job_id = new_job_id()
        self.store.insert(
            {
                "id": job_id,
                "kind": kind,
                "params": params,
                "argv": argv,
                "resume": resume,
                # a job told to run on the CPU takes no device slot: it runs beside the one training on the device
                "gpu": int(is_gpu_kind(kind, self.settings.get("queue.gpu_kinds")) and params.get("device") != "cpu"),
                "nproc": nproc,
                "run_dir": str(run_dir) if run_dir else None,
                "log_path": str(logs / f"{job_id}.log"),
                "progress_path": str(logs / f"{job_id}.progress.json"),
                "settings_path": str(self.settings.source) if self.settings.source else None,
            }
        )
        enqueue(self.task, job_id)
        return job_id

    def plan(self, kind: str, params: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
        """Return (the parameters, the CLI argv) a job of `kind` with `params` is recorded and run with.

        `submit` queues exactly this; the dashboard previews it. Path parameters become absolute
        (relative ones resolve against the workspace) and `train` gets `resume: auto` unless `resume`
        or `fresh` is given.
        Raises InputError with the command's own message when the kind or a parameter is wrong.
        """
        params = dict(params or {})
        if kind == "train" and "resume" not in params and not params.get("fresh") and self.catalogue.accepts(kind, "resume"):
            params["resume"] = "auto"
        params = self.catalogue.absolute_paths(kind, params, self.settings.workspace)
        return params, self.catalogue.build_argv(kind, params)

    def _run_dir(self, kind: str, params: dict[str, Any]) -> Path | None:
        """Return the folder a `train` job's trainer writes (from its run config, loaded and checked against
        this runner's settings, the ones the job records and runs with), else None."""
        if kind != "train" or params.get("config") is None:
            return None
        config = load_run_config(self.settings.resolve(str(params["config"])), self.settings)
        return run_folder_of_config(self.settings, config).path

    def list_jobs(self, status: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Return job records newest first, optionally filtered by `status`, at most `limit`; each with `waits_for`,
        why a queued job has not started (`jobs.waiting`; None for the others)."""
        jobs = self.store.list(status=status, limit=limit)
        return with_reasons(jobs, self._waiting_pool() if any(job["status"] == QUEUED for job in jobs) else jobs)

    def get_job(self, job_id: str) -> dict[str, Any]:
        """Return the record of `job_id` with `waits_for` (see `list_jobs`). Raises InputError when there is no such job."""
        job = self.store.get(job_id)
        return with_reasons([job], self._waiting_pool() if job["status"] == QUEUED else [job])[0]

    def _waiting_pool(self) -> list[dict[str, Any]]:
        """Return the queued and running jobs: what a queued job's reason for waiting is read from."""
        return self.store.list(status=QUEUED) + self.store.list(status=RUNNING)

    def read_log(self, job_id: str, tail: int | None = None) -> str:
        """Return the job's log text (only its last `tail` lines when given).

        Raises InputError when there is no such job.
        """
        path = Path(self.store.get(job_id)["log_path"])
        if tail is not None:
            return tail_text(path, tail)
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""

    def follow_log(self, job_id: str, poll_s: float = 0.5) -> Iterator[str]:
        """Yield chunks of the job's log as they are written, until the job reaches a final state."""
        path = Path(self.store.get(job_id)["log_path"])
        offset = 0
        while True:
            done = self.store.get(job_id)["status"] in FINAL
            if path.is_file():
                with open(path, "rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                offset += len(chunk)
                if chunk:
                    yield chunk.decode("utf-8", "replace")
            if done:
                return
            time.sleep(poll_s)

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel `job_id`: a queued or interrupted job never runs; a running one is stopped by its worker.

        Returns the record. Raises InputError when the job already finished or does not exist.
        """
        job = self.store.get(job_id)
        if self.store.cancel(job_id):
            return self.store.get(job_id)
        if self.store.request_cancel(job_id):
            job = self.store.get(job_id)
            if worker_alive(job["worker"]) is False:
                self._cancel_orphan(job)
            return self.store.get(job_id)
        raise InputError(f"job {job_id} is already {job['status']}; there is nothing to cancel.")

    def _cancel_orphan(self, job: dict[str, Any]) -> None:
        grace = float(self.settings.get("queue.cancel_grace_s", 60))
        stop_orphan(job, grace, float(self.settings.get("queue.term_grace_s", 10)))
        self.store.finish(job["id"], CANCELLED, error="cancelled by request (its worker had stopped)")

    def resume(self, job_id: str) -> dict[str, Any]:
        """Queue an interrupted, failed or cancelled job again (training continues from its checkpoint).

        Returns the record. Raises InputError when the job is queued, running or succeeded.
        """
        job = self.store.get(job_id)
        if job["damaged"]:
            raise InputError(f"job {job_id}: damaged record ({job['damaged']}); it cannot be resumed. Submit it again.")
        if not requeue(self.store, self.task, job_id):
            raise InputError(
                f"job {job_id} is {job['status']}; only {', '.join(RESUMABLE)} jobs can be resumed."
            )
        return self.store.get(job_id)

    def wait(self, job_id: str, timeout_s: float, statuses: tuple[str, ...] = FINAL) -> dict[str, Any]:
        """Return the record once `job_id` reaches one of `statuses`.

        Raises TimeoutError when it does not within `timeout_s` seconds.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.store.get(job_id)
            if job["status"] in statuses:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['status']} after {timeout_s:.0f}s")
            time.sleep(0.2)


def start_worker(settings: Settings | None = None, workers: int | None = None) -> Worker:
    """Start a consumer in background threads of this process (the dashboard's); return it.

    Call `.stop()` on the result to stop it. Raises InputError for an unsupported queue.url.
    """
    worker = Worker(settings or load_settings(), workers)
    worker.start()
    return worker
