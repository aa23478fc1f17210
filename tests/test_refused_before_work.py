"""Bad input refused before any work, in one line naming the option and the fix, exit 2 (issue 23):
an output named for another format, an empty or malformed language tag, text with no letter the
tokenizer knows, and an `--output` that cannot be written (a pseudo file system, a device, a
folder where a companion file goes, an immutable file). Before the fix each of these either wrote
the wrong thing or did all the work and then named a temporary file."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from core.checkpoint import CheckpointMeta, save_checkpoint
from core.cli import main as cli_main
from core.data.sample_text import ENGLISH_SENTENCES
from core.fsutil import atomic_write
from core.speech.codec import CodecConfig, SpeechCodec
from core.tokenizers.hf_merge import language_tag_code
from core.tokenizers.tokenizer import load_tokenizer
from core.tokenizers.train import train_tokenizer
from models.tts import GPTTTS, TTSConfig
from tests.fixture_paths import CHATTERBOX_TOKENIZER, INDEXTTS_BPE



def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI in-process; assert exit 2 with one `error:` line and no traceback; return that line."""
    code = cli_main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert ".tmp" not in err, f"names a temporary file: {err}"
    return err


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(ENGLISH_SENTENCES) + "\n", encoding="utf-8")
    return path


def test_a_tokenizer_is_written_only_under_its_formats_name(
    corpus: Path, tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    train = ["tokenizer", "train", "--corpus", str(corpus), "--vocab-size", "300"]
    err = _refused([*train, "--kind", "hf-bpe", "--output", str(tmp_path / "x.model")], capsys)
    assert f"--output {tmp_path / 'x.model'}: an HF tokenizer JSON is written here, so its name must end .json" in err
    assert f"Use --output {tmp_path / 'x.json'}" in err
    err = _refused([*train, "--output", str(tmp_path / "y.json")], capsys)
    assert "a SentencePiece model is written here, so its name must end .model" in err
    base = INDEXTTS_BPE
    err = _refused(["tokenizer", "extend", "--base", str(base), "--corpus", str(corpus), "--target-size", "12100",
                    "--output", str(tmp_path / "z.json")], capsys)
    assert "--output" in err and "must end .model" in err
    err = _refused(["tokenizer", "merge", "--base", str(CHATTERBOX_TOKENIZER),
                    "--corpus", str(corpus), "--vocab-size", "300", "--output", str(tmp_path / "m.model")], capsys)
    assert "must end .json" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "workspace"]
    assert cli_main([*train, "--kind", "hf-bpe", "--output", str(tmp_path / "x.json")]) == 0
    assert load_tokenizer(tmp_path / "x.json").kind == "hf"


