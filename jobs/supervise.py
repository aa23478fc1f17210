"""Child-process supervision: launch a command in its own session, watch it, stop it.

A job's command runs as `python -m core …` with cwd = the workspace, stdout and stderr
appended to the job's log file (never a pipe), and LINGUAFORGE_PROGRESS_FILE and (when the job
has a settings file) LINGUAFORGE_SETTINGS set. Processes are
identified by PID plus their kernel start time, so a recycled PID is never mistaken for ours.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from core.config import REPO_ROOT, SETTINGS_ENV, WORKSPACE_ENV
from core.processes import is_alive, process_start_time
from core.progress import PROGRESS_FILE_ENV
from core.fsutil import open_append
from core.structured import loads_json

TERM_GRACE_S = 10.0
SUMMARY_BYTES = 1 << 20  # how much of an attempt's output `error_summary` reads


def worker_identity() -> str:
    """Return this process's identity as `host:pid:start-time`."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid)}"


def worker_alive(identity: str | None) -> bool | None:
    """Return whether the worker `identity` still runs; None when it runs on another host."""
    if not identity:
        return False
    host, pid, start = identity.rsplit(":", 2)
    if host != socket.gethostname():
        return None
    return is_alive(int(pid), start)


def child_env(workspace: Path, progress_path: Path | None = None, settings_file: Path | None = None,
              devices: list[str] | None = None) -> dict[str, str]:
    """Return the environment for a job's command: this one plus the workspace, progress file, repo
    and settings file (without one, the command loads the defaults alone), and with `devices` (its
    GPU slots' devices) `CUDA_VISIBLE_DEVICES` naming only those."""
    env = dict(os.environ)
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    env[WORKSPACE_ENV] = str(workspace)
    env.pop(SETTINGS_ENV, None)
    if settings_file is not None:
        env[SETTINGS_ENV] = str(settings_file)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    if progress_path is not None:
        env[PROGRESS_FILE_ENV] = str(progress_path)
    return env


def command_line(argv: list[str], nproc: int = 1) -> list[str]:
    """Return the process command for CLI `argv`: `python -m core …`, or with `nproc` > 1 torchrun on this
    machine (`--standalone`: a free port of its own, so several such jobs run side by side)."""
    if nproc > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
                "-m", "core", *argv]
    return [sys.executable, "-m", "core", *argv]


def launch(
    argv: list[str], cwd: Path, log_path: Path, progress_path: Path, nproc: int = 1, settings_file: Path | None = None,
    devices: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start the command for `argv` in a new session (cwd = the workspace `cwd`) logging to `log_path`,
    loading `settings_file` over the defaults, seeing only the GPUs `devices` when given.

    With `nproc` > 1 it runs under torchrun with that many processes. Returns the Popen;
    raises OSError when the process cannot start.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = child_env(cwd, progress_path, settings_file, devices)
    command = command_line(argv, nproc)
    with open_append(log_path, binary=True) as log:
        log.write(f"$ {' '.join(['python', *command[1:]])}\n".encode())
        log.flush()
        return subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _wait(exited: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if exited():
            return True
        time.sleep(0.2)
    return exited()


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


def stop_process_group(
    pid: int,
    exited: Callable[[], bool],
    grace_s: float,
    stop_file: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
    term_grace_s: float = TERM_GRACE_S,
) -> str:
    """Stop the process group led by `pid`: STOP file, then SIGTERM, then SIGKILL.

    With `stop_file`, touches it and waits up to `grace_s` for a clean exit first. Then sends
    SIGTERM to the group and waits up to `term_grace_s`; then SIGKILL. Returns how it ended:
    `stop-file`, `sigterm` or `sigkill`.
    """
    if stop_file is not None:
        stop_file.parent.mkdir(parents=True, exist_ok=True)
        stop_file.touch()
        log(f"cancel: touched {stop_file}; waiting up to {grace_s:.0f}s for a clean exit")
        if _wait(exited, grace_s):
            return "stop-file"
    log("cancel: sending SIGTERM to the process group")
    _signal_group(pid, signal.SIGTERM)
    if _wait(exited, term_grace_s):
        return "sigterm"
    log("cancel: sending SIGKILL to the process group")
    _signal_group(pid, signal.SIGKILL)
    _wait(exited, 5.0)
    return "sigkill"


def tail_text(path: Path, lines: int) -> str:
    """Return the last `lines` lines of the text file `path` ("" when it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max(lines, 1) * 400))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def error_summary(path: Path, start: int = 0) -> str:
    """Return the most useful failure text from the part of a job log after byte `start` (one attempt's
    output): its `--json` failure's `detail` (the doctor's table, for one), else its last `error:`
    line, else its last 5 lines."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(start, handle.tell() - SUMMARY_BYTES))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        lines = []
    for line in reversed(lines):
        if line.startswith("{") and line.rstrip().endswith("}"):
            try:
                failure = loads_json(line, "job log line")
            except ValueError:
                continue
            detail = failure.get("detail") if isinstance(failure, dict) and failure.get("ok") is False else None
            if isinstance(detail, str) and detail:
                return detail
            break
    for line in reversed(lines[-40:]):
        if line.startswith(("error:", "internal error:")):
            return line.split(":", 1)[1].strip()
    return "\n".join(lines[-5:]) or "the command failed without output"
