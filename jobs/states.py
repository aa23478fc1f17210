"""The one table of job states and the transitions between them.

Every job record has one of six states. A job is created `queued`; every later change of state is
one of the transitions in TRANSITIONS, made by the `JobStore` method of the same name (the one
compare-and-set in `JobStore._move`, as Huey's `execute` is its one path from enqueued to complete):

    queued ──claim──▶ running ──finish──▶ succeeded | failed | cancelled
      │                  └──interrupt──▶ interrupted (worker gone or stopped; `resume: auto` jobs requeue)
      ├──reject──▶ failed (a damaged record is never run)
      └──cancel──▶ cancelled ◀──cancel── interrupted
    interrupted | failed | cancelled ──resume──▶ queued;  interrupted ──auto_resume──▶ queued

The groups below (final, cancellable, resumable, …) are what the runner, the CLI and the dashboard test
a state against; nothing else spells states out.
"""

from __future__ import annotations

from dataclasses import dataclass

QUEUED = "queued"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
INTERRUPTED = "interrupted"

STATES = (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED, INTERRUPTED)
INITIAL = QUEUED
FINAL = (SUCCEEDED, FAILED, CANCELLED)  # nothing changes them but an explicit resume
STARTED = (RUNNING, *FINAL, INTERRUPTED)  # a worker picked the job up (or it ended before one could)
IN_PROGRESS = (QUEUED, RUNNING)  # a worker will run the job or runs it now


@dataclass(frozen=True)
class Transition:
    """One allowed change of state: the states it leaves from and the ones it may end in."""

    sources: tuple[str, ...]
    targets: tuple[str, ...]


TRANSITIONS: dict[str, Transition] = {
    "claim": Transition((QUEUED,), (RUNNING,)),
    "reject": Transition((QUEUED,), (FAILED,)),
    "finish": Transition((RUNNING,), FINAL),
    "interrupt": Transition((RUNNING,), (INTERRUPTED,)),
    "cancel": Transition((QUEUED, INTERRUPTED), (CANCELLED,)),
    "resume": Transition((INTERRUPTED, FAILED, CANCELLED), (QUEUED,)),
    "auto_resume": Transition((INTERRUPTED,), (QUEUED,)),
}

CANCELLABLE = (*TRANSITIONS["cancel"].sources, RUNNING)  # a running job is cancelled through its worker
RESUMABLE = TRANSITIONS["resume"].sources


def transition(name: str, target: str) -> Transition:
    """Return the transition `name` after checking it may end in `target`.

    Raises ValueError for an unknown transition or a target it does not reach (a programming error).
    """
    found = TRANSITIONS.get(name)
    if found is None or target not in found.targets:
        raise ValueError(f"no job transition {name!r} to {target!r}")
    return found
