"""Process identity: a PID plus its kernel start time, so a recycled PID is never mistaken for ours.

Used by the job runner (a job's process, a worker) and by the dashboard's TensorBoard reaper.
"""

from __future__ import annotations

from pathlib import Path


def process_start_time(pid: int) -> str | None:
    """Return the kernel start time of process `pid` (from /proc), or None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def is_alive(pid: int | None, start: str | None) -> bool:
    """Return True when process `pid` exists and (when `start` is given) started at `start`."""
    if not pid:
        return False
    current = process_start_time(pid)
    return current is not None and (start is None or current == start)
