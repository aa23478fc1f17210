"""The whole data path in one pass: `dataset import --codec` decodes each clip once, writes the same dataset
as a plain import and the own codec's cache `preprocess` builds from it, item for item."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import core.audio
from core.data.cache import SamePassCache, build_cache
from core.data.feature_cache import STAGING_PREFIX
from core.data.filter_config import FilterConfig
from core.data.importing import import_dataset
from core.errors import InputError
from tests.cv_helpers import make_release, plant_faults
from tests.data_helpers import make_codec, make_espeak_dataset, run_cli
from tests.test_feature_shards import cache_contents

RATE = 16000


@pytest.fixture(scope="module")
def release(module_tmp: Path) -> dict[str, Path]:
    """A Common Voice release (mp3, 32 kHz) of 16 espeak clips with planted faults, and a codec."""
    found = make_release(module_tmp / "cv", per_language=8, languages=("en", "am"))
    plant_faults(found)
    manifest = make_espeak_dataset(module_tmp / "codec-data", per_language=8)
    return {"release": found.folder, "codec": make_codec(manifest, module_tmp / "codec.pt")}


def dataset_files(folder: Path) -> dict[str, str]:
    """Return the sha256 of each file of an import's output, its own folder's name written as OUT."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes().replace(str(folder).encode(), b"OUT")).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_the_same_pass_cache_is_the_cache_preprocess_builds_and_the_dataset_is_unchanged(
        release: dict[str, Path], chatterbox_tokenizer: Path, tmp_path: Path) -> None:
    plain = import_dataset("commonvoice", release["release"], tmp_path / "plain" / "ds", RATE, filters=FilterConfig(), workers=2)
    root = tmp_path / "fused"
    with SamePassCache(chatterbox_tokenizer, release["codec"], root / "cache") as cache:
        fused = import_dataset("commonvoice", release["release"], root / "ds", RATE, filters=FilterConfig(), workers=2, cache=cache)
    assert dataset_files(root / "ds") == dataset_files(tmp_path / "plain" / "ds"), "the dataset a plain import writes"
    assert fused.kept == plain.kept >= 10 and fused.filters["removed"]["duplicate"] >= 1
    info = fused.cache
    assert info is not None and info.complete and (info.items, info.built, info.reused) == (fused.kept, 0, fused.kept)
    assert [p.name for p in (root / "cache").iterdir()] == [info.fingerprint], "no staging folder is left"
    reference = build_cache(fused.manifest, chatterbox_tokenizer, release["codec"], tmp_path / "reference", workers=1)
    assert reference.fingerprint == info.fingerprint and reference.built == fused.kept
    assert cache_contents(info.path) == cache_contents(reference.path)


def test_each_clip_is_decoded_once_on_the_whole_path(release: dict[str, Path], chatterbox_tokenizer: Path,
                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[str] = []
    real = core.audio._decode

    def counting(source: Any, name: Any, sample_rate: int | None) -> Any:
        decoded.append(Path(str(name)).name)
        return real(source, name, sample_rate)

    monkeypatch.setattr(core.audio, "_decode", counting)
    with SamePassCache(chatterbox_tokenizer, release["codec"], tmp_path / "cache") as cache:
        summary = import_dataset("commonvoice", release["release"], tmp_path / "ds", RATE, filters=FilterConfig(),
                                 workers=1, cache=cache)
    rows = [json.loads(line) for line in summary.manifest.read_text(encoding="utf-8").splitlines()]
    assert summary.cache is not None and summary.cache.items == len(rows) == summary.kept
    assert len(decoded) == len(set(decoded)), "a clip was decoded twice"
    assert {f"{row['id']}.mp3" for row in rows} <= set(decoded) and not any(name.endswith(".wav") for name in decoded)


def test_a_failed_import_leaves_no_staged_items(release: dict[str, Path], chatterbox_tokenizer: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no clip could be imported"):
        with SamePassCache(chatterbox_tokenizer, release["codec"], tmp_path / "cache") as cache:
            import_dataset("commonvoice", release["release"], tmp_path / "ds", RATE, duration_range=(60.0, 61.0),
                           workers=2, cache=cache)
    assert not list((tmp_path / "cache").glob(f"{STAGING_PREFIX}*"))


def test_import_cli_builds_the_cache_in_the_same_pass(release: dict[str, Path], chatterbox_tokenizer: Path,
                                                     tmp_path: Path) -> None:
    args = ("dataset", "import", "--format", "commonvoice", "--input", release["release"], "--output", tmp_path / "ds",
            "--codec", release["codec"], "--cache-root", tmp_path / "cache")
    refused = run_cli(*args)
    assert refused.code == 2 and "--codec builds the own codec's cache in the same pass and needs --tokenizer" in refused.stderr
    assert not (tmp_path / "ds").exists() and not (tmp_path / "cache").exists()
    run = run_cli(*args, "--tokenizer", chatterbox_tokenizer, "--json")
    assert run.code == 0, run.stderr
    report = run.json()
    assert report["cache"]["items"] == report["kept"] and report["cache"]["built"] == 0 and report["cache"]["complete"]
    assert Path(report["cache"]["path"]).parent == tmp_path / "cache"
    again = run_cli("preprocess", "--manifest", tmp_path / "ds" / "manifest.jsonl", "--tokenizer", chatterbox_tokenizer,
                    "--codec", release["codec"], "--output", tmp_path / "cache", "--json")
    assert again.code == 0 and again.json()["path"] == report["cache"]["path"] and again.json()["built"] == 0