def test_the_language_tag_must_be_a_language_code(
    corpus: Path, tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    merge = ["tokenizer", "merge", "--base", str(CHATTERBOX_TOKENIZER),
             "--corpus", str(corpus), "--vocab-size", "300", "--output", str(tmp_path / "m.json")]
    for bad in ("", "  ", "AM", "[am", "amharic", "a m"):
        err = _refused([*merge, "--language-tag", bad], capsys)
        assert f"--language-tag {bad!r}: give a language code of 2 or 3 lower-case letters" in err
    assert not (tmp_path / "m.json").exists()
    assert [language_tag_code(tag) for tag in ("am", "[am]", "amh")] == ["am", "am", "amh"]


def _sentencepiece_tts(workspace: Path) -> Path:
    """A real TTS checkpoint on a SentencePiece tokenizer (whose `▁` piece is known in any text)."""
    tokenizer_path = workspace / "tokenizers" / "en.model"
    tokenizer_path.parent.mkdir(parents=True)
    train_tokenizer([s.upper() for s in ENGLISH_SENTENCES], "sentencepiece", 200, tokenizer_path)
    tokenizer = load_tokenizer(tokenizer_path)
    codec = SpeechCodec(CodecConfig(codebook_size=16, n_mels=80, griffin_lim_iters=4), torch.randn(16, 80) - 4.0)
    codec.save(workspace / "codecs" / "c16.pt")
    torch.manual_seed(0)
    config = TTSConfig(text_rows=tokenizer.size, codebook_size=16, n_mels=80, d_model=32, n_layers=1, n_heads=2,
                       max_text_tokens=24, max_speech_tokens=8)
    meta = CheckpointMeta(family="linguaforge", task="tts", tokenizer_fingerprint=tokenizer.fingerprint,
                          tokenizer_size=tokenizer.size, rows=tokenizer.size, base_size=tokenizer.size, init="trained",
                          codec_fingerprint=codec.fingerprint, model_config=config.to_dict(), step=0)
    return save_checkpoint(workspace / "checkpoints" / "tts.pt", GPTTTS(config).state_dict(), meta, {"step": 0})


def test_text_with_no_known_letter_is_refused_before_anything_is_generated(
    workspace: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    checkpoint = _sentencepiece_tts(workspace)
    tokenizer = load_tokenizer(workspace / "tokenizers" / "en.model")
    text = "漢字漢字 😀😀"
    assert {tokenizer.piece(i) for i in tokenizer.encode(text)} == {"▁", "<unk>"}, "one known piece: the word boundary"
    progress = workspace / "progress.json"
    monkeypatch.setenv("LINGUAFORGE_PROGRESS_FILE", str(progress))
    synthesize = ["synthesize", "--checkpoint", str(checkpoint), "--output", str(workspace / "out.wav"), "--device", "cpu"]
    err = _refused([*synthesize, "--text", text], capsys)
    assert "--text '漢字漢字 😀😀': the tokenizer knows none of its letters or digits" in err
    assert not (workspace / "out.wav").exists() and not progress.exists(), "nothing was generated"
    assert cli_main([*synthesize, "--text", "THE CAT SLEEPS. 漢字", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["audio_seconds"] > 0
    err = _refused([*synthesize[:-4], "--output", str(workspace / "out.mp3"), "--text", "THE CAT"], capsys)
    assert "synthesize writes a WAV file, so its name must end .wav" in err


def _immutable(path: Path) -> bool:
    """Set the immutable attribute (root only); return False where it cannot be set here."""
    if os.geteuid() != 0:
        return False
    return subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0


def test_an_unwritable_output_is_refused_before_any_work(
    corpus: Path, tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """`--corpus` and `--checkpoint` do not exist: a command that began its work would name them first."""
    missing = tmp_path / "absent.txt"
    train = ["tokenizer", "train", "--corpus", str(missing), "--vocab-size", "60"]
    err = _refused([*train, "--output", "/proc/x.model"], capsys)
    assert err.startswith("error: --output /proc/x.model: the folder /proc is not writable") and "Choose a writable" in err
    err = _refused([*train, "--output", "/dev/null"], capsys)
    assert "--output /dev/null: is not a regular file" in err
    (tmp_path / "t.vocab").mkdir()
    err = _refused([*train, "--output", str(tmp_path / "t.model")], capsys)
    assert f"--output {tmp_path / 't.model'}: the file written beside it, {tmp_path / 't.vocab'}, is a folder" in err
    synthesize = ["synthesize", "--checkpoint", str(tmp_path / "absent.pt"), "--text", "hello"]
    err = _refused([*synthesize, "--output", "/proc/x.wav"], capsys)
    assert "--output /proc/x.wav: the folder /proc is not writable" in err
    locked = tmp_path / "locked.wav"
    locked.write_bytes(b"RIFF")
    if _immutable(locked):
        try:
            err = _refused([*synthesize, "--output", str(locked)], capsys)
        finally:
            subprocess.run(["chattr", "-i", str(locked)], check=True)
        assert f"--output {locked}: exists and is not writable (read-only or immutable)" in err
    assert locked.read_bytes() == b"RIFF" and not missing.exists()
    # the real command with a good corpus is refused the same way, and leaves nothing behind
    err = _refused(["tokenizer", "train", "--corpus", str(corpus), "--vocab-size", "60", "--output", str(tmp_path / "t.model")],
                   capsys)
    assert "is a folder" in err and not list(tmp_path.glob(".t.*"))


def test_a_failed_replace_names_the_file_not_its_temporary_sibling(tmp_path: Path) -> None:
    target = tmp_path / "out.wav"
    (target / "inside").mkdir(parents=True)
    with pytest.raises(OSError) as caught:
        with atomic_write(target) as tmp:
            tmp.write_bytes(b"x")
    assert caught.value.filename == str(target)
    assert [p.name for p in tmp_path.iterdir()] == ["out.wav"]
