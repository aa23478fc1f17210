"""Test helpers that make small, real spoken datasets quickly (espeak-ng) and tiny codecs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from core.codec import train_codec
from core.dataset_sample import sample_dataset

SAMPLE_RATE = 16000


def require_espeak() -> None:
    """Skip the calling test when espeak-ng is not installed (./test.sh installs it where it can)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed; ./test.sh installs it on Debian")


def make_espeak_dataset(dest: Path, per_language: int = 12, languages: tuple[str, ...] = ("en", "am")) -> Path:
    """Render `per_language` espeak clips per language into `dest`; return its manifest.jsonl path.

    Two espeak voices per language are the speakers. Skips the test when espeak-ng is missing.
    """
    require_espeak()
    summary = sample_dataset(dest, SAMPLE_RATE, list(languages), per_language)
    return summary.manifest


def make_codec(manifest: Path, dest: Path, codebook_size: int = 64, iterations: int = 30) -> Path:
    """Train a small codec on `manifest`, save it to `dest` and return `dest`."""
    train_codec(manifest, codebook_size=codebook_size, iterations=iterations).save(dest)
    return dest
