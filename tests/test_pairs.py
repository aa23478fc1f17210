"""Prompt pairs over a real cache: same speaker, never itself, single-clip speakers reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.data.cache import build_cache
from core.data.feature_cache import open_cache
from core.errors import InputError
from core.data.pairs import build_pairs, load_pairs
from tests.fixture_paths import CHATTERBOX_TOKENIZER
from tests.data_helpers import make_codec, make_espeak_dataset, run_cli


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pairs")
    manifest = make_espeak_dataset(root / "ds", per_language=6)
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines()]
    rows.append(dict(rows[0], id="solo_0", speaker="solo"))
    manifest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    codec = make_codec(manifest, root / "codec.pt", codebook_size=16, iterations=10)
    tokenizer = CHATTERBOX_TOKENIZER
    return build_cache(manifest, tokenizer, codec, root / "cache", workers=1).path


def test_pairs_are_same_speaker_never_self(cache_dir: Path) -> None:
    report = build_pairs(cache_dir, per_target=2)
    speakers = {e["id"]: e["speaker"] for e in open_cache(cache_dir).items}
    pairs = load_pairs(cache_dir)
    assert report.single_clip_speakers == {"solo": "solo_0"}
    assert "solo_0" not in pairs and report.targets == len(speakers) - 1 == 12
    for target, prompts in pairs.items():
        assert len(prompts) == 2 and target not in prompts and len(set(prompts)) == 2
        assert {speakers[p] for p in prompts} == {speakers[target]}
    assert report.pairs == 24 and report.short_speakers == {}
    assert json.loads((cache_dir / "pairs.json").read_text()) == pairs


def test_short_speakers_are_reported_and_bad_counts_refused(cache_dir: Path) -> None:
    report = build_pairs(cache_dir, per_target=5)
    assert set(report.short_speakers.values()) == {2}
    assert len(report.short_speakers) == 4
    with pytest.raises(InputError, match="--per-target"):
        build_pairs(cache_dir, per_target=0)


def test_pairs_cli(cache_dir: Path) -> None:
    run = run_cli("pairs", "build", "--cache", cache_dir, "--per-target", "1", "--json")
    assert run.code == 0, run.stderr
    assert run.json()["single_clip_speakers"] == {"solo": "solo_0"}
    missing = run_cli("pairs", "build", "--cache", cache_dir.parent / "nope")
    assert missing.code == 2 and "not a built cache" in missing.stderr
