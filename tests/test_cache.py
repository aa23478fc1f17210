"""The preprocessing cache on real espeak audio: contents, reuse, invalidation, repair, resume,
cleaning and the doctor checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.audio import read_audio
from core.data.cache import build_cache
from core.data.feature_cache import JOURNAL_NAME, load_item, open_cache
from core.data.cache_admin import clean_caches, list_caches
from core.speech.codec import load_codec
from core.checks.doctor import DoctorContext, run_doctor
from core.errors import InputError
from core.text import NORMALIZER_VERSION
from core.data.manifest import read_manifest
from core.text import normalize_text
from core.tokenizers.tokenizer import load_tokenizer
from tests.data_helpers import make_codec, make_espeak_dataset, run_cli


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cachedata")
    manifest = make_espeak_dataset(root / "ds", per_language=12)
    return {"manifest": manifest, "codec": make_codec(manifest, root / "codec.pt")}


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_preprocess_cli_writes_index_and_items(cli, data, chatterbox_tokenizer: Path, tmp_path: Path) -> None:
    run = cli("preprocess", "--manifest", data["manifest"], "--tokenizer", chatterbox_tokenizer,
              "--codec", data["codec"], "--output", tmp_path / "cache", "--json")
    assert run.code == 0, run.stderr
    report = run.json()
    assert (report["items"], report["built"], report["reused"]) == (24, 24, 0)
    index = open_cache(report["path"])
    assert index.path.name == report["fingerprint"] and index.path.parent == tmp_path / "cache"
    tokenizer, codec = load_tokenizer(chatterbox_tokenizer), load_codec(data["codec"])
    assert index.tokenizer_fingerprint == tokenizer.fingerprint
    assert index.codec_fingerprint == codec.fingerprint
    assert index.data["normalizer"] == {"name": "lf-norm", "version": NORMALIZER_VERSION, "uppercase": False}
    assert sum(index.data["histograms"]["n_codes"]["counts"]) == 24
    assert index.data["splits"]["train"] + index.data["splits"]["val"] == 24
    assert not (index.path / JOURNAL_NAME).exists()
    rows = {r.id: r for r in read_manifest(data["manifest"])[0]}
    max_id = 0
    for entry in index.items:
        item = load_item(index.path, entry)
        assert item["text_ids"].dtype == np.int32 and item["codes"].dtype == np.int32
        assert item["ref_mel"].dtype == np.float16 and item["ref_mel"].shape == (entry["n_codes"], 80)
        max_id = max(max_id, int(item["text_ids"].max()))
    assert index.max_text_id == max_id
    entry = index.items[0]
    row = rows[entry["id"]]
    item = load_item(index.path, entry)
    assert item["text_ids"].tolist() == tokenizer.encode(normalize_text(row.text, row.language))
    assert item["codes"].tolist() == codec.encode(read_audio(row.path, 16000)[0]).tolist()


def test_reuse_invalidation_repair_and_resume(data, chatterbox_tokenizer: Path, indextts_bpe: Path, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    first = build_cache(data["manifest"], chatterbox_tokenizer, data["codec"], root, workers=1)
    again = build_cache(data["manifest"], chatterbox_tokenizer, data["codec"], root, workers=1)
    assert (again.path, again.built, again.reused) == (first.path, 0, 24)

    other = build_cache(data["manifest"], indextts_bpe, data["codec"], root, workers=2)
    assert other.path != first.path and other.built == 24, "a different tokenizer never reuses a cache"
    assert open_cache(other.path).data["normalizer"]["uppercase"] is True, "IndexTTS2 pieces are upper-case"

    index = open_cache(first.path)
    victim = index.items[3]
    damaged = bytearray((first.path / victim["file"]).read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    (first.path / victim["file"]).write_bytes(bytes(damaged))
    with pytest.raises(InputError, match="checksum"):
        load_item(first.path, victim)
    repaired = build_cache(data["manifest"], chatterbox_tokenizer, data["codec"], root, workers=1)
    assert (repaired.rebuilt, repaired.built, repaired.reused) == (1, 1, 23)
    assert load_item(first.path, open_cache(first.path).items[3])["codes"].size == victim["n_codes"]

    entries = open_cache(first.path).items
    (first.path / "index.json").unlink()
    (first.path / JOURNAL_NAME).write_text("".join(json.dumps(e) + "\n" for e in entries[:10]) + '{"id": "torn', encoding="utf-8")
    for entry in entries[10:15]:
        (first.path / entry["file"]).unlink()
    resumed = build_cache(data["manifest"], chatterbox_tokenizer, data["codec"], root, workers=1)
    # 10 journaled items reused after their sha check, the 9 written but not journaled adopted, the 5 deleted built
    assert (resumed.reused, resumed.built, resumed.items) == (19, 5, 24)
    assert [e["id"] for e in open_cache(first.path).items] == [e["id"] for e in entries]


def test_changed_manifest_gets_a_new_folder_and_bad_rows_are_skipped(data, chatterbox_tokenizer: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    lines = data["manifest"].read_text(encoding="utf-8").splitlines()[:4]
    rows = [json.loads(line) for line in lines]
    for row in rows:
        row["audio"] = str(data["manifest"].parent / row["audio"])
    rows.append(dict(rows[0], id="gone", audio=str(tmp_path / "gone.wav")))
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n", encoding="utf-8")
    info = build_cache(manifest, chatterbox_tokenizer, data["codec"], tmp_path / "cache", workers=1)
    assert info.items == 4
    assert {s["line"] for s in info.skipped} == {5, 6}
    assert open_cache(info.path).data["skipped"][0]["line"] == 5
    (info.path / "index.json").write_text("{torn", encoding="utf-8")
    with pytest.raises(InputError, match="unreadable cache index"):
        open_cache(info.path)
    again = build_cache(manifest, chatterbox_tokenizer, data["codec"], tmp_path / "cache", workers=1)
    assert (again.path, again.built, again.reused, again.items) == (info.path, 0, 4, 4), "a torn index loses no item"


def test_cache_list_and_clean_unused(data, chatterbox_tokenizer: Path, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    kept = build_cache(data["manifest"], chatterbox_tokenizer, data["codec"], root, workers=1)
    doomed_tokenizer = tmp_path / "copy.json"
    shutil.copy(chatterbox_tokenizer, doomed_tokenizer)
    doomed_tokenizer.write_text(doomed_tokenizer.read_text(encoding="utf-8") + " ", encoding="utf-8")
    stale = build_cache(data["manifest"], doomed_tokenizer, data["codec"], root, workers=1)
    doomed_tokenizer.unlink()
    (root / ("0" * 64)).mkdir()
    (root / ("1" * 64)).mkdir()
    (root / ("1" * 64) / "index.json").write_text("{torn", encoding="utf-8")
    records = {r["fingerprint"]: r for r in list_caches(root)}
    assert "unreadable cache index" in records["1" * 64]["reasons"][0] and "items" not in records["1" * 64]
    assert records[kept.fingerprint]["unused"] is False and records[kept.fingerprint]["items"] == 24
    assert records[stale.fingerprint]["reasons"] == ["tokenizer missing or changed"]
    assert records["0" * 64]["reasons"] == ["incomplete build (no index.json)"]
    removed = {r["fingerprint"] for r in clean_caches(root, unused_only=True)}
    assert removed == {stale.fingerprint, "0" * 64, "1" * 64}
    assert [p.name for p in root.iterdir()] == [kept.fingerprint]
    clean_caches(root, unused_only=False)
    assert list(root.iterdir()) == []


def test_doctor_checks_cache_against_tokenizer_rows_and_limits(data, chatterbox_tokenizer: Path, indextts_bpe: Path, tmp_path: Path) -> None:
    info = build_cache(data["manifest"], chatterbox_tokenizer, data["codec"], tmp_path / "cache", workers=1)
    index = open_cache(info.path)
    longest = index.data["histograms"]["n_codes"]["max"]
    ctx = DoctorContext(tokenizer_path=chatterbox_tokenizer, cache_dir=info.path,
                        extras={"max_text_tokens": 1000, "max_speech_tokens": longest - 1})
    results = {r.id: r for r in run_doctor(ctx).checks}
    assert results["cache.tokenizer"].status == "pass"
    assert results["cache.max_text_id"].status == "pass"
    too_long = sum(1 for e in index.items if e["n_codes"] > longest - 1)
    assert results["cache.lengths"].status == "warn"
    assert results["cache.lengths"].message.startswith(f"{too_long} of 24 clips exceed")
    ctx = DoctorContext(tokenizer_path=indextts_bpe, cache_dir=info.path)
    results = {r.id: r for r in run_doctor(ctx).checks}
    assert results["cache.tokenizer"].status == "fail"
    assert "preprocess" in results["cache.tokenizer"].fix


def test_doctor_cli_checks_a_cache_folder(data, chatterbox_tokenizer: Path, indextts_bpe: Path, tmp_path: Path) -> None:
    info = build_cache(data["manifest"], chatterbox_tokenizer, data["codec"], tmp_path / "cache", workers=1)
    run = run_cli("doctor", "--tokenizer", indextts_bpe, "--cache", info.path, "--json")
    checks = {c["id"]: c for c in run.json()["checks"]}
    assert run.code == 2
    assert checks["cache.tokenizer"]["status"] == "fail"
    run = run_cli("doctor", "--tokenizer", chatterbox_tokenizer, "--cache", info.path, "--json")
    assert run.code == 0, run.stdout
    assert {c["id"]: c["status"] for c in run.json()["checks"]}["cache.tokenizer"] == "pass"


def test_pool_never_forks_a_process_that_runs_other_threads(data, chatterbox_tokenizer: Path, tmp_path: Path) -> None:
    import threading

    from core.data.workers import pool_context

    stop = threading.Event()
    lock = threading.Lock()

    def hold_lock() -> None:
        with lock:
            stop.wait(60)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert pool_context().get_start_method() == "forkserver"
        info = build_cache(data["manifest"], chatterbox_tokenizer, data["codec"], tmp_path / "cache", workers=2)
    finally:
        stop.set()
        holder.join()
    assert len(open_cache(info.path).items) == 24
