"""Synthesis input limits (issue 17): text of unknown characters is refused, long text reports
progress per sentence, text over the documented limit is refused before the model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.cli import main
from core.inference import MAX_TEXT_CHARS
from core.tokenizers.tokenizer import load_tokenizer
from tests.test_inference import _tts_checkpoint


def test_text_the_tokenizer_cannot_encode_is_refused(workspace: Path, capsys: pytest.CaptureFixture) -> None:
    checkpoint = _tts_checkpoint(workspace)
    code = main(["synthesize", "--checkpoint", str(checkpoint), "--text", "ሰላም ነው።",
                 "--output", str(workspace / "out" / "x.wav")])
    err = capsys.readouterr().err
    assert code == 2 and "knows none of its letters or digits" in err
    assert not (workspace / "out" / "x.wav").exists()


def test_progress_is_reported_per_sentence(workspace: Path, capsys: pytest.CaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = _tts_checkpoint(workspace)
    progress = workspace / "progress.json"
    monkeypatch.setenv("LINGUAFORGE_PROGRESS_FILE", str(progress))
    text = "The cat sleeps. We walked home. The river rose!"
    assert main(["synthesize", "--checkpoint", str(checkpoint), "--text", text,
                 "--output", str(workspace / "out" / "p.wav"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    state = json.loads(progress.read_text())
    assert state["label"] == "synthesize" and state["done"] == state["total"] == len(report["sentences"]) == 3
    tokenizer = load_tokenizer(workspace / "tokenizers" / "words.json")
    expected = sum(tokenizer.encode(s).count(tokenizer.unk_id) for s in report["sentences"])
    assert report["unknown_tokens"] == expected


def test_text_over_the_limit_is_refused_before_loading(workspace: Path, capsys: pytest.CaptureFixture) -> None:
    text = "The cat sleeps. " * (MAX_TEXT_CHARS // 16 + 1)
    code = main(["synthesize", "--checkpoint", str(workspace / "missing.pt"), "--text", text,
                 "--output", str(workspace / "l.wav")])
    err = capsys.readouterr().err
    assert code == 2 and f"{len(text)} characters" in err and f"at most {MAX_TEXT_CHARS}" in err
