"""Nothing a user made is lost, on real processes and files: `train` never overwrites a run with
checkpoints (it refuses, or `--fresh` moves it aside), a refused start writes nothing, a save killed
mid-write leaves a temporary file the next start removes, metrics.jsonl holds each step once after a
crash and resume, and the dashboard's TensorBoard never outlives the app (killed, or SIGTERM with
`--no-worker`)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from core.cli import main
from core.cli.catalogue import cli_catalogue
from core.config import load_settings
from core.errors import InputError
from jobs.runner import JobRunner
from tests.browser_helpers import REPO_ROOT, free_port
from tests.trainer_helpers import lm_config, lm_workspace

SCHEDULE = {"max_steps": 6, "val_every": 3, "save_every": 3, "keep_last": 2, "log_every": 1}
# A child `python -m core` whose checkpoint save of step 6 is killed (SIGKILL) after writing its
# temporary file and before renaming it: what a power cut or `kill -9` during a save leaves.
KILLED_SAVE = """
import os, signal, sys, torch
original = torch.save
def save(obj, handle, *args, **kwargs):
    original(obj, handle, *args, **kwargs)
    if os.path.basename(getattr(handle, "name", "")).startswith(".step_0000006.pt."):
        handle.flush()
        os.kill(os.getpid(), signal.SIGKILL)
