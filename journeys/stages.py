"""Running a quickstart journey's stages: each one CLI command, as a job on the queue or inline.

Queued (the default), each stage is submitted through `jobs.runner` as a job of its command's kind and
waited for, so it shows in the Jobs tab with its log; the journey either starts a worker in this
process or relies on one that is already consuming (the dashboard's, or `python -m core worker`).
Inline, the same argv (built and checked by the job catalogue the entry point handed in) runs in
this process through that catalogue: no job records, no per-stage process start-up.

While the stages run, the runner writes the journey's progress every second (`core.progress.JourneyClock`):
each stage weighs the seconds it is expected to take (`expected_seconds`: this machine's last run of the
same stages, else the preset's measured figures), the running stage counts its own reported fraction, and while
its job waits in the queue the progress says for what (`stage_waits_for`, `jobs.waiting`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from core.config import Settings
from core.errors import InputError, LinguaForgeError
from core.fsutil import read_json
from core.progress import (
    PROGRESS_FILE_ENV, JourneyClock, StagePlan, detached_progress_file, format_seconds, plan_stages, stage_fraction,
    write_progress_file,
)
from core.runs import RUNS_DIR
from jobs.kinds import CommandOutcome, JobCatalogue
from jobs.states import STARTED, SUCCEEDED

MODES = ("queue", "inline")
QUEUE_PICKUP_S = 300.0
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TICK_S = 1.0  # how often the journey's progress is written while a stage runs
LAST_RUN = "this machine's last run of these stages"
PRESET_FIGURES = "the preset's measured figures"


STAGE_TITLES = {  # stage name (or its first dotted parts) → what the dashboard calls it
    "sample": "Make the English and Amharic sample clips",
    "codec": "Train the speech codec",
    "tokenizer.base": "Train the English tokenizer",
    "train.base": "Train the English base model",
    "tokenizer.extend": "Extend the tokenizer with Amharic",
    "embeddings.extend": "Grow the embeddings for the new tokens",
    "preprocess.am": "Prepare the Amharic training features",
    "validate.start": "Measure the starting model",
    "validate.en.start": "Measure English on the starting model",
    "validate.en.end": "Measure English on the final model",
    "train.finetune": "Fine-tune on Amharic, English rows frozen",
    "prune": "Prune the final checkpoint",
    "synthesize.am": "Speak a held-out Amharic sentence",
    "synthesize.en": "Speak a held-out English sentence",
    "eval.tts": "Evaluate the Amharic and English speech",
    "eval.en.base": "Evaluate the English base model's speech",
    "tokenizer.sweep": "Compare tokenizer sizes",
    "tokenizer.train": "Train a tokenizer",
    "train": "Train the model",
    "generate": "Generate sample text",
}


def stage_title(name: str) -> str:
    """Return the plain title of stage `name`: its own entry in STAGE_TITLES, else that of its longest
    dotted prefix with the rest in brackets ("synthesize.am.1" → "Speak a held-out Amharic sentence (1)"),
    else the name itself."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        title = STAGE_TITLES.get(".".join(parts[:cut]))
        if title is not None:
            rest = ".".join(parts[cut:])
            return f"{title} ({rest})" if rest else title
    return name


class StageFailed(LinguaForgeError):
    """A stage's command failed; the message names the stage, its job and how to read its log."""

    exit_code = 1


def cpu_seconds() -> float:
    """Return the CPU seconds (user + system) used so far by this process and its finished, waited-for children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass
class StageRecord:
    """One finished stage: its name, job kind, wall seconds, CPU seconds (None when a worker outside this
    process ran it), job id (None inline) and JSON result."""

    name: str
    kind: str
    seconds: float
    cpu_seconds: float | None
    job_id: str | None
    result: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Return the report's stage entry: name, kind, seconds, cpu_seconds, job_id."""
        cpu = None if self.cpu_seconds is None else round(self.cpu_seconds, 2)
        return {"name": self.name, "kind": self.kind, "seconds": round(self.seconds, 2), "cpu_seconds": cpu,
                "job_id": self.job_id}


