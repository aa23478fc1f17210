"""Progress reporting for long operations.

Lines go to stderr (stdout stays clean for `--json`). When the environment variable
`LINGUAFORGE_PROGRESS_FILE` names a file (the job runner sets it), the latest state is also
written there as one JSON object — `{"label", "done", "total", "fraction", "eta_s", "metrics"}`
— replaced atomically, so a job record can show progress without parsing logs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

PROGRESS_FILE_ENV = "LINGUAFORGE_PROGRESS_FILE"


def write_progress_file(state: dict[str, Any]) -> None:
    """Write `state` atomically to the file named by LINGUAFORGE_PROGRESS_FILE, if set."""
    target = os.environ.get(PROGRESS_FILE_ENV)
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
        write_progress_file(state)
