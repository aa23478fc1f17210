"""Inference tests: synthesized length grows with the text, fingerprints are enforced, LM generation, prune."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf
import torch

from core.checkpoint import CheckpointMeta, load_checkpoint, save_checkpoint
from core.cli import main
from core.config import load_settings
from core.errors import InputError
from core.inference import load_for_inference, split_sentences
from core.tokenizers.tokenizer import load_tokenizer
from models.lm import GPTLM, LMConfig
from tests.trainer_helpers import english_words, stopless_tts_checkpoint, write_word_tokenizer

torch.set_num_threads(1)
CODES_PER_SENTENCE = 24


def _tts_checkpoint(workspace: Path, codes: int = CODES_PER_SENTENCE) -> Path:
    """A real TTS checkpoint whose stop logit is suppressed, so each sentence yields exactly `codes` codes."""
    return stopless_tts_checkpoint(workspace, codes, 16, {"d_model": 32, "n_layers": 1, "n_heads": 2, "max_text_tokens": 24},
                                   "tts.pt", griffin_lim_iters=4)


def _samples(path: Path) -> int:
    return sf.info(str(path)).frames


def test_synthesized_length_grows_with_the_text(workspace: Path, capsys: pytest.CaptureFixture,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _tts_checkpoint(workspace)
    monkeypatch.chdir(workspace)  # command-line paths resolve against the current directory
    lengths = []
    for i, text in enumerate(["The cat sleeps.", "The cat sleeps. We walked home.", "The cat sleeps. We walked home. The river rose!"]):
        assert main(["synthesize", "--checkpoint", "checkpoints/tts.pt", "--text", text, "--output", f"out/{i}.wav", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["codes"] == [CODES_PER_SENTENCE] * (i + 1) and report["rtf"] > 0
        lengths.append(_samples(workspace / "out" / f"{i}.wav"))
    assert lengths[0] < lengths[1] < lengths[2]
    per_sentence = lengths[0]
    assert lengths[2] == pytest.approx(3 * per_sentence + 2 * 0.15 * 16000, abs=3)


def test_a_tokenizer_with_another_fingerprint_is_refused(workspace: Path) -> None:
    _tts_checkpoint(workspace)
    write_word_tokenizer(workspace / "tokenizers" / "other.json", english_words()[::-1])
    with pytest.raises(InputError, match="rows would mean other tokens"):
        load_for_inference("checkpoints/tts.pt", load_settings(), tokenizer="tokenizers/other.json")
    (workspace / "tokenizers" / "words.json").unlink()
    with pytest.raises(InputError, match="not found"):
        load_for_inference("checkpoints/tts.pt", load_settings())


def test_prune_keeps_weights_and_metadata_only(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _tts_checkpoint(workspace)
    monkeypatch.chdir(workspace)  # command-line paths resolve against the current directory
    assert main(["prune", "--checkpoint", str(source), "--output", "pruned/tts.safetensors"]) == 0
    pruned = load_checkpoint(workspace / "pruned" / "tts.safetensors")
    original = load_checkpoint(source)
    assert pruned.extra == {} and pruned.meta == original.meta
    assert all(torch.equal(pruned.state_dict[k], v) for k, v in original.state_dict.items())
    (workspace / "tokenizers" / "words.json").unlink()  # the copy beside the pruned file must suffice
    inference = load_for_inference("pruned/tts.safetensors", load_settings())
    assert inference.tokenizer.path.name == "tts.tokenizer.json"
    assert main(["prune", "--checkpoint", str(source), "--output", "pruned/tts.pt"]) == 2


def test_generate_with_an_lm_checkpoint(workspace: Path, capsys: pytest.CaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workspace)  # command-line paths resolve against the current directory
    tokenizer = load_tokenizer(write_word_tokenizer(workspace / "tokenizers" / "words.json", english_words()))
    config = LMConfig(text_rows=tokenizer.size, d_model=32, n_layers=1, n_heads=2, max_text_tokens=20)
    meta = CheckpointMeta(family="linguaforge", task="lm", tokenizer_fingerprint=tokenizer.fingerprint,
                          tokenizer_size=tokenizer.size, rows=tokenizer.size, model_config=config.to_dict())
    save_checkpoint(workspace / "checkpoints" / "lm.safetensors", GPTLM(config).state_dict(), meta)
    assert main(["generate", "--checkpoint", "checkpoints/lm.safetensors", "--prompt", "The cat", "--max-new-tokens", "5",
                 "--temperature", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert 0 < report["tokens"] <= 5 and len(report["ids"]) == report["tokens"]
    assert main(["synthesize", "--checkpoint", "checkpoints/lm.safetensors", "--text", "x", "--output", "o.wav"]) == 2


def test_split_sentences_at_ends_and_long_runs(workspace: Path) -> None:
    tokenizer = load_tokenizer(write_word_tokenizer(workspace / "t.json", english_words()))
    assert split_sentences("The cat sleeps. We walked!  Where is it?", tokenizer, 50) == ["The cat sleeps.", "We walked!", "Where is it?"]
    assert split_sentences("ሰላም ነው። እንዴት ነህ፧", tokenizer, 50) == ["ሰላም ነው።", "እንዴት ነህ፧"]
    long = " ".join(["cat"] * 12)
    assert [len(p.split()) for p in split_sentences(long, tokenizer, 5)] == [5, 5, 2]
    with pytest.raises(InputError):
        split_sentences("   ", tokenizer, 5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_device_cuda_without_a_gpu_exits_2_with_one_line(
    workspace: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tts_checkpoint(workspace)
    monkeypatch.chdir(workspace)  # command-line paths resolve against the current directory
    assert main(["synthesize", "--checkpoint", "checkpoints/tts.pt", "--text", "The cat sleeps.", "--output", "o.wav",
                 "--device", "cuda"]) == 2
    error = capsys.readouterr().err.strip()
    assert "--device cuda" in error and "no CUDA device" in error and len(error.splitlines()) == 1
    assert not (workspace / "o.wav").exists()
    assert main(["synthesize", "--checkpoint", "checkpoints/tts.pt", "--text", "The cat sleeps.", "--output", "o.wav",
                 "--device", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == "cpu"
