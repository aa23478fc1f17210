"""A TensorBoard subprocess on a loopback port, served under a path prefix, behind a secret.

The dashboard proxies `<prefix>/…` to this process, so TensorBoard is never exposed on its own
port: the child (`core.tensorboard_server`) answers only requests carrying this object's random
token (`headers`, which the proxy adds after its login check) and runs without TensorBoard's
separate data server, so another local user reaching the loopback port gets 403 and no data.
`TensorBoardProcess.start()` launches it, `ensure_running()` restarts it when it died, a
watchdog thread calls that periodically, and `stop()` ends it (its whole process group).

TensorBoard runs in its own session, so it outlives an owner that is killed (SIGKILL, a crash).
With `records`, each launch leaves a record there (`<pid>.json`: TensorBoard's and its owner's PID
and start time); `start()` first stops every recorded TensorBoard whose owner is gone (`reap_orphans`),
and `stop()` removes its own record.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from core.config import REPO_ROOT
from core.errors import InternalError
from core.tensorboard_server import TOKEN_ENV, TOKEN_HEADER
from core.fsutil import atomic_write_json, open_append, read_json
from core.processes import is_alive, process_start_time

STOP_WAIT_S = 10.0


def free_loopback_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TensorBoardProcess:
    """Owns one TensorBoard child process reading `logdir`, bound to 127.0.0.1 under `path_prefix`,
    answering only requests with `headers` (a token made for this object)."""

    def __init__(
        self, logdir: Path, path_prefix: str = "/tensorboard", log_file: Path | None = None, records: Path | None = None
    ) -> None:
        self.logdir = Path(logdir)
        self.path_prefix = "/" + path_prefix.strip("/")
        self.log_file = log_file
        self.records = Path(records) if records is not None else None
        self.port: int | None = None
        self.restarts = 0
        self._token = secrets.token_urlsafe(32)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._watchdog: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """Return the loopback URL of TensorBoard's root, prefix included (no trailing slash)."""
        if self.port is None:
            raise InternalError("TensorBoard has not been started.")
        return f"http://127.0.0.1:{self.port}{self.path_prefix}"

    @property
    def headers(self) -> dict[str, str]:
        """Return the header that a request to TensorBoard must carry (the proxy adds it after the login)."""
        return {TOKEN_HEADER: self._token}

    def is_alive(self) -> bool:
        """Return True while the child process is running."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Stop recorded TensorBoards whose owner is gone, launch TensorBoard (a no-op when it is already
        running) and start the watchdog thread."""
        if self.records is not None:
            reap_orphans(self.records)
        with self._lock:
            if not self.is_alive():
                self._launch()
        if self._watchdog is None:
            self._stop_event.clear()
            self._watchdog = threading.Thread(target=self._watch, name="tensorboard-watchdog", daemon=True)
            self._watchdog.start()

    def ensure_running(self) -> bool:
        """Restart TensorBoard when it has died; return True when a restart happened."""
        with self._lock:
            if self._stop_event.is_set() or self.is_alive():
                return False
            self._launch()
            self.restarts += 1
            return True

    def stop(self) -> None:
        """Stop the watchdog and terminate TensorBoard's process group (SIGTERM, then SIGKILL)."""
        self._stop_event.set()
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        _stop_group(proc.pid, lambda: proc.poll() is not None)
        proc.wait(timeout=STOP_WAIT_S)
        self._forget(proc.pid)

    def _launch(self) -> None:
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.port = free_loopback_port()
        command = [
            sys.executable, "-m", "core.tensorboard_server",
            "--logdir", str(self.logdir),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--path_prefix", self.path_prefix,
            "--reload_interval", "5",
            "--load_fast", "false",  # no data server: it would listen on a second port without the token
        ]
        if self.log_file is not None:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            output = open_append(self.log_file, binary=True)  # handed to the child, closed below
        else:
            output = open(os.devnull, "wb")  # noqa: SIM115
        previous = self._proc
        try:
            self._proc = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, TOKEN_ENV: self._token, "PYTHONPATH": _python_path()},
            )
        finally:
            output.close()
        if previous is not None:
            self._forget(previous.pid)
        self._remember(self._proc.pid)

    def _remember(self, pid: int) -> None:
        if self.records is not None:
            owner = os.getpid()
            atomic_write_json(self.records / f"{pid}.json", {
                "host": socket.gethostname(), "pid": pid, "start": process_start_time(pid),
                "owner": owner, "owner_start": process_start_time(owner), "logdir": str(self.logdir),
            })

    def _forget(self, pid: int) -> None:
        if self.records is not None:
            (self.records / f"{pid}.json").unlink(missing_ok=True)

    def _watch(self) -> None:
        while not self._stop_event.wait(2.0):
            self.ensure_running()


def _python_path() -> str:
    """Return PYTHONPATH for the child: the repository first (it runs `core.tensorboard_server`), then the inherited one."""
    return os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
def _stop_group(pid: int, ended: Callable[[], bool]) -> None:
    """SIGTERM the process group `pid` leads, SIGKILL it when `ended()` is not true within STOP_WAIT_S,
    then SIGKILL what is left of the group (TensorBoard's helpers, its data server)."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_WAIT_S
    while not ended() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def reap_orphans(records: Path) -> list[int]:
    """Stop every TensorBoard recorded in `records` on this host whose owner process is gone; return their PIDs.

    A record whose TensorBoard is gone (or whose PID now names another process) is only removed.
    A record that is not readable is left alone.
    """
    if not records.is_dir():
        return []
    host, reaped = socket.gethostname(), []
    for path in sorted(records.glob("*.json")):
        record = read_json(path)
        if not record or record.get("host") != host or is_alive(record.get("owner"), record.get("owner_start")):
            continue
        pid = record.get("pid")
        if isinstance(pid, int) and is_alive(pid, record.get("start")):
            _stop_group(pid, lambda: not is_alive(pid, record.get("start")))
            reaped.append(pid)
        path.unlink(missing_ok=True)
    return reaped
