"""A TensorBoard subprocess on a loopback port, served under a path prefix, behind a secret.

The dashboard proxies `<prefix>/…` to this process, so TensorBoard is never exposed on its own
port: the child (`core.tensorboard_server`) answers only requests carrying this object's random
token (`headers`, which the proxy adds after its login check) and runs without TensorBoard's
separate data server, so another local user reaching the loopback port gets 403 and no data.
`TensorBoardProcess.start()` launches it, `ensure_running()` restarts it when it died, a
watchdog thread calls that periodically, and `stop()` ends it (its whole process group).
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

import httpx

from core.config import REPO_ROOT
from core.errors import InternalError
from core.tensorboard_server import TOKEN_ENV, TOKEN_HEADER


def free_loopback_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TensorBoardProcess:
    """Owns one TensorBoard child process reading `logdir`, bound to 127.0.0.1 under `path_prefix`,
    answering only requests with `headers` (a token made for this object)."""

    def __init__(self, logdir: Path, path_prefix: str = "/tensorboard", log_file: Path | None = None) -> None:
        self.logdir = Path(logdir)
        self.path_prefix = "/" + path_prefix.strip("/")
        self.log_file = log_file
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
        """Launch TensorBoard (a no-op when it is already running) and start the watchdog thread."""
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

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until TensorBoard answers HTTP, or raise InternalError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_alive():
                self.ensure_running()
            try:
                if httpx.get(self.base_url + "/", headers=self.headers, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise InternalError(f"TensorBoard did not answer on {self.base_url} within {timeout:.0f}s.")

    def stop(self) -> None:
        """Stop the watchdog and terminate TensorBoard's process group (SIGTERM, then SIGKILL)."""
        self._stop_event.set()
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        except ProcessLookupError:
            return
        try:  # helpers TensorBoard started (its data server) must not outlive it
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

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
            output = open(self.log_file, "ab")  # noqa: SIM115 - handed to the child, closed below
        else:
            output = open(os.devnull, "wb")  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, TOKEN_ENV: self._token, "PYTHONPATH": _python_path()},
            )
        finally:
            output.close()

    def _watch(self) -> None:
        while not self._stop_event.wait(2.0):
            self.ensure_running()


def _python_path() -> str:
    """Return PYTHONPATH for the child: the repository first (it runs `core.tensorboard_server`), then the inherited one."""
    return os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