torch.save = save
from core.cli import main
sys.exit(main(sys.argv[1:]))
"""


def snapshot(folder: Path) -> dict[str, str]:
    """Return {relative path: sha256 of its bytes} for every file under `folder`."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def train_steps(run: Path) -> list[int]:
    """Return the steps of the `train` records of run's metrics.jsonl, in file order."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [row["step"] for row in rows if row["split"] == "train"]


def core_command(*args: str, script: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m core ARGS` (or `python -c SCRIPT ARGS`) in a real subprocess."""
    head = ["-c", script] if script else ["-m", "core"]
    return subprocess.run([sys.executable, *head, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture
def lm_ws(workspace: Path) -> Path:
    lm_workspace(workspace)
    return workspace


def cli_run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    """Run `python -m core ARGS` in this process; return (exit code, stdout, stderr)."""
    capsys.readouterr()
    try:
        code = main([*args])
    except SystemExit as exc:  # argparse's refusals
        code = int(exc.code)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_finished_run_is_never_overwritten_and_fresh_moves_it_aside(lm_ws: Path, capsys: pytest.CaptureFixture) -> None:
    config = str(lm_config(lm_ws, "kept", schedule=SCHEDULE))
    assert cli_run(capsys, "train", "--config", config)[0] == 0
    run = lm_ws / "runs" / "kept"
    before = snapshot(run)
    assert {"checkpoints/best.pt", "checkpoints/step_0000006.pt", "status.json", "metrics.jsonl"} <= set(before)

    code, out, err = cli_run(capsys, "train", "--config", config)
    assert code == 2 and out == "" and err.count("\n") == 1, err  # one line, no traceback
    assert err.startswith("error: runs/kept already holds a run with checkpoints (step_0000003.pt, step_0000006.pt, best.pt)")
    assert "--resume auto" in err and "--fresh" in err
    assert snapshot(run) == before  # every file byte for byte, best.pt included

    code, _, err = cli_run(capsys, "train", "--config", config, "--fresh", "--resume", "auto")
    assert code == 2 and "not allowed with" in err
    assert snapshot(run) == before

    code, out, err = cli_run(capsys, "train", "--config", config, "--fresh", "--max-steps", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["step"] == 2
    moved = [p for p in (lm_ws / "runs").iterdir() if p.name.startswith("kept.old-")]
    assert len(moved) == 1 and snapshot(moved[0]) == before  # the old run, whole, beside the new one
    assert train_steps(run) == [1, 2]
    assert json.loads((run / "status.json").read_text())["step"] == 2
    assert (run / "config.yaml").is_file() and "was moved to" in (run / "log.txt").read_text()


def test_a_refused_resume_writes_nothing(lm_ws: Path, capsys: pytest.CaptureFixture) -> None:
    config = str(lm_config(lm_ws, "paused", schedule=SCHEDULE))
    assert cli_run(capsys, "train", "--config", config, "--max-steps", "3")[0] == 0
    run = lm_ws / "runs" / "paused"
    before = snapshot(run)
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 3 and status["last_checkpoint"]
    bad = lm_ws / "checkpoints" / "bad.pt"
    bad.parent.mkdir()
    bad.write_bytes(b"PK\x03\x04 not a checkpoint at all")
    for resume in (str(bad), "checkpoints/missing.pt"):
        code, _, err = cli_run(capsys, "train", "--config", config, "--resume", resume)
        last = err.splitlines()[-1]  # (an unreadable file: the doctor's table above it)
        assert code == 2 and "Traceback" not in err and last.startswith("error: ") and Path(resume).name in last, err
        assert snapshot(run) == before  # status.json keeps its step, best loss and last checkpoint
    code, out, _ = cli_run(capsys, "train", "--config", config, "--resume", "auto", "--json")
    assert code == 0 and json.loads(out)["step"] == 6


@pytest.fixture(scope="module")
def crashed(module_tmp: Path) -> Iterator[tuple[Path, list[str], subprocess.CompletedProcess[str]]]:
    """A run killed (SIGKILL) while saving step 6 after logging it, then resumed with `--resume auto`:
    yields (run folder, the checkpoint folder's file names after the kill, the resume's outcome)."""
    workspace = module_tmp / "workspace"
    workspace.mkdir()
    lm_workspace(workspace)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
        config = lm_config(workspace, "crash", schedule={**SCHEDULE, "max_steps": 8, "val_every": 1000})
        killed = core_command("train", "--config", str(config), script=KILLED_SAVE)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        run = workspace / "runs" / "crash"
        after_kill = sorted(p.name for p in (run / "checkpoints").iterdir())
        resumed = core_command("train", "--config", str(config), "--resume", "auto", "--json")
        yield run, after_kill, resumed


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_a_save_killed_mid_write_leaves_a_temporary_file_that_the_next_start_removes(crashed) -> None:
    run, after_kill, resumed = crashed
    orphans = [name for name in after_kill if name.startswith(".step_0000006.pt.") and name.endswith(".tmp")]
    assert len(orphans) == 1 and "step_0000003.pt" in after_kill and "step_0000006.pt" not in after_kill
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["step"] == 8
    left = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert not [name for name in left if name.endswith(".tmp")], left
    assert f"removed {orphans[0]}" in (run / "log.txt").read_text()


def test_metrics_hold_each_step_once_after_a_crash_and_resume(crashed) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, _, resumed = crashed
    assert resumed.returncode == 0, resumed.stderr
    assert train_steps(run) == list(range(1, 9))  # steps 4-6 ran twice (the crash lost them), are logged once
    board = EventAccumulator(str(run / "tb"))
    board.Reload()
    assert [event.step for event in board.Scalars("train/loss")] == list(range(1, 9))  # TensorBoard too


def test_jobs_keep_resume_auto_and_take_fresh_instead(workspace: Path) -> None:
    """The Training tab submits `train` with just a config: the job resumes (`--resume auto`), so a
    finished run is continued, never refused or overwritten; `fresh` replaces `resume`, both is refused."""
    lm_workspace(workspace)
    lm_config(workspace, "job", schedule=SCHEDULE)
    runner = JobRunner(load_settings(), catalogue=cli_catalogue())
    params, argv = runner.plan("train", {"config": "runs_cfg/job.yaml"})
    assert params["resume"] == "auto" and argv[-3:] == ["--resume", "auto", "--json"]
    params, argv = runner.plan("train", {"config": "runs_cfg/job.yaml", "fresh": True})
    assert "resume" not in params and "--fresh" in argv and "--resume" not in argv
    with pytest.raises(InputError, match="not allowed with"):
        runner.plan("train", {"config": "runs_cfg/job.yaml", "fresh": True, "resume": "auto"})
    continued = runner.get_job(runner.submit("train", {"config": "runs_cfg/job.yaml"}))
    restarted = runner.get_job(runner.submit("train", {"config": "runs_cfg/job.yaml", "fresh": True}))
    assert continued["resume"] == "auto" and restarted["resume"] == "never"  # a crash never re-runs --fresh by itself


def _tensorboards(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children(recursive=True) if "tensorboard" in " ".join(p.cmdline())]


def _start_app(workspace: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start `app.py --no-worker` on a free port; return it once it serves."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "app.py"), "--no-worker", "--port", str(port),
                                 "--workspace", str(workspace)], cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    deadline = time.monotonic() + 180
    while f"running on http://127.0.0.1:{port}" not in log.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(0.3)
    return proc


@pytest.mark.slow
def test_tensorboard_is_reaped_after_a_killed_app_and_on_sigterm_with_no_worker(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    first = _start_app(workspace, tmp_path / "first.log")
    orphans: list[psutil.Process] = []
    second = None
    try:
        orphans = _tensorboards(first.pid)
        assert len(orphans) >= 1
        first.kill()  # SIGKILL: no cleanup runs; TensorBoard, in its own session, lives on
        first.wait(10)
        time.sleep(0.5)
        assert all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in orphans)
        second = _start_app(workspace, tmp_path / "second.log")
        gone, alive = psutil.wait_procs(orphans, timeout=15)
        assert not alive, [p.cmdline() for p in alive]  # the second app stopped the first one's TensorBoard
        board = _tensorboards(second.pid)
        assert len(board) >= 1
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
        gone, alive = psutil.wait_procs(board, timeout=10)
        assert not alive, [p.cmdline() for p in alive]  # SIGTERM with --no-worker leaves no TensorBoard
        assert list((workspace / "logs" / "tensorboard").glob("*.json")) == []
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        for orphan in orphans:
            if orphan.is_running():
                orphan.kill()
