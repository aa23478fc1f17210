"""The guided Fine-tune tab keeps the base language by default: the run config it writes replays the
workspace's English clips at the retention default's share (core.training.retention), which the doctor's
`retention.base_data` check passes; with the field emptied the run learns the new language alone and the
doctor warns. No browser: the tab's own helpers and the run config as `train` reads it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.checks.doctor import doctor_context_from_run_config, run_doctor
from core.config import load_settings
from core.errors import InputError
from core.training.retention import DEFAULT_RETENTION
from core.training.run_config import load_run_config, run_config_from_dict, save_run_config
from gradio_app.tabs.finetune import (
    SHARE, base_language_manifest, keep_words, new_language_manifest, run_config_data, text_of_language,
)


def _manifest(workspace: Path, relative: str, language: str) -> str:
    path = workspace / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'{{"id": "{language}_0001", "audio": "a.wav", "text": "t", "language": "{language}"}}\n',
                    encoding="utf-8")
    return relative


def _written(workspace: Path, data: dict) -> object:
    """Save `data` as the tab saves it (runs/<name>/config.yaml) and return the doctor's retention check on it."""
    path = workspace / "runs" / data["name"] / "config.yaml"
    save_run_config(run_config_from_dict(data, "runs/am/config.yaml"), path)
    config = load_run_config(path)
    report = run_doctor(doctor_context_from_run_config(config, path, load_settings()), only="retention.")
    return config, report.checks[0]


def test_the_workspaces_english_clips_are_preselected_to_keep_the_base_language(workspace: Path) -> None:
    assert base_language_manifest(load_settings()) == ""  # none at hand: the field starts empty
    _manifest(workspace, "datasets/quickstart/sample/am.jsonl", "am")
    _manifest(workspace, "datasets/mine/manifest.jsonl", "am")
    assert base_language_manifest(load_settings()) == ""  # neither is named for English
    imported = _manifest(workspace, "datasets/en/manifest.jsonl", "en")  # a dataset imported into a folder named en
    assert base_language_manifest(load_settings()) == imported
    split = _manifest(workspace, "datasets/quickstart/sample/en.jsonl", "en")  # the quickstart's, written later
    later = (workspace / imported).stat().st_mtime + 5
    os.utime(workspace / split, (later, later))
    assert base_language_manifest(load_settings()) == split  # the newest
    # the training data preselected is another manifest: the base language's is kept by replay, not learnt
    assert new_language_manifest(["datasets/en/manifest.jsonl", "datasets/mine/manifest.jsonl"],
                                 "datasets/en/manifest.jsonl") == "datasets/mine/manifest.jsonl"
    assert new_language_manifest([imported], imported) == imported and new_language_manifest([], "") is None
    (workspace / "corpora").mkdir()
    (workspace / "corpora" / "am.txt").write_text("ሰላም\n", encoding="utf-8")
    assert text_of_language(load_settings(), "am") == ["corpora/am.txt"]  # the text's preselection, same rule


def test_the_run_config_the_tab_writes_replays_the_base_language_at_the_default_share(workspace: Path) -> None:
    am = _manifest(workspace, "datasets/espeak/manifest.jsonl", "am")
    en = _manifest(workspace, "datasets/quickstart/sample/en.jsonl", "en")
    (workspace / "models" / "chatterbox").mkdir(parents=True)
    (workspace / "checkpoints" / "am").mkdir(parents=True)
    (workspace / "checkpoints" / "am" / "am_grown.safetensors").write_bytes(b"")
    args = ("am", "chatterbox", "models/chatterbox", "tokenizers/am/am.json", "checkpoints/am/am_grown.safetensors", am, 20)

    kept, check = _written(workspace, run_config_data(*args, keep=en))
    assert kept.data.manifest == am and kept.data.replay.manifest == en
    assert kept.data.replay.share == DEFAULT_RETENTION["share"] == 0.25 and kept.freeze.mode == "base-rows"
    assert check.status == "pass" and f"25% of each batch replays base-language clips ({en})" in check.message

    chosen, _ = _written(workspace, run_config_data(*args, keep=en, share=0.1))
    assert chosen.data.replay.share == 0.1

    alone, check = _written(workspace, run_config_data(*args))  # the field emptied: the new language alone
    assert alone.data.replay.manifest is None
    assert check.status == "warn" and "no base-language clips" in check.message


def test_step_4_says_in_words_whether_the_base_language_is_kept() -> None:
    assert keep_words("datasets/en/manifest.jsonl", 0.25).startswith(
        "25% of each training batch comes from the clips of `datasets/en/manifest.jsonl`, so the model keeps")
    assert "forgets the old one" in keep_words("", 0.25) and "Dataset tab" in keep_words(None, None)
    with pytest.raises(InputError, match=r"Share of each batch: 1.0 is .*\(0, 1\)"):
        SHARE.check(1.0, "Share of each batch")