class StageRunner:
    """Runs stages one after another and remembers them; use as a context manager.

    `mode` is `queue` or `inline`; `embedded_worker` (queue mode) starts a job worker in this
    process for the journey's lifetime. `timeout_s` bounds each stage. `catalogue` (from the entry
    point) checks each stage's parameters and runs inline stages. `plan` names the stages to come with
    their expected seconds (`expect` replaces it once later stages are known). `title` (default
    `stage_title`) turns a stage name into the plain words the dashboard shows for it; the journey's
    progress carries it as `current_title`, the run name `journey`, and every stage job so far as
    `stage_jobs` (job id → title), so the Jobs tab names each stage job by its run and stage.
    Raises InputError for an unknown mode.
    """

    def __init__(self, settings: Settings, mode: str = "queue", embedded_worker: bool = True,
                 timeout_s: float = 3600.0, plan: StagePlan | None = None, *, catalogue: JobCatalogue,
                 title: Callable[[str], str] = stage_title, journey: str | None = None) -> None:
        if mode not in MODES:
            raise InputError(f"stage mode {mode!r}: choose one of {', '.join(MODES)}.")
        self.settings = settings
        self.catalogue = catalogue
        self.mode = mode
        self.embedded_worker = embedded_worker and mode == "queue"
        self.timeout_s = timeout_s
        self.records: list[StageRecord] = []
        self.title = title
        self.clock = JourneyClock(plan or plan_stages([], None, ""))
        self.metrics: dict[str, Any] = {"journey": journey, "stage_jobs": {}}
        self.target = os.environ.get(PROGRESS_FILE_ENV)  # the journey's own progress file (stages never write it)
        self._runner: Any = None
        self._worker: Any = None
        self._current: str | None = None
        self._stage_start = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> "StageRunner":
        if self.mode == "queue":
            from jobs.runner import JobRunner, start_worker

            self._runner = JobRunner(self.settings, catalogue=self.catalogue)
            if self.embedded_worker:
                saved = {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS}
                self._worker = start_worker(self.settings)
                for sig, handler in saved.items():  # the consumer's handlers would swallow Ctrl-C and SIGTERM
                    if handler is not None and threading.current_thread() is threading.main_thread():
                        signal.signal(sig, handler)
        self._ticker = threading.Thread(target=self._tick_until_stopped, name="journey-progress", daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        if self._current is not None and self._runner is not None:
            with contextlib.suppress(LinguaForgeError):
                self._runner.cancel(self._current)
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def expect(self, plan: StagePlan) -> None:
        """Weigh the stages by `plan` from now on (the journey learnt which stages come)."""
        with self._lock:
            self.clock.replan(plan)

    def run(self, name: str, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        """Run stage `name` as command `kind` with CLI-named `params`; return the command's JSON result.

        Raises InputError when the parameters are invalid and StageFailed when the command fails
        or does not finish within the stage timeout.
        """
        start, cpu_start = time.monotonic(), cpu_seconds()
        with self._lock:
            self.clock.current, self._stage_start = name, start
            self.metrics.update(current=name, current_title=self.title(name), current_job=None)
        self._report(announce=True)
        if self.mode == "queue":
            job_id, result = self._queued(name, kind, params)
        else:
            job_id, result = None, self._inline(name, kind, params)
        # CPU time is seen for stages run here or by the worker inside this process (its job processes are our children)
        cpu = cpu_seconds() - cpu_start if self.mode == "inline" or self.embedded_worker else None
        record = StageRecord(name, kind, time.monotonic() - start, cpu, job_id, result)
        self.records.append(record)
        with self._lock:
            self.clock.ended[name] = record.seconds
            self.clock.current = None
            self.metrics.update(current=None, current_title=None, current_job=None)
        self._report()
        return result

    def _tick_until_stopped(self) -> None:
        while not self._stop.wait(TICK_S):
            self._report()

    def _report(self, announce: bool = False) -> None:
        """Write the journey's progress (and, when a stage starts, one line to stderr)."""
        with self._lock:
            job_id = self.metrics.get("current_job")
            own, waiting = None, None
            if job_id and self._runner is not None:
                with contextlib.suppress(LinguaForgeError):
                    stage_job = self._runner.get_job(job_id)
                    own, waiting = stage_fraction(stage_job), stage_job.get("waits_for")
            in_stage = time.monotonic() - self._stage_start if self.clock.current else 0.0
            state = self.clock.state(own, in_stage)
            stages = len(self.clock.plan.names) or None
            number = len(self.clock.ended) + 1 if self.clock.current else None
            metrics = {**self.metrics, "stage": number, "stages": stages, "stage_waits_for": waiting, **{k: state[k] for k in (
                "stage_fraction", "eta_sure", "eta_note", "eta_low_s", "eta_high_s", "speed", "expected_s", "timings")}}
            write_progress_file({"label": "quickstart", "fraction": state["fraction"], "eta_s": state["eta_s"],
                                 "metrics": metrics}, self.target)
        if announce:
            eta = format_seconds(state["eta_s"]) if state["eta_sure"] else f"about {format_seconds(state['eta_s'])}"
            sys.stderr.write(f"quickstart: {state['fraction']:.0%} · stage {number}/{stages or '?'}: "
                             f"{self.metrics['current_title']} · ETA {eta}\n")
            sys.stderr.flush()

    def _queued(self, name: str, kind: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        job_id = self._runner.submit(kind, params)
        self._current = job_id
        with self._lock:
            self.metrics["stage_jobs"][job_id] = self.title(name)
            self.metrics["current_job"] = job_id  # its own progress counts in the journey's
        try:
            job = self._runner.wait(job_id, QUEUE_PICKUP_S, statuses=STARTED)
        except TimeoutError:
            raise StageFailed(
                f"stage {name}: job {job_id} ({kind}) was not picked up within {QUEUE_PICKUP_S:.0f} s. "
                "Start a worker (`python -m core worker`) or run the quickstart without --external-worker."
            ) from None
        try:
            job = self._runner.wait(job_id, self.timeout_s)
        except TimeoutError:
            raise StageFailed(f"stage {name}: job {job_id} ({kind}) still {job['status']} after "
                              f"{self.timeout_s:.0f} s; it was cancelled. Raise stage_timeout_s in the preset.") from None
        self._current = None
        if job["status"] != SUCCEEDED:
            raise StageFailed(f"stage {name}: job {job_id} ({kind}) {job['status']}: {job.get('error') or 'no error text'}. "
                              f"Full log: `python -m core jobs logs {job_id}`.")
        return job_id, job.get("artifacts") or {}

    def _inline(self, name: str, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        import torch  # a stage that trains may set this process's threads (run config `cpu_threads`): restored after it

        from core.torch_threads import torch_threads

        argv = self.catalogue.build_argv(kind, params)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), detached_progress_file(), \
                torch_threads(torch.get_num_threads()):
            outcome = _run_quietly(self.catalogue, argv)
        result = json.loads(json.dumps(outcome.data, ensure_ascii=False, default=str))
        if outcome.exit_code != 0:
            detail = result.get("error") or (outcome.text.strip().splitlines() or ["no error text"])[-1]
            raise StageFailed(f"stage {name} ({kind}) failed with exit code {outcome.exit_code}: {detail}.")
        return result


def _run_quietly(catalogue: JobCatalogue, argv: list[str]) -> CommandOutcome:
    """Run `argv` through `catalogue` like `python -m core` would: a crash or Ctrl-C is an exit code, not an exception."""
    try:
        return catalogue.run(argv)
    except KeyboardInterrupt:
        return CommandOutcome(130, {}, "interrupted")
    except Exception as exc:  # a stage's edge, as the CLI's: its outcome, never a traceback in the journey
        return CommandOutcome(1, {"ok": False, "error": f"internal error: {exc}"}, f"internal error: {exc}")


def expected_seconds(settings: Settings, journey: str, preset: Mapping[str, Any], fingerprint: str,
                     names: list[str]) -> StagePlan:
    """Return the plan of stages `names` of a `journey` quickstart run with `preset`: each stage's seconds from
    this machine's last run of the same preset (`fingerprint`) with the same stages (the newest runs/*/report.json),
    else from the preset's `stage_seconds` (measured on the machine named in docs/benchmarks.md)."""
    newest: tuple[float, dict[str, float]] | None = None
    for path in (settings.workspace / RUNS_DIR).glob("*/report.json"):
        report = read_json(path) or {}
        if report.get("journey") != journey or report.get("preset_sha256") != fingerprint:
            continue
        seconds = {s.get("name"): s.get("seconds") for s in report.get("stages") or [] if isinstance(s, dict)}
        if set(names) <= set(seconds) and (newest is None or path.stat().st_mtime > newest[0]):
            newest = (path.stat().st_mtime, seconds)
    if newest is not None:
        return plan_stages(names, newest[1], LAST_RUN)
    return plan_stages(names, preset.get("stage_seconds") or {}, PRESET_FIGURES)
