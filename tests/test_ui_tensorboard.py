"""The TensorBoard child process app.py runs: loopback port, path prefix, its token, restarted when it dies, stopped."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from core.tensorboard_proc import TensorBoardProcess

pytestmark = pytest.mark.slow


def live_group_members(pgid: int) -> list[int]:
    """Return the pids in process group `pgid` that are not zombies (read from /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def wait_ready(board: TensorBoardProcess, timeout: float) -> None:
    """Block until `board` answers HTTP (restarting it when it died); fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        board.ensure_running()
        try:
            if httpx.get(board.base_url + "/", headers=board.headers, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"TensorBoard did not answer on {board.base_url} within {timeout:.0f}s.")


def test_tensorboard_serves_prefix_restarts_after_kill_and_stops(tmp_path: Path) -> None:
    """A killed TensorBoard is restarted by the watchdog; stop() ends its process group."""
    board = TensorBoardProcess(tmp_path / "runs", "/tensorboard", log_file=tmp_path / "tb.log")
    board.start()
    try:
        wait_ready(board, timeout=120)
        assert board.base_url.startswith("http://127.0.0.1:") and board.base_url.endswith("/tensorboard")
        assert "TensorBoard" in httpx.get(board.base_url + "/", headers=board.headers, timeout=10).text
        refused = httpx.get(board.base_url + "/data/runs", timeout=10)  # another local user, without the token
        assert refused.status_code == 403 and "only through the LinguaForge dashboard" in refused.text
        wrong = httpx.get(board.base_url + "/data/runs", headers={name: "guess" for name in board.headers}, timeout=10)
        assert wrong.status_code == 403
        first_pid = board._proc.pid
        os.killpg(first_pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while board.restarts == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert board.restarts == 1, "the watchdog did not restart TensorBoard"
        wait_ready(board, timeout=120)
        pid = board._proc.pid
        assert pid != first_pid
    finally:
        board.stop()
    assert not board.is_alive()
    assert live_group_members(pid) == [], "TensorBoard's process group outlived stop()"
