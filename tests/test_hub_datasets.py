"""`dataset import --format hf --input hf:owner/name[:config][@split]`: a Hub dataset loaded with `datasets` from
the user's cache, offline. The test builds the cached dataset with `datasets` itself (its parquet builder, moved
into the layout `load_dataset` reads a Hub dataset from: `datasets/owner___name/<config>/0.0.0/<hash>/`), with
espeak clips, one row without audio and one too short; the import keeps the clips and rejects those rows."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.data_helpers import make_espeak_dataset
from tests.hub_helpers import cache_hub_dataset

pytestmark = pytest.mark.slow  # three CLI processes importing `datasets`, espeak clips


def _wav_bytes(seconds: float) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(int(16000 * seconds), dtype="float32"), 16000, format="WAV")
    return buf.getvalue()


@pytest.fixture
def cached(tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    manifest = make_espeak_dataset(tmp_path / "espeak", per_language=3, languages=("am",))
    clips = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines()]
    audio = [{"bytes": (manifest.parent / c["audio"]).read_bytes(), "path": Path(c["audio"]).name} for c in clips]
    rows = {"audio": [*audio, None, {"bytes": _wav_bytes(0.1), "path": "short.wav"}],
            "text": [*(c["text"] for c in clips), "ሰላም", "ሰላም"], "speaker": [*(c["speaker"] for c in clips), "x", "y"]}
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    return cache_hub_dataset(tmp_path / "hf", "someone/amharic-speech", "am", "train", rows)


def test_a_cached_hub_dataset_imports_by_id_with_rejects(cli, workspace: Path, cached: Path) -> None:
    run = cli("dataset", "import", "--format", "hf", "--input", "hf:someone/amharic-speech:am@train",
              "--output", str(workspace / "datasets" / "hub"), "--speaker-column", "speaker", "--language", "am",
              "--min-duration", "0.3", "--json")
    assert run.code == 0, run.stderr
    summary = run.json()
    assert summary["kept"] == 3 and summary["rejected"] == 2
    rows = [json.loads(line) for line in (workspace / "datasets" / "hub" / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["language"] for r in rows} == {"am"} and len({r["speaker"] for r in rows}) == 2
    rejects = [json.loads(line) for line in (workspace / "datasets" / "hub" / "rejects.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in rejects] == [4, 5]
    assert "holds no audio bytes or path" in rejects[0]["reason"] and "short" in json.dumps(rejects[1])
    assert all(r["source"] == str(cached / "amharic-speech-train.arrow") for r in rejects)


def test_an_id_not_in_the_cache_or_a_split_it_lacks_is_refused_in_one_line_offline(cli, workspace: Path, cached: Path) -> None:
    out = workspace / "datasets" / "x"
    run = cli("dataset", "import", "--format", "hf", "--input", "hf:someone/missing", "--output", str(out))
    assert run.code == 2 and run.stderr.count("\n") == 1 and not out.exists()
    assert run.stderr.startswith("error: --input hf:someone/missing: someone/missing is not in the datasets cache and "
                                 "the Hub cannot be reached")
    run = cli("dataset", "import", "--format", "hf", "--input", "hf:someone/amharic-speech:am@test", "--output", str(out))
    assert run.code == 2 and run.stderr == ("error: --input hf:someone/amharic-speech:am@test: Unknown split \"test\". "
                                            "Should be one of ['train'].\n")
    run = cli("dataset", "import", "--format", "ljspeech", "--input", "hf:someone/amharic-speech", "--output", str(out))
    assert run.code == 2 and "a Hub dataset id goes with --format hf" in run.stderr
