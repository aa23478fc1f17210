"""What a training run writes for people and supervisors: metrics.jsonl, status.json, tb/, log.txt.

Nothing is written before `open()` (or the first metrics or status write): lines logged while the
trainer sets up are echoed on stderr and held, so a run refused during set-up leaves its folder as
it was. `open(resume_step)` drops the metrics.jsonl records of steps after `resume_step` (a crashed
attempt logged them; they run again) and hides TensorBoard events after it, so each step is
recorded once. Only the main process (rank 0) writes; other ranks get a `RunLog` with `enabled=False`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from core.fsutil import atomic_write_json, atomic_write_text, open_append
from core.runs import RunFolder
from core.structured import loads_json


class RunLog:
    """Writer of one run folder's metrics, status, TensorBoard scalars and log lines."""

    def __init__(self, run_dir: Path, enabled: bool = True, tensorboard: bool = True) -> None:
        self.run_dir = run_dir
        self.folder = RunFolder(run_dir)
        self.enabled = enabled
        self.tensorboard = tensorboard
        self.status: dict[str, Any] = {}
        self._tb: Any = None
        self._opened = False
        self._held: list[str] = []
        self._purge_step: int | None = None

    def open(self, resume_step: int | None = None) -> None:
        """Start writing the run folder: create it and append the lines held so far to log.txt.

        With `resume_step`, metrics.jsonl keeps only the records of steps up to it (and no partly
        written line), and TensorBoard hides the events of later steps from earlier writers.
        """
        if not self.enabled or self._opened:
            return
        self._opened = True
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            self._drop_metrics_after(resume_step)
            self._purge_step = resume_step + 1
        held, self._held = self._held, []
        if held:
            with open_append(self.folder.log_file) as handle:
                handle.write("".join(line + "\n" for line in held))

    def _drop_metrics_after(self, step: int) -> None:
        path = self.folder.metrics_file
        if not path.is_file():
            return
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines()
        kept = [line for line in lines if (logged := _step_of(line)) is not None and logged <= step]
        if len(kept) == len(lines) and (not text or text.endswith("\n")):
            return  # nothing to drop: the file stays as it is
        atomic_write_text(path, "".join(line + "\n" for line in kept))

    def line(self, message: str) -> None:
        """Append `message` to log.txt with a timestamp (held until `open()`) and echo it on stderr."""
        if not self.enabled:
            return
        stamped = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}"
        if self._opened:
            with open_append(self.folder.log_file) as handle:
                handle.write(stamped + "\n")
        else:
            self._held.append(stamped)
        sys.stderr.write(stamped + "\n")
        sys.stderr.flush()

    def metrics(self, step: int, split: str, values: dict[str, float], tensorboard: bool = True) -> None:
        """Append one record to metrics.jsonl and (unless `tensorboard` is False) the same scalars to
        TensorBoard as `split/name`."""
        if not self.enabled:
            return
        self.open()
        record = {"step": step, "split": split, **{k: float(v) for k, v in values.items()}, "time": time.time()}
        with open_append(self.folder.metrics_file) as handle:
            handle.write(json.dumps(record) + "\n")
        if self.tensorboard and tensorboard:
            writer = self._writer()
            for name, value in values.items():
                writer.add_scalar(f"{split}/{name}", float(value), step)

    def _writer(self) -> Any:
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.folder.tensorboard), purge_step=self._purge_step)
        return self._tb

    def update_status(self, **fields: Any) -> None:
        """Merge `fields` into status.json and rewrite it atomically."""
        self.status.update(fields)
        self.status["updated"] = time.time()
        if self.enabled:
            self.open()
            atomic_write_json(self.folder.status_file, self.status)

    def close(self) -> None:
        """Flush and close TensorBoard."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _step_of(line: str) -> int | None:
    """Return the `step` of one metrics.jsonl line, None for a line that is not a complete record."""
    try:
        record = loads_json(line, "metrics line")
    except ValueError:
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) else None
