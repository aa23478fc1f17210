"""Crash recovery when a worker starts, and the requeue step that resume shares.

Jobs left `running` by a worker of this host that is gone become `interrupted` (their orphaned
process group, if any, is stopped first: STOP file, SIGTERM, SIGKILL); interrupted jobs that
asked for `resume: auto` are queued again; queued jobs whose queue message was lost are
enqueued again. Huey itself keeps no locks or results for us, so nothing stale can block.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from huey.api import TaskWrapper

from core.runs import RunFolder

from jobs.records import JobStore, with_busy_retry
from jobs.states import CANCELLED, INTERRUPTED, QUEUED, RUNNING
from jobs.supervise import is_alive, stop_process_group, worker_alive


def enqueue(task: TaskWrapper, job_id: str) -> None:
    """Put one `run_job(job_id)` message on the queue (retrying while SQLite is busy)."""
    with_busy_retry(lambda: task(job_id), f"enqueue job {job_id}")


def requeue(store: JobStore, task: TaskWrapper, job_id: str, automatic: bool = False) -> bool:
    """Queue job `job_id` again and enqueue it: `resume` (from interrupted, failed or cancelled), or with
    `automatic` `auto_resume` (from interrupted only, after a crash).

    Returns False when the job was not in a state the transition leaves from (someone else moved it).
    """
    moved = store.auto_resume(job_id) if automatic else store.resume(job_id)
    if moved:
        enqueue(task, job_id)
    return moved


def stop_orphan(job: dict[str, Any], grace_s: float, term_grace_s: float) -> str | None:
    """Stop the process group of a job whose worker is gone; return how it ended, None if none ran."""
    pid, start = job.get("pid"), job.get("pid_start")
    if not is_alive(pid, start):
        return None
    stop_file = RunFolder(Path(job["run_dir"])).stop_file if job.get("run_dir") else None
    return stop_process_group(pid, lambda: not is_alive(pid, start), grace_s, stop_file, term_grace_s=term_grace_s)


def recover(store: JobStore, task: TaskWrapper, queued_ids: set[str], grace_s: float, term_grace_s: float) -> dict[str, list[str]]:
    """Recover after a crash; return the ids that became `interrupted`, `cancelled` and `requeued`,
    and those skipped as `damaged` (a record that cannot be decoded is never run or changed).

    `queued_ids` are the job ids that still have a message in the queue.
    """
    report: dict[str, list[str]] = {INTERRUPTED: [], CANCELLED: [], "requeued": [], "damaged": []}
    report["damaged"] = [job["id"] for job in store.list() if job["damaged"]]
    for job in store.list(status=RUNNING):
        if job["damaged"] or worker_alive(job["worker"]) is not False:
            continue
        stop_orphan(job, grace_s, term_grace_s)
        if job["cancel_requested"]:
            if store.finish(job["id"], CANCELLED, error="cancelled by request (its worker had stopped)"):
                report[CANCELLED].append(job["id"])
        elif store.interrupt(job["id"], f"worker {job['worker']} stopped while the job ran"):
            report[INTERRUPTED].append(job["id"])
    for job in store.list(status=INTERRUPTED):
        if not job["damaged"] and job["resume"] == "auto" and requeue(store, task, job["id"], automatic=True):
            report["requeued"].append(job["id"])
    for job in store.list(status=QUEUED):  # lost messages only: a job requeued above already has one
        if not job["damaged"] and job["id"] not in queued_ids and job["id"] not in report["requeued"]:
            enqueue(task, job["id"])
            report["requeued"].append(job["id"])
    return report
