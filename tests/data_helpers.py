"""Test helpers: small real spoken datasets (espeak-ng), tiny codecs, and an in-process CLI runner.

Rendering and codec training are built once per test run, shared by the xdist workers (tests/artefacts.py),
and copied to each caller's folder, so every test gets its own writable files without paying for them twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
from pathlib import Path

import pytest

from core.cli import main as cli_main
from core.data import codec_training
from core.data import sample as sample_module
from core.data.codec_training import train_codec
from core.data.sample import sample_dataset
from tests.artefacts import built_once
from tests.conftest import CliRun

SAMPLE_RATE = 16000


def require_espeak() -> None:
    """Skip the calling test when espeak-ng is not installed (./test.sh installs it on Debian)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed; ./test.sh installs it on Debian")


def make_espeak_dataset(dest: Path, per_language: int = 12, languages: tuple[str, ...] = ("en", "am")) -> Path:
    """Put `per_language` espeak clips per language into the folder `dest`; return its manifest.jsonl.

    Two espeak voices per language are the speakers. Skips the test when espeak-ng is missing.
    """
    require_espeak()
    rendered = built_once(f"espeak-{'-'.join(languages)}-{per_language}",
                          {"languages": list(languages), "per_language": per_language, "rate": SAMPLE_RATE},
                          [Path(__file__), Path(sample_module.__file__), Path(shutil.which("espeak-ng"))],
                          lambda folder: sample_dataset(folder / "dataset", SAMPLE_RATE, list(languages), per_language))
    shutil.copytree(rendered / "dataset", dest, dirs_exist_ok=True)
    return dest / "manifest.jsonl"


def make_codec(manifest: Path, dest: Path, codebook_size: int = 64, iterations: int = 30) -> Path:
    """Write a small codec trained on `manifest` to `dest` and return `dest`."""
    manifest_sha = hashlib.sha256(manifest.read_bytes()).hexdigest()
    trained = built_once("codec", {"manifest": manifest_sha, "codebook_size": codebook_size, "iterations": iterations},
                         [Path(__file__), Path(codec_training.__file__)], lambda folder: train_codec(
                             manifest, codebook_size=codebook_size, iterations=iterations).save(folder / "codec.pt"),
                         ["torch", "numpy"])
    shutil.copyfile(trained / "codec.pt", dest)
    return dest


def run_cli(*args: object) -> CliRun:
    """Run `python -m core ARGS…` in this process (same parser and handlers) and return a CliRun."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main([str(a) for a in args])
    return CliRun(code, out.getvalue(), err.getvalue())
