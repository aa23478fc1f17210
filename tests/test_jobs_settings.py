"""Settings reach every job (issue 23): a job's process loads the settings file it was submitted with,
else the one its worker (or app.py) was started with — real worker processes, real app.py, real jobs.

The family job is a Chatterbox `doctor --config` whose run config names no model_dir: its
`chatterbox.files` check reads `families.chatterbox.model_dir`, which only a settings file sets.
The data-roots job is a `dataset import --confine-to-roots` whose audio lies in a second data root.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import soundfile as sf
import yaml

from core.cli.catalogue import cli_catalogue
from core.config import SETTINGS_ENV, load_settings
from jobs.runner import JobRunner
from jobs.states import FAILED, SUCCEEDED
from tests.browser_helpers import stop_app
from tests.chatterbox_helpers import make_chatterbox_folder
from tests.conftest import REPO_ROOT
from tests.test_jobs_support import WorkerProcess, free_port

QUEUE = {"workers": 1, "gpu_slots": 1, "cancel_grace_s": 10, "term_grace_s": 3}
UNSET = "settings families.chatterbox.model_dir is unset"


class Place:
    """A workspace, a model root outside it holding a reduced Chatterbox folder, and two settings files:
    `family` (queue + model_dir + data_roots) and `plain` (queue only)."""

    def __init__(self, root: Path) -> None:
        self.workspace = root / "workspace"
        self.models = root / "models"
        self.model_dir = make_chatterbox_folder(self.models / "chatterbox")
        (self.workspace / "tokenizers").mkdir(parents=True)
        shutil.copyfile(self.model_dir / "grapheme_mtl_merged_expanded_v1.json", self.workspace / "tokenizers" / "cb.json")
        config = {"name": "cb", "family": "chatterbox", "tokenizer": "tokenizers/cb.json"}
        (self.workspace / "configs").mkdir(parents=True)
        (self.workspace / "configs" / "cb.yaml").write_text(yaml.safe_dump(config))
        self.family = root / "family.yaml"
        self.family.write_text(yaml.safe_dump({"queue": QUEUE, "data_roots": [str(self.models)],
                                               "families": {"chatterbox": {"model_dir": str(self.model_dir)}}}))
        self.plain = root / "plain.yaml"
        self.plain.write_text(yaml.safe_dump({"queue": QUEUE}))
        self.logs = root / "logs"
        self.logs.mkdir()

    def runner(self, settings_file: Path | None) -> JobRunner:
        """Return a JobRunner submitting with `settings_file` (None: the defaults alone)."""
        return JobRunner(load_settings(settings_file) if settings_file else load_settings(), catalogue=cli_catalogue())

    def worker(self, settings_file: Path) -> WorkerProcess:
        """Start a real `python -m core worker --settings FILE` on the workspace; return it."""
        return WorkerProcess(settings_file, self.workspace, self.logs / f"worker-{settings_file.stem}.log").start()


@pytest.fixture(scope="module")
def place(module_tmp: Path) -> Iterator[Place]:
    patch = pytest.MonkeyPatch()
    made = Place(module_tmp)
    patch.setenv("LINGUAFORGE_WORKSPACE", str(made.workspace))
    patch.delenv(SETTINGS_ENV, raising=False)
    yield made
    patch.undo()


def doctor(runner: JobRunner) -> str:
    """Submit the Chatterbox doctor job; return its id."""
    return runner.submit("doctor", {"config": "configs/cb.yaml"})


def check(job: dict[str, Any], check_id: str) -> dict[str, Any]:
    """Return the doctor check `check_id` from a finished doctor job's JSON report (its last log line)."""
    lines = Path(job["log_path"]).read_text(encoding="utf-8").splitlines()
    report = json.loads(next(line for line in reversed(lines) if line.startswith("{")))
    return next(c for c in report["checks"] if c["id"] == check_id)


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_a_family_job_loads_the_settings_file_it_was_submitted_with(place: Place) -> None:
    worker = place.worker(place.plain)  # its own file does not set the model folder
    try:
        with_family = place.runner(place.family)
        submitted = doctor(with_family)
        alone = doctor(place.runner(None))
        done = with_family.wait(submitted, 180)
        plain = with_family.wait(alone, 180)
    finally:
        worker.stop()
    assert done["status"] == SUCCEEDED, done["error"]
    assert done["settings_path"] == str(place.family)
    files = check(done, "chatterbox.files")
    assert files["status"] == "pass" and str(place.model_dir) in files["message"]
    # submitted without a settings file, the job ran with its worker's, which sets no model folder
    assert plain["status"] == FAILED and plain["settings_path"] == str(place.plain)
    assert UNSET in plain["error"] and check(plain, "chatterbox.files")["status"] == "fail"


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_a_job_submitted_without_settings_loads_its_workers_file(place: Place) -> None:
    worker = place.worker(place.family)
    try:
        runner = place.runner(None)
        job = runner.wait(doctor(runner), 180)
    finally:
        worker.stop()
    assert job["status"] == SUCCEEDED, job["error"]
    assert job["settings_path"] == str(place.family)
    assert check(job, "chatterbox.files")["status"] == "pass"
    assert f"[jobs] settings: {place.family}" in Path(job["log_path"]).read_text(encoding="utf-8")


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_data_roots_reach_a_dataset_import_job(place: Place, tmp_path: Path) -> None:
    """The manifest lies in one data root, its audio in another (`models/`): with --confine-to-roots the job
    keeps the clip only when its process knows both roots from the settings file."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    audio = place.models / "clips" / "a1.wav"
    audio.parent.mkdir(exist_ok=True)
    sf.write(str(audio), 0.3 * np.sin(np.linspace(0, 2 * np.pi * 220, 16000)).astype(np.float32), 16000)
    row = {"id": "a1", "audio": str(audio), "text": "selam", "speaker": "s1", "language": "am"}
    (corpus / "manifest.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    roots = place.workspace.parent / "roots.yaml"
    roots.write_text(yaml.safe_dump({"queue": QUEUE, "data_roots": [str(corpus), str(place.models)]}))
    worker = place.worker(place.plain)
    try:
        runner = place.runner(roots)
        params = {"format": "manifest", "input": str(corpus / "manifest.jsonl"), "language": "am",
                  "confine_to_roots": True, "strict": True}
        job = runner.wait(runner.submit("dataset.import", {**params, "output": "datasets/roots"}), 180)
    finally:
        worker.stop()
    assert job["status"] == SUCCEEDED, job["error"]
    assert job["artifacts"]["kept"] == 1
    kept = [json.loads(line) for line in (place.workspace / "datasets" / "roots" / "manifest.jsonl").read_text().splitlines()]
    assert [r["id"] for r in kept] == ["a1"]


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_app_config_reaches_the_jobs_of_its_worker(place: Place) -> None:
    """`app.py --config FILE`: a job submitted from outside with the defaults runs with the app's file."""
    port = free_port()
    log = place.logs / "app.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "app.py"), "--port", str(port), "--workspace",
                                 str(place.workspace), "--config", str(place.family)],
                                cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        runner = place.runner(None)
        job = runner.wait(doctor(runner), 240)
    finally:
        stop_app(proc)
    assert proc.returncode in (0, -signal.SIGTERM), log.read_text()
    assert job["status"] == SUCCEEDED, job["error"]
    assert job["settings_path"] == str(place.family) and check(job, "chatterbox.files")["status"] == "pass"
