"""A read-only workspace (issue 17): commands name the folder that is not writable (exit 2), and a
job that cannot start ends `failed` with that reason instead of staying `running`."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from core.cli import main as cli_main
from core.config import load_settings
from core.cli.catalogue import cli_catalogue
from jobs.runner import JobRunner
from jobs.worker import Worker


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """Make `folder` unwritable for this process (chmod; `chattr +i` as root, where chmod does not bind)."""
    mode = folder.stat().st_mode
    os.chmod(folder, 0o555)
    immutable = False
    if os.geteuid() == 0:
        immutable = subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
        if not immutable:
            os.chmod(folder, mode)
            pytest.skip("running as root without `chattr`: no way to make a folder read-only here")
    try:
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        os.chmod(folder, mode)


def test_commands_name_the_folder_that_is_not_writable(workspace: Path, capsys: pytest.CaptureFixture) -> None:
    (workspace / "corpus.txt").write_text("hello world again\n" * 40, encoding="utf-8")
    (workspace / "tokenizers").mkdir()
    JobRunner(load_settings(), catalogue=cli_catalogue())  # creates jobs.sqlite while the workspace is writable
    with read_only(workspace / "tokenizers"):
        code = cli_main(["tokenizer", "train", "--corpus", str(workspace / "corpus.txt"), "--vocab-size", "30",
                         "--output", str(workspace / "tokenizers" / "t.model")])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err, err
        assert f"{workspace / 'tokenizers'}" in err
    with read_only(workspace):
        code = cli_main(["jobs", "list"])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err, err
        assert f"{workspace}: not writable" in err


def test_job_that_cannot_write_its_log_ends_failed_with_the_reason(workspace: Path) -> None:
    (workspace / "tokenizers").mkdir()
    (workspace / "tokenizers" / "t.model").write_bytes(b"x")
    runner = JobRunner(load_settings(), catalogue=cli_catalogue())
    job_id = runner.submit("doctor", {"tokenizer": "tokenizers/t.model"})
    logs = workspace / "logs" / "jobs"
    with read_only(logs):
        worker = Worker(load_settings(), workers=1)
        worker.start()
        try:
            job = runner.wait(job_id, 120)
        finally:
            worker.stop()
    assert job["status"] == "failed"
    assert f"{logs} is not writable" in job["error"]
