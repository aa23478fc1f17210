"""Test helpers: small real spoken datasets (espeak-ng), tiny codecs, and an in-process CLI runner.

Rendering and codec training are memoised per test session and copied to each caller's folder,
so every test gets its own writable files without paying for them twice.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import shutil
import tempfile
from pathlib import Path

import pytest

from core.cli import main as cli_main
from core.data.codec_training import train_codec
from core.data.sample import sample_dataset
from tests.conftest import CliRun

SAMPLE_RATE = 16000
_SESSION_DIR: Path | None = None


def _session_dir() -> Path:
    global _SESSION_DIR
    if _SESSION_DIR is None:
        _SESSION_DIR = Path(tempfile.mkdtemp(prefix="lf-test-data-"))
        atexit.register(shutil.rmtree, _SESSION_DIR, True)
    return _SESSION_DIR


def require_espeak() -> None:
    """Skip the calling test when espeak-ng is not installed (./test.sh installs it on Debian)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed; ./test.sh installs it on Debian")


def make_espeak_dataset(dest: Path, per_language: int = 12, languages: tuple[str, ...] = ("en", "am")) -> Path:
    """Put `per_language` espeak clips per language into the folder `dest`; return its manifest.jsonl.

    Two espeak voices per language are the speakers. Skips the test when espeak-ng is missing.
    """
    require_espeak()
    rendered = _session_dir() / f"espeak-{'-'.join(languages)}-{per_language}"
    if not (rendered / "manifest.jsonl").is_file():
        sample_dataset(rendered, SAMPLE_RATE, list(languages), per_language)
    shutil.copytree(rendered, dest, dirs_exist_ok=True)
    return dest / "manifest.jsonl"


def make_codec(manifest: Path, dest: Path, codebook_size: int = 64, iterations: int = 30) -> Path:
    """Write a small codec trained on `manifest` to `dest` and return `dest`."""
    key = hashlib.sha256(manifest.read_bytes() + f"{codebook_size}/{iterations}".encode()).hexdigest()[:16]
    trained = _session_dir() / f"codec-{key}.pt"
    if not trained.is_file():
        train_codec(manifest, codebook_size=codebook_size, iterations=iterations).save(trained)
    shutil.copyfile(trained, dest)
    return dest


def run_cli(*args: object) -> CliRun:
    """Run `python -m core ARGS…` in this process (same parser and handlers) and return a CliRun."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main([str(a) for a in args])
    return CliRun(code, out.getvalue(), err.getvalue())
