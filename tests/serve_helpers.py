"""Start the real speech server (`python -m core serve`) in a subprocess on a free 127.0.0.1 port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import soundfile as sf

from tests.browser_helpers import REPO_ROOT, free_port


@dataclass
class ServerProcess:
    """A running speech server: its process, base URL and log file."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def log_text(self) -> str:
        """Return what the server printed so far."""
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.is_file() else ""


def write_voice(path: Path, frequency: float = 220.0, rate: int = 16000) -> Path:
    """Write one second of a sine tone as a reference clip and return its path."""
    t = np.arange(rate) / rate
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), (0.3 * np.sin(2 * np.pi * frequency * t)).astype("float32"), rate)
    return path


@contextmanager
def running_server(workspace: Path, checkpoint: Path, voices: Path, log: Path, *options: str,
                   env: dict[str, str] | None = None, timeout: float = 120.0) -> Iterator[ServerProcess]:
    """Start `python -m core serve` for `checkpoint` with `options`; yield once /health answers; stop it
    with SIGINT after (and kill it if it does not stop within 30 s)."""
    port = free_port()
    command = [sys.executable, "-m", "core", "serve", "--checkpoint", str(checkpoint), "--voices", str(voices),
               "--port", str(port), *options]
    environment = {**os.environ, "LINGUAFORGE_WORKSPACE": str(workspace), **(env or {})}
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT)
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}:\n{server.log_text()}")
            try:
                if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer /health within {timeout} s:\n{server.log_text()}")
            time.sleep(0.2)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
