"""What a training run writes for people and supervisors: metrics.jsonl, status.json, tb/, log.txt.

Only the main process (rank 0) writes; other ranks get a `RunLog` with `enabled=False`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from core.fsutil import atomic_write_json
from core.runs import RunFolder


class RunLog:
    """Writer of one run folder's metrics, status, TensorBoard scalars and log lines."""

    def __init__(self, run_dir: Path, enabled: bool = True, tensorboard: bool = True) -> None:
        self.run_dir = run_dir
        self.folder = RunFolder(run_dir)
        self.enabled = enabled
        self.status: dict[str, Any] = {}
        self._tb = None
        if enabled:
            run_dir.mkdir(parents=True, exist_ok=True)
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.folder.tensorboard))

    def line(self, message: str) -> None:
        """Append `message` to log.txt with a timestamp and echo it on stderr."""
        if not self.enabled:
            return
        stamped = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}"
        with open(self.folder.log_file, "a", encoding="utf-8") as handle:
            handle.write(stamped + "\n")
        sys.stderr.write(stamped + "\n")
        sys.stderr.flush()

    def metrics(self, step: int, split: str, values: dict[str, float], tensorboard: bool = True) -> None:
        """Append one record to metrics.jsonl and (unless `tensorboard` is False) the same scalars to
        TensorBoard as `split/name`."""
        if not self.enabled:
            return
        record = {"step": step, "split": split, **{k: float(v) for k, v in values.items()}, "time": time.time()}
        with open(self.folder.metrics_file, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self._tb is not None and tensorboard:
            for name, value in values.items():
                self._tb.add_scalar(f"{split}/{name}", float(value), step)

    def update_status(self, **fields: Any) -> None:
        """Merge `fields` into status.json and rewrite it atomically."""
        self.status.update(fields)
        self.status["updated"] = time.time()
        if self.enabled:
            atomic_write_json(self.folder.status_file, self.status)

    def close(self) -> None:
        """Flush and close TensorBoard."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None
