"""The skeleton: settings, the tokenizer interface on the real fixtures, CLI exit codes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.config import load_settings
from core.errors import InputError
from core.training.run_config import run_config_from_dict
from core.tokenizers.tokenizer import load_tokenizer


def test_workspace_comes_from_environment(workspace: Path) -> None:
    settings = load_settings()
    assert settings.workspace == workspace.resolve()
    assert settings.resolve("tokenizers/a.model") == workspace.resolve() / "tokenizers" / "a.model"


def test_paths_outside_roots_are_refused(workspace: Path, tmp_path: Path) -> None:
    settings = load_settings()
    assert settings.check_inside_roots("datasets/x") == workspace.resolve() / "datasets" / "x"
    with pytest.raises(InputError, match="outside the allowed folders"):
        settings.check_inside_roots(tmp_path / "elsewhere.txt")
    with pytest.raises(InputError, match="outside the allowed folders"):
        settings.check_inside_roots("../escape.txt")


def test_indextts_sentencepiece_fixture(indextts_bpe: Path) -> None:
    tok = load_tokenizer(indextts_bpe)
    assert tok.kind == "sentencepiece"
    assert tok.size == 12000
    assert (tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2)
    ids = tok.encode("HELLO WORLD")
    assert tok.decode(ids) == "HELLO WORLD"
    assert tok.piece(3) == "▁[ZH]"
    assert tok.unk_id in tok.encode("ሰላም"), "Ethiopic is not in the IndexTTS2 base"
    assert len(tok.fingerprint) == 64


def test_chatterbox_hf_fixture(chatterbox_tokenizer: Path) -> None:
    tok = load_tokenizer(chatterbox_tokenizer)
    assert tok.kind == "hf"
    assert tok.size == 2454
    assert (tok.eos_id, tok.unk_id, tok.bos_id) == (0, 1, 255)
    assert tok.piece(708) == "[en]"
    assert set(tok.encode("ሰላም")) == {tok.unk_id}


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty"),
        (b"hello, this is plain text\n", "neither a SentencePiece model nor an HF tokenizer"),
        (b'{"version": "1.0"}', "not an HF tokenizer"),
    ],
)
def test_bad_tokenizer_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.model"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        load_tokenizer(path)


def test_truncated_sentencepiece_model(indextts_bpe: Path) -> None:
    data = indextts_bpe.read_bytes()
    indextts_bpe.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=str(indextts_bpe.name)):
        load_tokenizer(indextts_bpe)


def test_run_config_rejects_unknown_keys() -> None:
    with pytest.raises(InputError, match="unknown key"):
        run_config_from_dict({"task": "tts", "optim": {"learning_rate": 1e-3}})
    with pytest.raises(InputError, match="freeze.until"):
        run_config_from_dict({"freeze": {"until": -3}})
    config = run_config_from_dict({"task": "lm", "optim": {"lr": 1}})
    assert config.optim.lr == 1.0 and config.task == "lm"


@pytest.mark.parametrize("threads, message", [
    (0, "give `auto` (one thread per core) or a whole number from 1 to 1024"), (1025, "from 1 to 1024"),
    ("two", "'two': give `auto`"), (True, "expected int or str, got True"), (1.5, "expected int or str, got 1.5")])
def test_run_config_refuses_cpu_threads_that_are_not_auto_or_a_count(threads, message: str) -> None:
    """`cpu_threads` is `auto` or a whole number from 1 to 1024; anything else is one line naming the key."""
    with pytest.raises(InputError, match=r"^config\.cpu_threads: .*" + re.escape(message)):
        run_config_from_dict({"cpu_threads": threads})
    assert run_config_from_dict({}).cpu_threads == "auto" and run_config_from_dict({"cpu_threads": 1}).cpu_threads == 1


def test_run_config_eval_fields() -> None:
    config = run_config_from_dict({"schedule": {"eval_every": 2, "best_metric": "eval_mcd"}, "eval": {"count": 6}})
    assert config.eval.count == 6 and config.eval.references == "dataset" and config.eval.wer is False
    assert run_config_from_dict({}).schedule.best_metric == "auto"  # best_metric_of: val_loss here (tests/test_eval_set.py)
    with pytest.raises(InputError, match="best_metric: eval_mcd needs a tts run with schedule.eval_every > 0"):
        run_config_from_dict({"schedule": {"best_metric": "eval_mcd"}})
    with pytest.raises(InputError, match="best_metric: 'bleu' is not one of"):
        run_config_from_dict({"schedule": {"best_metric": "bleu"}})
    with pytest.raises(InputError, match="eval.count"):
        run_config_from_dict({"eval": {"count": 1}})


def test_cli_help_and_bad_command(cli) -> None:
    assert cli("--help").code == 0
    assert cli("no-such-command").code == 2
