"""Why a queued job has not started: what it waits for, who holds it, and how many wait before it.

A worker records on a queued job the lane or device slot it found busy (`JobStore.wait_for`); this module
reads the records to name the holders (the running jobs of that lane, or the running GPU jobs) and the jobs
submitted earlier that wait for the same slot. `jobs show`, the Jobs tab and the tab that submitted a job
show the same sentence: "waiting for the device slot held by training 'long', 1 ahead".
"""

from __future__ import annotations

from typing import Any

from jobs.lanes import DEVICE, SLOT_WORDS, lane_of
from jobs.names import job_subject, kind_words
from jobs.states import QUEUED, RUNNING

NOT_PICKED = "waiting for a worker to pick it up"


def _needs(job: dict[str, Any], resource: str) -> bool:
    """Return True when `job` competes for `resource`: the device slot (a GPU kind) or a lane."""
    return bool(job.get("gpu")) if resource == DEVICE else lane_of(job.get("kind") or "") == resource


def wait_reason(job: dict[str, Any], jobs: list[dict[str, Any]]) -> str | None:
    """Return why `job` is still queued, in words, given the other job records `jobs`; None unless it is queued.

    Names the slot it waits for, the running jobs holding it (`training 'long'`) and how many queued jobs
    submitted before it need the same slot ("1 ahead").
    """
    if job.get("status") != QUEUED:
        return None
    resource = job.get("waiting")
    if resource not in SLOT_WORDS:
        return NOT_PICKED
    holders = sorted((other for other in jobs if other.get("status") == RUNNING and _needs(other, resource)),
                     key=lambda other: other.get("created_at") or 0)
    ahead = sum(1 for other in jobs if other.get("status") == QUEUED and other["id"] != job["id"]
                and _needs(other, resource) and (other.get("created_at") or 0) < (job.get("created_at") or 0))
    held = " held by " + ", ".join(f"{kind_words(h.get('kind'))} '{job_subject(h)}'" for h in holders) if holders else ""
    return f"waiting for the {SLOT_WORDS[resource]}{held}, {ahead or 'none'} ahead"


def with_reasons(jobs: list[dict[str, Any]], others: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Return `jobs` with `waits_for` set on each (`wait_reason` against `others`, default `jobs` themselves)."""
    pool = jobs if others is None else others
    return [{**job, "waits_for": wait_reason(job, pool)} for job in jobs]
