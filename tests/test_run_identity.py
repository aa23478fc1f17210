"""One run identity: the job runner and the trainer find a run's folder the same way (from the loaded
run config), so a job whose config has no `name:` follows and stops the folder its trainer writes;
and one reader of eval.json for the trainer's resume, the Compare view and `eval tts` merges."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from core.checkpoint import load_checkpoint
from core.config import load_settings
from core.eval.tts import collect_evaluations, update_eval_json
from core.runs import RunFolder, read_evaluations, run_folder_of_config
from core.training.periodic_eval import best_recorded
from core.training.run_config import RunConfig
from tests.test_jobs_support import JobsEnv, lm_jobs_env


@pytest.fixture(scope="module")
def env(module_tmp: Path) -> Iterator[JobsEnv]:
    yield from lm_jobs_env(module_tmp)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_a_job_whose_config_has_no_name_shows_live_progress_and_stops_on_stop(env: JobsEnv) -> None:
    """The config file is `nameless.yaml` without `name:`: the trainer writes `runs/run/` (the run
    config's default name), and so the job follows that folder and puts its STOP file there."""
    from tests.trainer_helpers import lm_config

    path = lm_config(env.workspace, "nameless", schedule={"max_steps": 100000, "save_every": 1000, "val_every": 1000,
                                                          "log_every": 1})
    data = yaml.safe_load(path.read_text())
    del data["name"]
    path.write_text(yaml.safe_dump(data))
    job_id = env.runner.submit("train", {"config": "runs_cfg/nameless.yaml"})
    run = RunFolder(env.workspace / "runs" / RunConfig.name)
    assert env.runner.get_job(job_id)["run_dir"] == str(run.path)
    deadline = time.monotonic() + 240
    while (env.runner.get_job(job_id)["progress"].get("done") or 0) < 3:  # the worker reads it from the run folder
        assert time.monotonic() < deadline, env.runner.read_log(job_id)
        time.sleep(0.1)
    job = env.runner.get_job(job_id)
    assert job["status"] == "running" and job["progress"]["total"] == 100000 and "loss" in job["progress"]["metrics"]
    env.runner.cancel(job_id)
    job = env.runner.wait(job_id, 120)
    assert job["status"] == "cancelled" and "cancelled (stop-file)" in env.runner.read_log(job_id)
    status = run.status()
    assert status["state"] == "stopped" and 3 <= status["step"] < 100000
    assert load_checkpoint(status["last_checkpoint"]).meta["step"] == status["step"]
    assert not (env.workspace / "runs" / "nameless").exists()


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_the_runner_and_the_trainer_name_the_same_folder(env: JobsEnv) -> None:
    """A name set in the file wins over the file's stem, as the trainer has it."""
    from tests.trainer_helpers import lm_config

    lm_config(env.workspace, "inside").rename(env.workspace / "runs_cfg" / "stem.yaml")
    job_id = env.runner.submit("train", {"config": "runs_cfg/stem.yaml"})
    inside = run_folder_of_config(env.settings, RunConfig(name="inside"))
    assert env.runner.get_job(job_id)["run_dir"] == str(inside.path)
    job = env.runner.wait(job_id, 240)
    assert job["status"] == "succeeded" and job["progress"]["done"] == 6, env.runner.read_log(job_id)
    assert inside.status()["state"] == "finished" and not (env.workspace / "runs" / "stem").exists()
    assert run_folder_of_config(load_settings(), RunConfig()).path == env.workspace / "runs" / "run"


def _entry(step: int, mcd: float) -> dict:
    return {"step": step, "chance": 0.5, "seconds": 1.0,
            "rows": {"model": {"mcd_db": mcd, "dtw_identification": 0.5, "per_sentence": []}}}


def test_eval_json_has_one_reader(tmp_path: Path) -> None:
    run = RunFolder(tmp_path / "runs" / "r")
    update_eval_json(run.eval_file, "step_0000002.pt", _entry(2, 8.0))
    update_eval_json(run.eval_file, "step_0000004.pt", _entry(4, 6.5))
    update_eval_json(run.eval_file, "step_0000002.pt", _entry(2, 7.5))  # evaluated again: replaced, not added
    assert run.evaluations() == read_evaluations(run.eval_file)
    assert {name: e["step"] for name, e in run.evaluations().items()} == {"step_0000002.pt": 2, "step_0000004.pt": 4}
    assert [(s["checkpoint"], s["mcd_db"]) for s in collect_evaluations(run.path)] == [
        ("step_0000002.pt", 7.5), ("step_0000004.pt", 6.5)]
    assert best_recorded(run.eval_file, "eval_mcd", 3) == 7.5 and best_recorded(run.eval_file, "eval_mcd", 4) == 6.5
    for broken in (b"{not json", b"\xff\xfe", json.dumps({"checkpoints": [1, 2]}).encode(), b"[]"):
        run.eval_file.write_bytes(broken)
        assert read_evaluations(run.eval_file) == {} and collect_evaluations(run.path) == []
        assert best_recorded(run.eval_file, "eval_mcd", 4) is None
    run.eval_file.write_text(json.dumps({"checkpoints": {"a.pt": "not an entry", "b.pt": _entry(1, 9.0)}}))
    assert list(read_evaluations(run.eval_file)) == ["b.pt"]
    update_eval_json(run.eval_file, "c.pt", _entry(3, 5.0))  # a merge keeps what it can read
    assert list(read_evaluations(run.eval_file)) == ["b.pt", "c.pt"]
    assert read_evaluations(tmp_path / "missing.json") == {}
