"""The path rule: command-line paths resolve against the current directory; run-config paths, job
parameters and dashboard fields against the workspace; jobs receive absolute paths."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from core.config import load_settings
from core.cli.catalogue import cli_catalogue
from core.paths import CLI_PATH, PathType
from jobs.runner import JobRunner
from tests.fixture_paths import INDEXTTS_BPE as FIXTURE_BPE

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def elsewhere(tmp_path: Path, workspace: Path) -> Path:
    """A current directory that is neither the workspace nor the checkout, holding a tokenizer copy."""
    folder = tmp_path / "elsewhere"
    (folder / "tokenizers").mkdir(parents=True)
    shutil.copyfile(FIXTURE_BPE, folder / "tokenizers" / "bpe.model")
    (workspace / "tokenizers").mkdir()
    return folder


def run_from(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m core ARGS --json` with `cwd` as the current directory."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-m", "core", *args, "--json"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_path_type_resolves_against_a_base_and_keeps_keywords(tmp_path: Path) -> None:
    assert CLI_PATH.absolute("a/b.txt", tmp_path) == tmp_path / "a" / "b.txt"
    assert CLI_PATH.absolute("/x/../y.txt", tmp_path) == Path("/y.txt")
    assert CLI_PATH.absolute("~/f", tmp_path) == Path.home() / "f"
    resume = PathType(keywords=("auto",))
    assert resume.absolute("auto", tmp_path) == "auto"
    assert resume.absolute("ck.pt", tmp_path) == tmp_path / "ck.pt"
    preset = PathType(suffixes=(".yaml", ".yml"))
    assert preset.absolute("quick", tmp_path) == "quick"
    assert preset.absolute("my.yaml", tmp_path) == tmp_path / "my.yaml"
    params = cli_catalogue().absolute_paths("tokenizer.train", {"corpus": ["a.txt", "/abs/b.txt"], "vocab_size": "8",
                                                                "output": "tok.model"}, tmp_path)
    assert params == {"corpus": [str(tmp_path / "a.txt"), "/abs/b.txt"], "vocab_size": "8",
                      "output": str(tmp_path / "tok.model")}


def test_command_line_paths_resolve_against_the_current_directory(elsewhere: Path, workspace: Path) -> None:
    manifest = elsewhere / "m.jsonl"
    manifest.write_text(json.dumps({"id": "a", "audio": "a.wav", "text": "Hello there.", "language": "en",
                                    "speaker": "s", "duration": 1.0}) + "\n", encoding="utf-8")
    run = run_from(elsewhere, "corpus", "collect", "--manifest", "m.jsonl", "--output", "out/corpus.txt")
    assert run.returncode == 0, run.stderr
    assert (elsewhere / "out" / "corpus.txt").read_text(encoding="utf-8").strip() == "Hello there."
    assert not (workspace / "out").exists()


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_run_config_found_from_the_cwd_names_workspace_files(elsewhere: Path, workspace: Path) -> None:
    """`doctor --config run.yaml` finds the config in the current directory; the tokenizer the config
    names resolves in the workspace, not beside the config (elsewhere/tokenizers/bpe.model exists too)."""
    shutil.copyfile(FIXTURE_BPE, workspace / "tokenizers" / "bpe.model")
    (elsewhere / "run.yaml").write_text(yaml.safe_dump({"name": "r", "task": "lm", "tokenizer": "tokenizers/bpe.model"}))
    run = run_from(elsewhere, "doctor", "--config", "run.yaml")
    check = next(c for c in json.loads(run.stdout)["checks"] if c["id"] == "tokenizer")
    assert check["status"] == "pass" and str(workspace / "tokenizers" / "bpe.model") in check["message"], run.stdout
    assert str(elsewhere / "run.yaml") in check["message"]


def test_job_parameters_resolve_against_the_workspace(elsewhere: Path, workspace: Path) -> None:
    shutil.copyfile(FIXTURE_BPE, workspace / "tokenizers" / "ws.model")
    runner = JobRunner(load_settings(), catalogue=cli_catalogue())
    job = runner.get_job(runner.submit("doctor", {"tokenizer": "tokenizers/ws.model"}))
    assert job["params"]["tokenizer"] == str(workspace / "tokenizers" / "ws.model")
    assert job["argv"] == ["doctor", "--tokenizer", str(workspace / "tokenizers" / "ws.model"), "--json"]

    # `jobs submit` typed in another folder: its --param and --config values are job parameters
    (workspace / "runs" / "r").mkdir(parents=True)
    (workspace / "runs" / "r" / "config.yaml").write_text("name: r\n")
    run = run_from(elsewhere, "jobs", "submit", "train", "--config", "runs/r/config.yaml")
    assert run.returncode == 0, run.stderr
    submitted = json.loads(run.stdout)["job"]
    config = str(workspace / "runs" / "r" / "config.yaml")
    assert submitted["argv"] == ["train", "--config", config, "--resume", "auto", "--json"]
    assert submitted["run_dir"] == str(workspace / "runs" / "r")


def test_dashboard_preview_is_the_submitted_jobs_command(workspace: Path) -> None:
    from gradio_app.common import UIContext
    from gradio_app.runner import JobRunner as DashboardRunner
    from gradio_app.tabs.training import preview_command

    settings = load_settings()
    ctx = UIContext(settings, DashboardRunner(settings, cli_catalogue()))
    (workspace / "runs" / "r").mkdir(parents=True)
    (workspace / "runs" / "r" / "config.yaml").write_text("name: r\n")
    preview = preview_command(ctx, "r")
    job = ctx.runner.get(ctx.runner.submit("train", {"config": "runs/r/config.yaml"}))
    assert preview == shlex.join(["python", "-m", "core", *job["argv"]])
    assert preview == f"python -m core train --config {workspace}/runs/r/config.yaml --resume auto --json"
    on_two = ctx.runner.get(ctx.runner.submit("train", {"config": "runs/r/config.yaml"}, nproc=2))  # the form's GPU count
    assert on_two["nproc"] == 2 and preview_command(ctx, "r", 2) == (
        f"python -m torch.distributed.run --standalone --nproc_per_node 2 -m core {shlex.join(on_two['argv'])}")
    assert preview_command(ctx, "bad name").startswith("# run name 'bad name'")
