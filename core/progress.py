"""Progress: reporting it for long operations, and the one view of it that every reader shows.

Lines go to stderr (stdout stays clean for `--json`). When the environment variable
`LINGUAFORGE_PROGRESS_FILE` names a file (the job runner sets it), the latest state is also
written there as one JSON object — `{"label", "done", "total", "fraction", "eta_s", "metrics"}`
— replaced atomically, so a job record can show progress without parsing logs. A `Progress`
keeps the file it was created for, and a command run in the same process as a journey runs inside
`detached_progress_file()`, so a stage's progress is never written into its journey's file.

`progress_view()` reconciles the progress a job record holds (`done`/`total` from a progress
file, or `step`/`max_steps`) with a run's `status.json`, so the CLI's `jobs list`, the Jobs,
Training and Quickstart tabs all say the same thing. `journey_view()` is the one line of a
multi-stage journey (the quickstarts): finished stages plus the running stage's own fraction,
below 100% until the journey ended, elapsed time, and an ETA only once it means something.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

PROGRESS_FILE_ENV = "LINGUAFORGE_PROGRESS_FILE"


UNFINISHED_CAP = 0.99  # a journey that has not ended never shows 100%
ETA_MIN_FRACTION = 0.05  # below this (or before the first stage ended) an ETA is a guess, not shown
SUCCEEDED = "succeeded"
UNDERWAY = ("queued", "running")


def write_progress_file(state: dict[str, Any], target: str | None = None) -> None:
    """Write `state` atomically to `target`, else to the file named by LINGUAFORGE_PROGRESS_FILE; nothing when neither."""
    target = target or os.environ.get(PROGRESS_FILE_ENV)
    if not target:
        return
    path = Path(target)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, default=str), encoding="utf-8")
    os.replace(tmp, path)


class Progress:
    """Reports `label: done/total (pct) eta` at most every `interval` seconds."""

    def __init__(self, label: str, total: int | None = None, interval: float = 2.0) -> None:
        self.label = label
        self.total = total
        self.interval = interval
        self.done = 0
        self.metrics: dict[str, Any] = {}
        self.target = os.environ.get(PROGRESS_FILE_ENV)  # the file of the process this Progress reports for
        self._start = time.monotonic()
        self._last = 0.0

    def update(self, advance: int = 1, **metrics: Any) -> None:
        """Advance by `advance`, remember `metrics`, and report when the interval has passed."""
        self.done += advance
        self.metrics.update(metrics)
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._report(now)

    def finish(self) -> None:
        """Report the final state."""
        self._report(time.monotonic())

    def state(self) -> dict[str, Any]:
        """Return the current state as the JSON-ready mapping written to the progress file."""
        elapsed = time.monotonic() - self._start
        fraction = min(self.done / self.total, 1.0) if self.total else None
        eta = elapsed / fraction - elapsed if fraction else None
        return {
            "label": self.label,
            "done": self.done,
            "total": self.total,
            "fraction": fraction,
            "eta_s": eta,
            "metrics": self.metrics,
        }

    def _report(self, now: float) -> None:
        state = self.state()
        if state["fraction"] is not None:
            eta = f" eta {state['eta_s']:.0f}s" if state["eta_s"] is not None else ""
            line = f"{self.label}: {self.done}/{self.total} ({state['fraction']:.0%}){eta}"
        else:
            line = f"{self.label}: {self.done} in {now - self._start:.0f}s"
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        write_progress_file(state, self.target)


@contextlib.contextmanager
def detached_progress_file() -> Iterator[None]:
    """Run the body without LINGUAFORGE_PROGRESS_FILE, so a command run in this process (a journey's
    in-process stage) reports to stderr only; a `Progress` made before keeps writing its own file."""
    saved = os.environ.pop(PROGRESS_FILE_ENV, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[PROGRESS_FILE_ENV] = saved


def format_seconds(seconds: float | None) -> str:
    """Return a duration as `1h02m`, `3m05s` or `12s`; an em dash when unknown."""
    if seconds is None:
        return "—"
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


@dataclass(frozen=True)
class ProgressView:
    """Where a job or run stands: done of total, the fraction, ETA, state and latest metrics."""

    done: int | None = None
    total: int | None = None
    fraction: float | None = None
    eta_s: float | None = None
    state: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)

    def text(self, show_state: bool = False) -> str:
        """Return `45% · 90/200 · ETA 1m10s` (with the state after the counts when `show_state`); `—` when unknown."""
        parts = []
        if self.fraction is not None:
            parts.append(f"{self.fraction:.0%}")
        if self.done is not None and self.total:
            parts.append(f"{self.done}/{self.total}")
        elif self.done is not None:
            parts.append(str(self.done))
        if show_state and self.state:
            parts.append(self.state)
        if self.state == "running" and self.eta_s is not None:
            parts.append(f"ETA {format_seconds(self.eta_s)}")
        return " · ".join(parts) or "—"


def progress_view(
    progress: Mapping[str, Any] | None, status: Mapping[str, Any] | None = None, job_status: str | None = None
) -> ProgressView:
    """Return the progress view of a job record's `progress` mapping, a run's `status` and the job's status.

    The run's status.json wins over the (possibly older) job record: done is `step` (status), else
    `step` or `done` (record); total is `max_steps` (status), else `total` or `max_steps` (record).
    The fraction is done/total when both are known, else the record's fraction, else 1.0 for a
    succeeded job. The state is the run's state, else the job's status, else the record's state.
    """
    progress, status = progress or {}, status or {}
    done = _first(status.get("step"), progress.get("step"), progress.get("done"))
    total = _first(status.get("max_steps"), progress.get("total"), progress.get("max_steps"))
    if isinstance(done, (int, float)) and isinstance(total, (int, float)) and total > 0:
        fraction: float | None = min(float(done) / float(total), 1.0)
    else:
        fraction = progress.get("fraction")
    if fraction is None and job_status == "succeeded":
        fraction = 1.0
    return ProgressView(
        done=int(done) if isinstance(done, (int, float)) else None,
        total=int(total) if isinstance(total, (int, float)) else None,
        fraction=float(fraction) if fraction is not None else None,
        eta_s=progress.get("eta_s"),
        state=_first(status.get("state"), job_status, progress.get("state")),
        metrics=dict(progress.get("metrics") or {}),
    )


@dataclass(frozen=True)
class JourneyView:
    """Where a multi-stage journey stands, as one line: overall fraction, the running stage (its number,
    plain title and own fraction), elapsed time and — once meaningful — the ETA."""

    status: str
    fraction: float
    stage_number: int | None = None
    stages: int | None = None
    stage_title: str | None = None
    stage_fraction: float | None = None
    elapsed_s: float | None = None
    eta_s: float | None = None

    def text(self) -> str:
        """Return `running · 42% · stage 6/12: Grow the embeddings (30%) · elapsed 1m20s · ETA 2m05s`."""
        parts = [self.status, f"{self.fraction:.0%}"]
        if self.stage_number is not None:
            stage = f"stage {self.stage_number}/{self.stages or '?'}: {self.stage_title or 'starting'}"
            if self.stage_fraction is not None:
                stage += f" ({self.stage_fraction:.0%})"
            parts.append(stage)
        if self.elapsed_s is not None:
            parts.append(f"elapsed {format_seconds(self.elapsed_s)}")
        if self.status in UNDERWAY:
            parts.append(f"ETA {format_seconds(self.eta_s)}" if self.eta_s is not None else "ETA after the first stages")
        return " · ".join(parts)


def stage_fraction(stage: Mapping[str, Any] | None) -> float | None:
    """Return how far a stage job is (0..1): 1 once it succeeded, its progress fraction, None when unknown."""
    if stage is None:
        return None
    if stage.get("status") == SUCCEEDED:
        return 1.0
    fraction = progress_view(stage.get("progress"), job_status=stage.get("status")).fraction
    return min(max(float(fraction), 0.0), 1.0) if fraction is not None else None


def journey_view(journey: Mapping[str, Any], stage: Mapping[str, Any] | None, at_least: float = 0.0,
                 now: float | None = None) -> JourneyView:
    """Return the view of the journey job record `journey` whose running stage's job record is `stage`.

    The journey's progress (written by its stage runner) holds `done`/`total` stages and, in
    `metrics`, `current_title` (the running stage in plain words). The fraction is (done + the
    stage's own fraction) / total, never below `at_least` (what was shown before), and at most 99%
    until the journey succeeded. The ETA comes from the elapsed time once a stage has finished and
    the fraction is past 5%.
    """
    status = str(journey.get("status"))
    progress = journey.get("progress") or {}
    metrics = progress.get("metrics") or {}
    done, total = int(progress.get("done") or 0), progress.get("total")
    own = stage_fraction(stage) if status in UNDERWAY else None
    if status == SUCCEEDED:
        fraction = 1.0
    else:
        fraction = min((done + (own or 0.0)) / total, 1.0) if total else 0.0
        fraction = min(max(fraction, at_least), UNFINISHED_CAP)
    started = journey.get("started_at")
    elapsed = ((journey.get("finished_at") or now or time.time()) - started) if started else None
    eta = None
    if status in UNDERWAY and elapsed and done >= 1 and fraction >= ETA_MIN_FRACTION:
        eta = elapsed * (1 - fraction) / fraction
    running = status in UNDERWAY and metrics.get("current_title") is not None
    return JourneyView(
        status=status, fraction=fraction,
        stage_number=min(done + 1, total or done + 1) if running else None, stages=total,
        stage_title=metrics.get("current_title") if running else None, stage_fraction=own if running else None,
        elapsed_s=elapsed, eta_s=eta)
