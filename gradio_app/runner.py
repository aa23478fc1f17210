"""The dashboard's only door to the job runner (`jobs`): submit, watch, cancel, resume.

No other `gradio_app` module imports `jobs` (tests/test_layers.py holds it). `app.py` hands in the
job catalogue it built from the CLI's parsers. Everything the UI shows about a job comes from its
record in the jobs database and the files it writes, so a page reload or a second browser sees
the same jobs; nothing here keeps state that a closed tab could lose.
"""

from __future__ import annotations

import shlex
from typing import Any

from core.config import Settings
from jobs import runner as jobs_runner
from jobs import states as job_states
from jobs.kinds import JobCatalogue
from jobs.names import job_subject, kind_words
from jobs.supervise import command_line
from jobs.worker import Worker

__all__ = ["JobRunner", "job_states", "job_subject", "kind_words"]  # job_states: the one table of job states; the
# names: what a job is to a person, for the tabs


class JobRunner:
    """Submits and inspects jobs for one workspace; optionally owns the in-process worker.

    Jobs record the settings file of `settings` (the app's `--config`), which their processes load.
    """

    def __init__(self, settings: Settings, catalogue: JobCatalogue) -> None:
        self.settings = settings
        self.catalogue = catalogue
        self._jobs = jobs_runner.JobRunner(settings, catalogue=catalogue)
        self._worker: Worker | None = None

    def start_worker(self) -> None:
        """Start the embedded Huey consumer (thread workers), recovering jobs a crash left running."""
        if self._worker is None:
            self._worker = jobs_runner.start_worker(self.settings)

    def stop_worker(self) -> None:
        """Stop the embedded consumer; its running jobs are stopped and marked interrupted."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def submit(self, kind: str, params: dict[str, Any], nproc: int = 1) -> str:
        """Validate and enqueue a job of `kind` (a dotted CLI command) with CLI-named `params`; return its id.

        Empty form values are dropped; relative paths resolve against the workspace; `nproc` > 1 runs a
        `train` job with one process per GPU. Raises InputError with the CLI's message for bad parameters.
        """
        return self._jobs.submit(kind, _filled(params), nproc=nproc)

    def preview(self, kind: str, params: dict[str, Any], nproc: int = 1) -> str:
        """Return the command line `submit(kind, params, nproc)` would run: `python -m core` and the job's exact
        argv, under torchrun with `nproc` > 1.

        Raises InputError with the CLI's message for bad parameters.
        """
        _, argv = self._jobs.plan(kind, _filled(params))
        return shlex.join(["python", *command_line(argv, nproc)[1:]])

    def list(self, limit: int = 200) -> list[dict[str, Any]]:
        """Return the newest `limit` job records, newest first."""
        return self._jobs.list_jobs(limit=limit)

    def latest(self, kind: str) -> dict[str, Any] | None:
        """Return the newest job record of `kind`, or None."""
        return next((job for job in self.list() if job.get("kind") == kind), None)

    def get(self, job_id: str) -> dict[str, Any]:
        """Return the record of `job_id`; raises InputError for an unknown id."""
        return self._jobs.get_job(job_id)

    def log_tail(self, job_id: str, lines: int = 200) -> str:
        """Return the last `lines` lines of the job's log file."""
        return self._jobs.read_log(job_id, tail=lines)

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a queued or running job (a running trainer saves a checkpoint first); return its record."""
        return self._jobs.cancel(job_id)

    def resume(self, job_id: str) -> dict[str, Any]:
        """Queue an interrupted, failed or cancelled job again (training resumes); return its record."""
        return self._jobs.resume(job_id)


def _filled(params: dict[str, Any]) -> dict[str, Any]:
    """Return `params` without the empty form values (None, "", [])."""
    return {k: v for k, v in params.items() if v not in (None, "", [])}
