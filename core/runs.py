"""The run folder `workspace/runs/<run>/`: its layout, the one reader of what a run writes, and
the re-exported progress view of a job or run.

Layout: `config.yaml` (the run config as trained), `status.json` (state, step,
max_steps, last_checkpoint, …, replaced atomically), `metrics.jsonl` (one JSON object per logged
step), `STOP` (touch it to ask the trainer to save and exit), `checkpoints/` (step and best
checkpoints, `eval.json`), `eval_set.json` (the fixed evaluation set), `tb/` (TensorBoard), `log.txt`, and a quickstart's `report.json` /
`report.md`. Everything that names one of these files goes through `RunFolder`, and a run's folder
is found from its run config by `run_folder_of_config` alone (the trainer and the job runner both),
so a job reads progress from, and writes STOP into, the folder its trainer writes.
`read_evaluations` is the one reader of an `eval.json`.

The progress view of a job or run (`progress_view`, `format_seconds`) lives in `core.progress`;
it is re-exported here for the readers that take it with the run folder.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol

from core.config import Settings
from core.fsutil import last_json_line, read_json, read_jsonl
from core.progress import ProgressView, format_seconds, progress_view  # re-exported: the one progress view lives in core.progress

RUNS_DIR = "runs"
EVAL_FILE = "eval.json"
EVAL_AUDIO_DIR = "eval_audio"
BEST_FILE = "best.pt"
STEP_FILE = re.compile(r"step_(\d+)\.pt\Z")
ASIDE_STAMP = "%Y%m%d-%H%M%S"


class _RunPath:
    """A file or folder at a fixed place in the run folder: a read-only `Path` attribute of `RunFolder`."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, run: "RunFolder | None", owner: type) -> Path:
        return run.path.joinpath(*self.parts)  # type: ignore[union-attr]


@dataclass(frozen=True)
class RunFolder:
    """One run folder `runs/<run>/`: the path of each file a run writes, and their readers."""

    path: Path

    #: the run config the run trains with
    config = _RunPath("config.yaml")
    #: state, step, max_steps, last_checkpoint, … (replaced atomically)
    status_file = _RunPath("status.json")
    #: one JSON object per logged step
    metrics_file = _RunPath("metrics.jsonl")
    #: touch it to ask the trainer to save and exit
    stop_file = _RunPath("STOP")
    #: step checkpoints, `best.pt` and `eval.json`
    checkpoints = _RunPath("checkpoints")
    #: periodic and `eval tts` results by checkpoint file name
    eval_file = _RunPath("checkpoints", EVAL_FILE)
    best_checkpoint = _RunPath("checkpoints", BEST_FILE)
    tensorboard = _RunPath("tb")
    log_file = _RunPath("log.txt")
    #: the run's fixed evaluation set, chosen at its first evaluation (core.training.eval_set)
    eval_set_file = _RunPath("eval_set.json")
    #: a quickstart's report
    report_json = _RunPath("report.json")
    report_markdown = _RunPath("report.md")

    @property
    def name(self) -> str:
        """Return the run name (the folder's name)."""
        return self.path.name

    def step_checkpoint(self, step: int) -> Path:
        """Return the path of the checkpoint saved at `step` (`checkpoints/step_0000012.pt`)."""
        return self.checkpoints / f"step_{step:07d}.pt"

    def step_checkpoints(self) -> list[Path]:
        """Return the run's step checkpoints, oldest first."""
        if not self.checkpoints.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.checkpoints.iterdir() if (m := STEP_FILE.match(p.name))]
        return [p for _, p in sorted(found)]

    def saved_checkpoints(self) -> list[Path]:
        """Return every checkpoint the trainer saved here: the step checkpoints, then `best.pt` if present."""
        best = [self.best_checkpoint] if self.best_checkpoint.is_file() else []
        return self.step_checkpoints() + best

    def evaluations(self) -> dict[str, dict[str, Any]]:
        """Return the run's eval.json entries by checkpoint file name ({} when none)."""
        return read_evaluations(self.eval_file)

    def move_aside(self) -> "RunFolder":
        """Rename this folder to `<run>.old-<YYYYmmdd-HHMMSS>` beside it (`-2`, `-3`… when taken); return
        the folder it now is. Nothing inside is changed."""
        stem = f"{self.name}.old-{time.strftime(ASIDE_STAMP)}"
        target, n = self.path.with_name(stem), 1
        while target.exists():
            n += 1
            target = self.path.with_name(f"{stem}-{n}")
        os.rename(self.path, target)
        return RunFolder(target)

    def status(self) -> dict[str, Any]:
        """Return the run's status.json ({} before the run has written one)."""
        return read_json(self.status_file) or {}

    def metrics(self, split: str | None = None) -> list[dict[str, Any]]:
        """Return the records of metrics.jsonl in order, only those of `split` when given."""
        rows = read_jsonl(self.metrics_file)
        return rows if split is None else [row for row in rows if row.get("split") == split]

    def last_metrics(self) -> dict[str, Any]:
        """Return the last record of metrics.jsonl ({} when none), reading only the file's tail."""
        return last_json_line(self.metrics_file, max_bytes=64 * 1024) or {}

    def is_running(self) -> bool:
        """Return True when status.json says the run is running."""
        return self.status().get("state") == "running"


class NamedRun(Protocol):
    """What names a run folder: a run config's `name` (`core.training.run_config.RunConfig`)."""

    name: str


def runs_root(settings: Settings) -> Path:
    """Return the workspace's `runs/` folder."""
    return settings.workspace / RUNS_DIR


def run_folder(settings: Settings, name: str) -> RunFolder:
    """Return the run folder of run `name` in the workspace (it need not exist)."""
    return RunFolder(runs_root(settings) / str(name))


def run_folder_of_config(settings: Settings, config: NamedRun) -> RunFolder:
    """Return the folder a run config trains into: `runs/<name>`, its `name` (the run config's default
    when the file has none). The trainer and the job runner both find the folder here."""
    return run_folder(settings, config.name)


def eval_file_beside(checkpoint: Path) -> Path:
    """Return the eval.json that holds the evaluations of `checkpoint` (in the checkpoint's folder)."""
    return Path(checkpoint).parent / EVAL_FILE


def eval_audio_beside(checkpoint: Path) -> Path:
    """Return the folder of the clips synthesized when `checkpoint` was evaluated (`eval_audio/<stem>/` beside it)."""
    checkpoint = Path(checkpoint)
    return checkpoint.parent / EVAL_AUDIO_DIR / checkpoint.stem


def read_evaluations(path: Path) -> dict[str, dict[str, Any]]:
    """Return the entries of the eval.json at `path` by checkpoint file name.

    A missing, unreadable or malformed file, and entries that are not objects, read as none.
    """
    entries = (read_json(Path(path)) or {}).get("checkpoints")
    if not isinstance(entries, dict):
        return {}
    return {str(name): entry for name, entry in entries.items() if isinstance(entry, dict)}


def run_folder_of_checkpoint(checkpoint: Path) -> RunFolder | None:
    """Return the run folder a checkpoint in `runs/<run>/checkpoints/` belongs to, else None."""
    checkpoint = Path(checkpoint)
    if checkpoint.parent.name == "checkpoints" and checkpoint.parent.parent.parent.name == RUNS_DIR:
        return RunFolder(checkpoint.parent.parent)
    return None


