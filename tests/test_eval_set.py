"""A run's fixed evaluation set (issue 24): new- and base-language sentences from the run's val split
(held-out speakers under `data.split: speaker`), chosen deterministically once, kept in the run
folder's eval_set.json and read back unchanged; fewer clips than asked are used and said so.

The manifests are real files with clips on disk (empty: choosing reads no audio); nothing trains here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import load_settings
from core.data.manifest import load_manifest_rows
from core.data.splits import speakers_held_out, val_rows
from core.errors import InputError
from core.runs import RunFolder
from core.training.eval_set import choose_eval_set, fixed_eval_set
from core.training.run_config import EvalConfig, best_metric_of, run_config_from_dict

SPEAKERS = {"am": ["am_a", "am_b", "am_c", "am_d", "am_e"], "en": ["en_a", "en_b", "en_c"]}


def _manifest(folder: Path, per_speaker: dict[str, int], name: str = "manifest.jsonl", reverse: bool = False) -> Path:
    """Write a manifest of `per_speaker[language]` clips for each speaker of SPEAKERS (clip files on disk)."""
    rows = []
    for language, speakers in SPEAKERS.items():
        for speaker in speakers:
            for i in range(per_speaker[language]):
                clip_id = f"{speaker}_{i:03d}"
                (folder / "audio").mkdir(parents=True, exist_ok=True)
                (folder / "audio" / f"{clip_id}.wav").write_bytes(b"")
                rows.append({"id": clip_id, "audio": f"audio/{clip_id}.wav", "text": f"{language} sentence {clip_id}",
                             "speaker": speaker, "language": language})
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in (rows[::-1] if reverse else rows)), encoding="utf-8")
    return path


def _config(workspace: Path, manifest: str = "data/manifest.jsonl", split: str = "speaker", **eval_keys):  # noqa: ANN003
    return run_config_from_dict({"name": "am", "data": {"manifest": manifest, "val_ratio": 0.3, "split": split},
                                 "schedule": {"eval_every": 1}, "eval": eval_keys}, "am.yaml")


def test_defaults_ask_for_20_new_and_10_base_sentences_and_best_follows_quality_where_eval_runs() -> None:
    assert EvalConfig().count >= 20 and EvalConfig().base_count >= 10
    assert best_metric_of(run_config_from_dict({"schedule": {"eval_every": 2}})) == "quality"
    assert best_metric_of(run_config_from_dict({})) == "val_loss"  # no evaluation: validation loss
    assert best_metric_of(run_config_from_dict({"task": "lm", "schedule": {"eval_every": 2}})) == "val_loss"
    assert best_metric_of(run_config_from_dict({"schedule": {"eval_every": 2, "best_metric": "val_loss"}})) == "val_loss"
    with pytest.raises(InputError, match="eval.base_count: -1"):
        run_config_from_dict({"eval": {"base_count": -1}})


def test_held_out_speakers_give_both_language_sections_in_a_hashed_order(workspace: Path) -> None:
    manifest = _manifest(workspace / "data", {"am": 6, "en": 6})
    settings = load_settings()
    config = _config(workspace, count=4, base_count=3)
    chosen = choose_eval_set(config, settings, step=2)
    new, base = chosen.section("new_language"), chosen.section("base_language")
    assert (new.language, len(new.sentences), new.note) == ("am", 4, None)
    assert (base.language, len(base.sentences), base.note) == ("en", 3, None)
    assert chosen.speakers_held_out and chosen.split == "speaker" and chosen.chosen_at_step == 2
    rows = load_manifest_rows(manifest)
    held = speakers_held_out(rows, 0.3)
    trained = {s for s, split in held.items() if split == "train"}
    assert set(new.speakers + base.speakers) <= {s for s, split in held.items() if split == "val"}
    assert not set(new.speakers + base.speakers) & trained  # no evaluation speaker speaks in training
    by_text = {r.text: r for r in rows}
    assert [str(by_text[t].path) for t in new.sentences] == new.references  # the dataset's own clips
    # deterministic, by a hash of the clip id: the same set from the manifest written in reverse order
    _manifest(workspace / "data", {"am": 6, "en": 6}, name="reversed.jsonl", reverse=True)
    again = choose_eval_set(_config(workspace, "data/reversed.jsonl", count=4, base_count=3), settings, step=2)
    assert again.section("new_language").sentences == new.sentences
    assert again.section("base_language").sentences == base.sentences
    # by clip, every speaker also trains: the set says so
    by_clip = choose_eval_set(_config(workspace, split="clip", count=4, base_count=3), settings, step=2)
    assert not by_clip.speakers_held_out and "also speak in training" in by_clip.note
    assert all(t in {r.text for r in val_rows(rows, 0.3, "clip")} for t in by_clip.section("new_language").sentences)


def test_fewer_clips_than_asked_are_used_and_said_so(workspace: Path) -> None:
    _manifest(workspace / "data", {"am": 4, "en": 0})  # no English clip: the base-language set is skipped
    chosen = choose_eval_set(_config(workspace, count=50, base_count=10), load_settings(), step=1)
    new, base = chosen.section("new_language"), chosen.section("base_language")
    available = len([r for r in val_rows(load_manifest_rows(workspace / "data" / "manifest.jsonl"), 0.3, "speaker")
                     if r.language == "am"])
    assert 2 <= len(new.sentences) == available < 50 and new.usable
    assert new.note == f"{available} of 50 asked am sentences: data/manifest.jsonl (held-out speakers) holds no more"
    assert base.sentences == [] and not base.usable
    assert base.note == "skipped: 0 en sentence(s) in data/manifest.jsonl (held-out speakers), evaluation needs at least 2 (10 asked)"
    assert chosen.summary()["sections"][0] == {"role": "new_language", "language": "am", "asked": 50, "used": available,
                                               "speakers": new.speakers, "note": new.note}


def test_a_sentences_file_is_the_new_language_set_and_the_base_set_comes_from_the_val_split(workspace: Path) -> None:
    _manifest(workspace / "data", {"am": 3, "en": 6})
    (workspace / "am.txt").write_text("# held-out Amharic\nሰላም ነው።\nእንደምን ነህ?\nደህና ነኝ።\n", encoding="utf-8")
    chosen = choose_eval_set(_config(workspace, sentences="am.txt", references="espeak", language="am", count=2,
                                     base_count=2), load_settings(), step=5)
    new, base = chosen.section("new_language"), chosen.section("base_language")
    assert new.sentences == ["ሰላም ነው።", "እንደምን ነህ?"] and new.references == "espeak"
    assert base.language == "en" and len(base.sentences) == 2 and base.references == "espeak"


def test_an_amharic_only_run_takes_its_base_sentences_from_the_replay_manifest(workspace: Path) -> None:
    """Without English clips in data.manifest, the base-language section comes from the replay manifest's
    val split (the clips `val_base_loss` is measured on), in the same hashed order."""
    _manifest(workspace / "data", {"am": 6, "en": 0}, name="am.jsonl")
    replay = _manifest(workspace / "replay", {"am": 0, "en": 8}, name="en.jsonl")
    settings = load_settings()
    config = run_config_from_dict({"name": "am", "data": {"manifest": "data/am.jsonl", "val_ratio": 0.3, "split": "speaker",
                                                          "replay": {"manifest": "replay/en.jsonl"}},
                                   "schedule": {"eval_every": 1}, "eval": {"count": 3, "base_count": 4}}, "am.yaml")
    chosen = choose_eval_set(config, settings, step=5)
    new, base = chosen.sections
    assert new.language == "am" and len(new.sentences) == 3
    held = val_rows(load_manifest_rows(replay), 0.3, "speaker")
    assert base.language == "en" and len(base.sentences) == 4
    assert set(base.sentences) <= {r.text for r in held}
    assert "replay/en.jsonl (replay, held-out speakers)" in chosen.source
    without = run_config_from_dict({"name": "am", "data": {"manifest": "data/am.jsonl", "val_ratio": 0.3, "split": "speaker"},
                                    "schedule": {"eval_every": 1}, "eval": {"count": 3, "base_count": 4}}, "am.yaml")
    assert choose_eval_set(without, settings, step=5).sections[1].note.startswith("skipped")


def test_the_set_is_written_once_and_read_back_unchanged(workspace: Path) -> None:
    _manifest(workspace / "data", {"am": 6, "en": 6})
    settings = load_settings()
    folder = RunFolder(workspace / "runs" / "am")
    first, chosen = fixed_eval_set(folder, _config(workspace, count=3, base_count=2), settings, step=2)
    assert chosen and folder.eval_set_file.is_file()
    written = folder.eval_set_file.read_bytes()
    # a later evaluation (or a resume) with other counts in the config still speaks the stored set
    later, chosen = fixed_eval_set(folder, _config(workspace, count=6, base_count=6), settings, step=8)
    assert not chosen and later == first and later.chosen_at_step == 2
    assert folder.eval_set_file.read_bytes() == written
    folder.eval_set_file.write_text("{ torn", encoding="utf-8")
    with pytest.raises(InputError, match="eval_set.json: unreadable"):
        fixed_eval_set(folder, _config(workspace), settings, step=9)
