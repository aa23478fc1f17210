"""Progress: reporting it for long operations, and the one view of it that every reader shows.

Lines go to stderr (stdout stays clean for `--json`). When the environment variable
`LINGUAFORGE_PROGRESS_FILE` names a file (the job runner sets it), the latest state is also
written there as one JSON object — `{"label", "done", "total", "fraction", "eta_s", "metrics"}`
— replaced atomically, so a job record can show progress without parsing logs. A `Progress`
keeps the file it was created for, and a command run in the same process as a journey runs inside
`detached_progress_file()`, so a stage's progress is never written into its journey's file.

`progress_view()` reconciles the progress a job record holds (`done`/`total` from a progress
file, or `step`/`max_steps`) with a run's `status.json`, so the CLI's `jobs list`, the Jobs,
Training and Quickstart tabs all say the same thing. A multi-stage journey (the quickstarts) weighs
each stage by its measured duration (`StagePlan`, `JourneyClock`: its stage runner writes the
overall fraction, never back, and an ETA measured on this machine as the run goes — the running stage's own
speed, this run's speed over every second so far — that never freezes while a stage works and is widened, with
the reason, when it is unsure); `journey_view()` is the one line every reader shows of it.
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

from core.fsutil import replace_bytes

PROGRESS_FILE_ENV = "LINGUAFORGE_PROGRESS_FILE"


UNFINISHED_CAP = 0.99  # a journey that has not ended never shows 100%
SUCCEEDED = "succeeded"
UNDERWAY = ("queued", "running")


def write_progress_file(state: dict[str, Any], target: str | None = None) -> None:
    """Write `state` atomically to `target`, else to the file named by LINGUAFORGE_PROGRESS_FILE; nothing when neither."""
    target = target or os.environ.get(PROGRESS_FILE_ENV)
    if not target:
        return
    replace_bytes(Path(target), json.dumps(state, default=str).encode("utf-8"))


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


UNSURE_STAGES = 2  # before this many stages ended (or the first tenth of the work), an ETA is a guess
UNSURE_FRACTION = 0.10
TIME_CAP = 0.9  # a stage's time alone never shows it more than 90% done: only its end (or its own report) does
DEFAULT_STAGE_S = 20.0  # a stage without a measured figure, when no other stage has one either
SPEED_BOUNDS = (0.2, 5.0)  # this run's seconds per measured second, as far as it is believed
SLOWER_SHOWN = 1.3  # from this factor on, the line says the machine runs slower than the measured figures
GUESSED = "no measured figures"
OWN_MIN = 0.02  # a stage's own report from this share on measures its speed
WIDEN = 1.5  # an unsure ETA is shown from ETA/WIDEN to ETA×WIDEN
WIDEN_OVERDUE = 3.0  # … and wider while a stage outlives its estimate or wraps up
OVERDUE = "this stage runs longer than measured"


@dataclass(frozen=True)
class StagePlan:
    """The stages a journey runs, in order, with the wall seconds each is expected to take, and where those
    figures come from (`source`: this machine's last run, the preset's measured figures, or GUESSED)."""

    names: tuple[str, ...]
    seconds: tuple[float, ...]
    source: str = GUESSED

    @property
    def measured(self) -> bool:
        """Whether the expected seconds were measured (a run of the same stages), not guessed."""
        return self.source != GUESSED

    def expected(self, name: str) -> float:
        """Return the expected seconds of stage `name` (a stage the plan does not name: the median stage)."""
        if name in self.names:
            return self.seconds[self.names.index(name)]
        ordered = sorted(self.seconds)
        return ordered[len(ordered) // 2] if ordered else DEFAULT_STAGE_S


def plan_stages(names: list[str] | tuple[str, ...], measured: Mapping[str, float] | None, source: str) -> StagePlan:
    """Return the plan of stages `names` with the seconds in `measured` (name → seconds; from `source`).

    A stage without a figure gets the median of the others (DEFAULT_STAGE_S when none has one), and the
    plan then counts as GUESSED: its ETA is said to be unsure until this run has measured enough.
    """
    measured = {k: float(v) for k, v in (measured or {}).items() if isinstance(v, (int, float)) and v > 0}
    known = sorted(measured[name] for name in names if name in measured)
    fallback = known[len(known) // 2] if known else DEFAULT_STAGE_S
    complete = bool(names) and all(name in measured for name in names)
    return StagePlan(tuple(names), tuple(measured.get(name, fallback) for name in names),
                     source if complete else GUESSED)


class JourneyClock:
    """How far a journey of `plan`'s stages is, and when it ends, from the stages that ended (their seconds) and
    the running stage's own fraction and time: each stage weighs what it is expected to take, so the line moves
    with the time the work takes; it never goes back and stays below 100% until the journey ended.

    Within a stage the fraction is the larger of the stage's own report and its time over its expected time (at
    most TIME_CAP). The ETA is measured on this machine as the run goes: the running stage's rest from its own
    speed (its seconds per share since its first report, so its start-up does not count), else from its
    expected seconds at this run's speed; the later stages at this run's speed over every second measured so far,
    the running stage's included. A stage that outlives its estimate without reporting is taken as TIME_CAP
    done, and one that reported 100% but still works (saving, exiting) counts its wrap-up the same way, so the
    ETA grows with them instead of freezing. The ETA is unsure (`eta_note` says why, `eta_low_s`..`eta_high_s` widen it) while the plan was
    guessed, before UNSURE_STAGES stages and UNSURE_FRACTION of the work are done, or while a stage is overdue.
    """

    def __init__(self, plan: StagePlan) -> None:
        self.plan = plan
        self.ended: dict[str, float] = {}  # stage → the seconds it took
        self.current: str | None = None
        self.shown = 0.0
        self._first_report: tuple[str, float, float] | None = None  # (stage, its seconds, its own fraction) then
        self._full_at: tuple[str, float] | None = None  # (stage, its seconds) when it first reported 100%

    def replan(self, plan: StagePlan) -> None:
        """Continue with `plan` (a journey that knows its later stages only once earlier ones ended)."""
        self.plan = plan

    def speed(self, stage_s: float = 0.0, stage_expected_s: float = 0.0) -> float:
        """Return this run's seconds per expected second over the stages that ended plus `stage_s` seconds of the
        running stage worth `stage_expected_s` expected seconds (1.0 before anything was measured), within
        SPEED_BOUNDS."""
        seconds = sum(self.ended.values()) + stage_s
        expected = sum(self.plan.expected(name) for name in self.ended) + stage_expected_s
        if expected <= 0:
            return 1.0
        return min(max(seconds / expected, SPEED_BOUNDS[0]), SPEED_BOUNDS[1])

    def _seconds_per_share(self, own: float, in_stage_s: float) -> float | None:
        """Return the running stage's seconds per unit of its own fraction, measured since its first report (so its
        start-up does not count), or None until it has moved on from that report."""
        if self._first_report is None or self._first_report[0] != self.current:
            self._first_report = (str(self.current), in_stage_s, own)
            return None
        _, since, then = self._first_report
        return (in_stage_s - since) / (own - then) if own > then and in_stage_s > since else None

    def _stage_rest(self, own: float | None, in_stage_s: float, expected: float) -> tuple[float, float, str | None]:
        """Return the running stage's seconds left, this run's speed with the stage counted, and why the stage's
        rest is unsure (None when it is not)."""
        speed = self.speed()
        if own is not None and own >= 1.0:  # it reported its end and still works (saving, exiting): wrap-up time
            if self._full_at is None or self._full_at[0] != self.current:
                self._full_at = (str(self.current), in_stage_s)
            wrap_up = in_stage_s - self._full_at[1]
            return wrap_up * (1.0 - TIME_CAP) / TIME_CAP, self.speed(in_stage_s, expected), "finishing the stage"
        per_share = self._seconds_per_share(own, in_stage_s) if own is not None and own > 0 else None
        if per_share is not None and own is not None:  # the stage's own measured speed
            return per_share * (1.0 - own), self.speed(in_stage_s, own * expected), None
        if in_stage_s >= expected * speed * TIME_CAP:  # past its estimate, reporting nothing new: say 90% done
            return in_stage_s * (1.0 - TIME_CAP) / TIME_CAP, self.speed(in_stage_s, TIME_CAP * expected), OVERDUE
        return expected * speed - in_stage_s, speed, None

    def state(self, own: float | None = None, in_stage_s: float = 0.0) -> dict[str, Any]:
        """Return fraction, eta_s (with eta_sure, eta_note, eta_low_s, eta_high_s), speed and the running stage's
        fraction while the stage `current` has run `in_stage_s` seconds and reports `own` (0..1, None when it
        reports nothing)."""
        unplanned = {n for n in [*self.ended, self.current] if n is not None and n not in self.plan.names}
        total = sum(self.plan.seconds) + sum(self.plan.expected(name) for name in unplanned)
        done = sum(self.plan.expected(name) for name in self.ended)
        speed, stage, stage_left, stage_note = self.speed(), None, 0.0, None
        if self.current is not None:
            expected = self.plan.expected(self.current)
            by_time = min(in_stage_s / (expected * speed), TIME_CAP) if expected > 0 else 0.0
            stage = min(max(own or 0.0, by_time), 1.0)
            stage_left, speed, stage_note = self._stage_rest(own, in_stage_s, expected)
            done += stage * expected
        fraction = min(done / total, UNFINISHED_CAP) if total > 0 else 0.0
        self.shown = max(self.shown, fraction)
        later = sum(self.plan.seconds) - sum(self.plan.expected(n) for n in [*self.ended, self.current]
                                             if n in self.plan.names)
        eta = max(stage_left, 0.0) + max(later, 0.0) * speed
        note = (GUESSED if not self.plan.measured else stage_note if stage_note
                else "a guess until more stages end" if len(self.ended) < UNSURE_STAGES or self.shown < UNSURE_FRACTION
                else None)
        widen = WIDEN_OVERDUE if stage_note else WIDEN
        return {"fraction": self.shown, "eta_s": eta, "eta_sure": note is None, "eta_note": note,
                "eta_low_s": eta / widen if note else eta, "eta_high_s": eta * widen if note else eta,
                "speed": round(speed, 3), "stage_fraction": stage, "expected_s": round(total * speed, 1),
                "timings": self.plan.source}


@dataclass(frozen=True)
class JourneyView:
    """Where a multi-stage journey stands, as one line: overall fraction, the running stage (its number,
    plain title and own fraction), elapsed time, the ETA and whether it is still a guess, and how much
    slower than the measured figures this run goes."""

    status: str
    fraction: float
    stage_number: int | None = None
    stages: int | None = None
    stage_title: str | None = None
    stage_fraction: float | None = None
    elapsed_s: float | None = None
    eta_s: float | None = None
    eta_sure: bool = False
    speed: float | None = None
    eta_note: str | None = None
    eta_low_s: float | None = None
    eta_high_s: float | None = None
    stage_waits_for: str | None = None

    def text(self) -> str:
        """Return `running · 42% · stage 6/12: Grow the embeddings (30%) · elapsed 1m20s · ETA 2m05s`, the ETA as
        `about 2m05s (1m23s to 3m07s: a guess until more stages end)` while unsure (its range and why), what the
        stage's job waits for while it is queued ("…, its job waiting for the device slot held by training 'x', none
        ahead"), and
        `· 1.6× slower than measured` when this run is that much slower than the figures its stages are weighed by."""
        parts = [self.status, f"{self.fraction:.0%}"]
        if self.stage_number is not None:
            stage = f"stage {self.stage_number}/{self.stages or '?'}: {self.stage_title or 'starting'}"
            if self.stage_fraction is not None:
                stage += f" ({self.stage_fraction:.0%})"
            if self.stage_waits_for:
                stage += f", its job {self.stage_waits_for}"
            parts.append(stage)
        if self.elapsed_s is not None:
            parts.append(f"elapsed {format_seconds(self.elapsed_s)}")
        if self.status in UNDERWAY:
            if self.eta_s is None:
                parts.append("ETA once the first stage started")
            elif self.eta_sure:
                parts.append(f"ETA {format_seconds(self.eta_s)}")
            else:
                span = (f"{format_seconds(self.eta_low_s)} to {format_seconds(self.eta_high_s)}: "
                        if self.eta_low_s is not None and self.eta_high_s is not None else "")
                parts.append(f"ETA about {format_seconds(self.eta_s)} ({span}{self.eta_note or 'a guess until more stages end'})")
            if self.speed is not None and self.speed >= SLOWER_SHOWN:
                parts.append(f"{self.speed:.1f}× slower than measured (a busy or slower machine)")
        return " · ".join(parts)


def stage_fraction(stage: Mapping[str, Any] | None) -> float | None:
    """Return how far a stage job is (0..1): 1 once it succeeded, its progress fraction, None when unknown."""
    if stage is None:
        return None
    if stage.get("status") == SUCCEEDED:
        return 1.0
    fraction = progress_view(stage.get("progress"), job_status=stage.get("status")).fraction
    return min(max(float(fraction), 0.0), 1.0) if fraction is not None else None


def journey_view(journey: Mapping[str, Any], now: float | None = None) -> JourneyView:
    """Return the view of the journey job record `journey` from the progress its stage runner writes
    (`JourneyClock.state` plus `stage`, `stages` and `current_title` in `metrics`): 100% once it
    succeeded, else the fraction written (never back, below 100%)."""
    status = str(journey.get("status"))
    progress = journey.get("progress") or {}
    metrics = progress.get("metrics") or {}
    fraction = 1.0 if status == SUCCEEDED else min(float(progress.get("fraction") or 0.0), UNFINISHED_CAP)
    started = journey.get("started_at")
    elapsed = ((journey.get("finished_at") or now or time.time()) - started) if started else None
    running = status in UNDERWAY and metrics.get("current_title") is not None
    return JourneyView(
        status=status, fraction=fraction,
        stage_number=metrics.get("stage") if running else None, stages=metrics.get("stages"),
        stage_title=metrics.get("current_title") if running else None,
        stage_fraction=metrics.get("stage_fraction") if running else None, elapsed_s=elapsed,
        eta_s=progress.get("eta_s") if status in UNDERWAY else None, eta_sure=bool(metrics.get("eta_sure")),
        speed=metrics.get("speed"), eta_note=metrics.get("eta_note"), eta_low_s=metrics.get("eta_low_s"),
        eta_high_s=metrics.get("eta_high_s"), stage_waits_for=metrics.get("stage_waits_for") if running else None)
