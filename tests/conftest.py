"""Shared pytest fixtures: a temporary workspace, copies of the real fixture tokenizers, a CLI runner."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.fixture_paths import FIXTURES

REPO_ROOT = Path(__file__).resolve().parent.parent

# tests/budget.py: every run ends with each file's time, the slowest tests and those over the budget.
# tests/artefacts.py: expensive artefacts built once per run, shared by the xdist workers.
# pytester: tests/test_budget.py and tests/test_artefacts.py run small pytest sessions with them.
pytest_plugins = ("tests.budget", "tests.artefacts", "pytester")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the modules with browser tests first, then those with slow tests, then the rest, each module's
    tests kept together and in file order. With `-n` (pytest-xdist, `--dist loadfile`, as ./test.sh runs
    them) the long modules then start at once and the short ones fill the gaps, instead of one long module
    collected last running alone at the end."""
    def rank(module: str) -> int:
        marks = {mark.name for item in by_module[module] for mark in item.iter_markers()}
        return 0 if "browser" in marks else 1 if "slow" in marks else 2

    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::")[0], []).append(item)
    items[:] = [item for module in sorted(by_module, key=rank) for item in by_module[module]]


@pytest.fixture(scope="module")
def module_tmp(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder for one test module's shared fixtures, deleted after the module's last test.

    It is kept when a test of the module failed, for a post-mortem. The family workspaces hold
    hundreds of MB of checkpoints each; keeping them all to the session's end would fill a small disk.
    """
    path = tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])
    failed_before = request.session.testsfailed
    yield path
    if request.session.testsfailed == failed_before:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh workspace folder, set through LINGUAFORGE_WORKSPACE for the test."""
    root = tmp_path / "workspace"
    root.mkdir()
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(root))
    return root


def _copy_fixture(relative: str, dest_dir: Path) -> Path:
    source = FIXTURES / relative
    dest = dest_dir / source.name
    shutil.copyfile(source, dest)
    return dest


@pytest.fixture
def indextts_bpe(tmp_path: Path) -> Path:
    """A writable copy of the real IndexTTS2 SentencePiece model (12,000 pieces)."""
    return _copy_fixture("indextts2/bpe.model", tmp_path)


@pytest.fixture
def indextts_config(tmp_path: Path) -> Path:
    """A writable copy of the real IndexTTS2 model config.yaml."""
    return _copy_fixture("indextts2/config.yaml", tmp_path)


@pytest.fixture
def chatterbox_tokenizer(tmp_path: Path) -> Path:
    """A writable copy of the real Chatterbox multilingual tokenizer JSON (2,454 ids)."""
    return _copy_fixture("chatterbox/tokenizer_mtl_2454.json", tmp_path)


@dataclass
class CliRun:
    """The outcome of one `python -m core …` run."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        """Return stdout parsed as the single JSON object `--json` prints."""
        return json.loads(self.stdout)


@pytest.fixture
def cli(workspace: Path):
    """Run `python -m core ARGS…` in a real subprocess and return a CliRun."""

    def run(*args: str, timeout: float = 600) -> CliRun:
        proc = subprocess.run(
            [sys.executable, "-m", "core", *map(str, args)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return CliRun(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def grow_sentencepiece(tmp_path: Path):
    """Return `grow(base, size, name)`: a copy of a SentencePiece model grown to `size` pieces by
    appending NORMAL pieces `▁QXA`, `▁QXB`, … (upper-case letters, scores below the base minimum)."""
    from tests.sp_helpers import grow_to

    def grow(base: Path, size: int, name: str = "grown.model") -> Path:
        return grow_to(base, size, tmp_path / name)

    return grow
