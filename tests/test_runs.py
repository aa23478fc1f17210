"""core.runs: the run folder's layout and readers, and the one progress view every surface shows."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from core.cli import main as cli_main
from core.cli.catalogue import cli_catalogue
from core.config import load_settings
from core.runs import RunFolder, format_seconds, progress_view, run_folder, run_folder_of_checkpoint
from core.training.log import RunLog
from jobs.progress import TrainProgress
from jobs.runner import JobRunner
from jobs.supervise import worker_identity


def test_run_folder_names_every_file_a_run_writes(workspace: Path) -> None:
    run = run_folder(load_settings(), "am")
    assert run.path == workspace / "runs" / "am" and run.name == "am"
    names = {p.relative_to(run.path).as_posix() for p in (
        run.config, run.status_file, run.metrics_file, run.stop_file, run.checkpoints, run.eval_file,
        run.tensorboard, run.log_file, run.report_json, run.report_markdown)}
    assert names == {"config.yaml", "status.json", "metrics.jsonl", "STOP", "checkpoints", "checkpoints/eval.json",
                     "tb", "log.txt", "report.json", "report.md"}
    assert run_folder_of_checkpoint(run.checkpoints / "best.pt") == run
    assert run_folder_of_checkpoint(workspace / "checkpoints" / "x.safetensors") is None


def test_what_the_trainer_writes_is_what_the_readers_read(tmp_path: Path) -> None:
    run = RunFolder(tmp_path / "r")
    assert run.status() == {} and run.metrics() == [] and run.last_metrics() == {} and not run.is_running()
    log = RunLog(run.path, tensorboard=False)
    log.line("hello")
    log.metrics(1, "train", {"loss": 2.5})
    log.metrics(2, "val", {"loss": 2.0})
    log.update_status(state="running", step=2, max_steps=10)
    with open(run.metrics_file, "a", encoding="utf-8") as handle:
        handle.write('{"step": 3, "spl')  # a line another process is still writing
    assert [(m["step"], m["split"]) for m in run.metrics()] == [(1, "train"), (2, "val")]
    assert [m["step"] for m in run.metrics("val")] == [2]
    assert run.last_metrics()["step"] == 2
    assert run.status()["step"] == 2 and run.is_running()
    assert "hello" in run.log_file.read_text(encoding="utf-8")
    progress = TrainProgress(run).read()
    assert (progress["done"], progress["total"], progress["fraction"], progress["state"]) == (2, 10, 0.2, "running")


def test_progress_view_reconciles_step_done_total_and_max_steps() -> None:
    record = {"label": "train", "done": 5, "total": 40, "fraction": 0.125, "eta_s": 75.0, "metrics": {"loss": 1.0}}
    view = progress_view(record, job_status="running")
    assert (view.done, view.total, view.fraction, view.state) == (5, 40, 0.125, "running")
    assert view.text() == "12% · 5/40 · ETA 1m15s"
    # the run's status.json is newer than the job record: it wins, and the fraction follows it
    view = progress_view(record, {"state": "finished", "step": 40, "max_steps": 40}, "running")
    assert (view.done, view.total, view.fraction, view.state) == (40, 40, 1.0, "finished")
    assert view.text(show_state=True) == "100% · 40/40 · finished"
    # step / max_steps in a record mean the same as done / total
    assert progress_view({"step": 30, "max_steps": 120}).text() == "25% · 30/120"
    # a succeeded job without progress is complete; a failed one shows no ETA
    assert progress_view({}, job_status="succeeded").text() == "100%"
    assert progress_view({"done": 3, "total": 6, "eta_s": 9}, job_status="failed").text() == "50% · 3/6"
    assert progress_view(None).text() == "—"
    assert [format_seconds(s) for s in (None, 12, 185, 3720)] == ["—", "12s", "3m05s", "1h02m"]


def test_cli_jobs_list_and_the_jobs_tab_show_the_same_progress(workspace: Path) -> None:
    from gradio_app.common import job_line
    from gradio_app.tabs.jobs import HEADERS, job_rows

    runner = JobRunner(catalogue=cli_catalogue())
    job_id = runner.submit("doctor", {"tokenizer": "tokenizers/bpe.model"})
    assert runner.store.claim(job_id, worker_identity(), None)
    runner.store.update(job_id, progress={"step": 30, "max_steps": 120, "eta_s": 90})
    expected = "25% · 30/120 · ETA 1m30s"
    job = runner.get_job(job_id)
    assert job_rows([job])[0][HEADERS.index("progress")] == expected
    assert expected in job_line(job)
    assert expected in _stdout("jobs", "list")
    assert expected in _stdout("jobs", "show", job_id)
    assert json.loads(_stdout("jobs", "list", "--json"))["jobs"][0]["progress"]["step"] == 30


def _stdout(*argv: str) -> str:
    """Return what `python -m core ARGV` prints, run in this process; fail on a non-zero exit."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli_main(list(argv)) == 0
    return out.getvalue()


def test_best_is_a_link_that_outlives_rotation_and_a_resave_of_its_step(tmp_path: Path) -> None:
    """best.pt shares the step checkpoint's bytes (one file on disk, not two); rotating that step away
    or saving the same step again (a resume) leaves best.pt holding the bytes it was made from."""
    import os

    import torch

    from core.checkpoint import load_checkpoint, save_checkpoint
    from core.training.state import link_as_best, rotate

    run_dir = tmp_path / "run"
    step_checkpoint_path = RunFolder(run_dir).step_checkpoint

    def save(step: int, value: float) -> Path:
        return save_checkpoint(step_checkpoint_path(step), {"w": torch.full((4,), value)}, None, {"step": step})

    best = link_as_best(save(1, 1.0))
    assert os.path.samefile(best, step_checkpoint_path(1)) and best.stat().st_nlink == 2
    save(1, 5.0)                                    # the same step written again replaces its file by rename
    save(2, 2.0)
    assert rotate(run_dir, keep_last=1) == [step_checkpoint_path(1)]
    assert best.stat().st_nlink == 1
    assert load_checkpoint(best).state_dict["w"].tolist() == [1.0] * 4
    assert link_as_best(step_checkpoint_path(2)) == best
    assert load_checkpoint(best).state_dict["w"].tolist() == [2.0] * 4 and os.path.samefile(best, step_checkpoint_path(2))
