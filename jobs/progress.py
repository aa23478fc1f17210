"""Job progress: from the per-job progress file, or for training from the run folder.

Training runs report through their run folder (`core.runs.RunFolder`: status.json for step,
max_steps and state, the last metrics.jsonl line for the latest metrics); other commands write
the LINGUAFORGE_PROGRESS_FILE that core.progress maintains.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from core.fsutil import read_json
from core.runs import RunFolder


class TrainProgress:
    """Follows one training run folder and computes fraction, step/total, ETA and metrics."""

    def __init__(self, run: RunFolder) -> None:
        self.run = run
        self._first: tuple[float, int] | None = None

    def read(self) -> dict[str, Any]:
        """Return the current progress mapping (empty when the run has not reported yet)."""
        status = self.run.status()
        metrics = self.run.last_metrics()
        step = status.get("step", metrics.get("step"))
        total = status.get("max_steps")
        if step is None and not status:
            return {}
        state: dict[str, Any] = {
            "label": "train",
            "done": step,
            "total": total,
            "fraction": min(step / total, 1.0) if isinstance(step, int) and total else None,
            "eta_s": self._eta(step, total),
            "metrics": {k: v for k, v in metrics.items() if k not in ("time",)},
            "state": status.get("state"),
            "last_checkpoint": status.get("last_checkpoint"),
        }
        return state

    def _eta(self, step: Any, total: Any) -> float | None:
        if not isinstance(step, int) or not isinstance(total, int):
            return None
        now = time.monotonic()
        if self._first is None:
            self._first = (now, step)
            return None
        start_time, start_step = self._first
        if step <= start_step:
            return None
        rate = (step - start_step) / (now - start_time)
        return max(total - step, 0) / rate


def file_progress(path: Path) -> dict[str, Any]:
    """Return the state a command wrote to its LINGUAFORGE_PROGRESS_FILE ({} when none yet)."""
    return read_json(path) or {}
