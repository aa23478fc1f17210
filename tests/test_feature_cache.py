"""The one feature-cache engine with a small source of its own (arrays derived from each clip's text and
file bytes): an interrupted build resumes from its journal without featurising a finished clip again,
batching changes nothing, corrupt items are rebuilt, unusable clips are skipped or refused in one line,
and the engine imports nothing from the families or the trainer."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.data.feature_cache import JOURNAL_NAME, build_feature_cache, load_item, open_cache
from core.data.manifest import ManifestRow
from core.errors import InputError
from core.tokenizers.tokenizer import Tokenizer, load_tokenizer

ROOT = Path(__file__).resolve().parents[1]


class Interrupted(Exception):
    """Stands for the kill of a build."""


@dataclass
class BytesFeatures:
    """text_ids: the text's UTF-8 bytes; codes: the clip file's bytes; an empty file is unusable."""

    stop_after: int | None = None
    seen: list[str] = field(default_factory=list)
    format = "test-features-1"
    label = "test features"
    dtypes = {"text_ids": np.int32, "codes": np.int32, "weight": np.float32}

    def fingerprint_parts(self) -> dict[str, str]:
        return {"version": "1"}

    def featurise(self, rows: list[ManifestRow]) -> list[Any]:
        if self.stop_after is not None and len(self.seen) + len(rows) > self.stop_after:
            raise Interrupted
        self.seen.extend(row.id for row in rows)
        out: list[Any] = []
        for row in rows:
            data = row.path.read_bytes()
            out.append({"text_ids": np.frombuffer(row.text.encode(), np.uint8), "codes": np.frombuffer(data, np.uint8),
                        "weight": np.full(3, len(data) / 7)} if data else f"{row.path}: empty clip")
        return out

    def index_fields(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {"codec": {"fingerprint": "bytes"}}


@pytest.fixture()
def manifest(tmp_path: Path) -> Path:
    rows = []
    for i in range(10):
        (tmp_path / f"c{i}.wav").write_bytes(bytes(range(i + 1)) * (i + 2))
        rows.append({"id": f"clip {i}", "audio": f"c{i}.wav", "text": "ab" * (i + 1), "speaker": f"s{i % 2}", "language": "en"})
    path = tmp_path / "manifest.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def tok(chatterbox_tokenizer: Path) -> Tokenizer:
    return load_tokenizer(chatterbox_tokenizer)


def _entries(path: Path) -> list[dict[str, Any]]:
    return open_cache(path, (BytesFeatures.format,)).items


def test_interrupted_build_resumes_without_featurising_a_finished_clip_again(manifest: Path, tok: Tokenizer, tmp_path: Path) -> None:
    straight = build_feature_cache(BytesFeatures(), manifest, tok, tmp_path / "a", 0.3, batch_size=3)
    killed = BytesFeatures(stop_after=6)
    with pytest.raises(Interrupted):
        build_feature_cache(killed, manifest, tok, tmp_path / "b", 0.3, batch_size=3)
    folder = tmp_path / "b" / straight.fingerprint
    journal = (folder / JOURNAL_NAME).read_text(encoding="utf-8").splitlines()
    assert len(journal) == 6 and not (folder / "index.json").exists()
    (folder / JOURNAL_NAME).write_text("\n".join(journal[:5]) + '\n{"id": "torn', encoding="utf-8")  # a torn last line
    resumed_source = BytesFeatures()
    resumed = build_feature_cache(resumed_source, manifest, tok, tmp_path / "b", 0.3, batch_size=3)
    # 5 journaled items sha-checked, the 6th written but not journaled adopted from its file; only 4 computed
    assert (resumed.reused, resumed.built, resumed.rebuilt, resumed.items) == (6, 4, 0, 10)
    assert resumed_source.seen == [f"clip {i}" for i in range(6, 10)]
    assert _entries(folder) == _entries(straight.path) and not (folder / JOURNAL_NAME).exists()


def test_batch_size_changes_nothing(manifest: Path, tok: Tokenizer, tmp_path: Path) -> None:
    one = build_feature_cache(BytesFeatures(), manifest, tok, tmp_path / "one", 0.3)
    four = build_feature_cache(BytesFeatures(), manifest, tok, tmp_path / "four", 0.3, batch_size=4)
    assert one.fingerprint == four.fingerprint and _entries(one.path) == _entries(four.path)
    index = open_cache(one.path, (BytesFeatures.format,)).data
    entry = index["items"][9]
    item = load_item(one.path, entry)
    assert item["text_ids"].tolist() == list(b"ab" * 10) and item["codes"].dtype == np.int32 and entry["n_codes"] == 10 * 11
    assert item["weight"].tolist() == pytest.approx([110 / 7] * 3) and entry["text"] == "ab" * 10 and entry["max_code"] == 9 and entry["max_id"] == ord("b")
    assert index["histograms"]["n_text"]["max"] == 20 and sum(index["histograms"]["n_codes"]["counts"]) == 10
    assert index["codec"] == {"fingerprint": "bytes"} and index["parts"]["version"] == "1"
    assert index["splits"]["train"] + index["splits"]["val"] == 10
    other = build_feature_cache(BytesFeatures(), manifest, tok, tmp_path / "one", 0.5)
    assert other.fingerprint != one.fingerprint, "the val ratio is in the fingerprint"


def test_corrupt_item_is_rebuilt_and_unusable_clips_are_skipped_or_refused(manifest: Path, tok: Tokenizer, tmp_path: Path) -> None:
    first = build_feature_cache(BytesFeatures(), manifest, tok, tmp_path, 0.3)
    victim = _entries(first.path)[2]
    (first.path / victim["file"]).write_bytes(b"not an npz")
    with pytest.raises(InputError, match="fails its checksum"):
        load_item(first.path, victim)
    source = BytesFeatures()
    again = build_feature_cache(source, manifest, tok, tmp_path, 0.3)
    assert (again.rebuilt, again.built, again.reused) == (1, 1, 9) and source.seen == ["clip 2"]
    assert _entries(first.path)[2] == victim

    (manifest.parent / "c3.wav").write_bytes(b"")
    manifest.write_text(manifest.read_text(encoding="utf-8") + "{broken\n", encoding="utf-8")
    skipped = build_feature_cache(BytesFeatures(), manifest, tok, tmp_path, 0.3)
    assert skipped.items == 9 and [(s["id"], s["line"]) for s in skipped.skipped] == [(None, 11), ("clip 3", 4)]
    lines = manifest.read_text(encoding="utf-8").splitlines()
    only_empty = tmp_path / "empty.jsonl"
    only_empty.write_text(lines[3] + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"empty\.jsonl: no clip could be featurised\. First problem: .*c3\.wav: empty clip"):
        build_feature_cache(BytesFeatures(), only_empty, tok, tmp_path, 0.3)


def test_engine_imports_nothing_from_families_or_training() -> None:
    tree = ast.parse((ROOT / "core" / "data" / "feature_cache.py").read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imported and not {m for m in imported if m.startswith(("core.families", "core.training", "core.checks"))}


def test_a_speaker_split_holds_whole_speakers_out_and_needs_two(manifest: Path, tok: Tokenizer, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines()]
    for i, row in enumerate(rows):
        row["speaker"] = f"s{i % 4}"  # four speakers, clips 0/4/8, 1/5/9, 2/6, 3/7
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    by_clip = build_feature_cache(BytesFeatures(), manifest, tok, tmp_path / "c", 0.3)
    by_speaker = build_feature_cache(BytesFeatures(), manifest, tok, tmp_path / "c", 0.3, split_by="speaker")
    assert by_speaker.fingerprint != by_clip.fingerprint  # a cache never serves the other split rule
    splits: dict[str, set[str]] = {}
    for entry in _entries(by_speaker.path):
        splits.setdefault(entry["split"], set()).add(entry["speaker"])
    assert splits["train"] and splits["val"] and not splits["train"] & splits["val"]
    val_clips = sum(1 for e in _entries(by_speaker.path) if e["split"] == "val")
    assert 2 <= val_clips <= 6  # whole speakers until at least 30% of the 10 clips: one or two speakers
    for row in rows:
        row["speaker"] = "only"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    source = BytesFeatures()
    with pytest.raises(InputError, match=r"split by speaker: 1 speaker\(s\), 2 needed"):
        build_feature_cache(source, manifest, tok, tmp_path / "d", 0.3, split_by="speaker")
    assert source.seen == []  # refused before any clip was featurised
