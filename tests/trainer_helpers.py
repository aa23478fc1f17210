"""Real small inputs for trainer tests: word-level HF tokenizers and an LM run config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from core.data.sample_text import ENGLISH_SENTENCES

SPECIALS = ["<s>", "</s>", "<unk>", "<pad>"]
NEW_WORDS = ["selam", "buna", "bet", "wuha", "dabo", "ayne"]


def english_words() -> list[str]:
    """Return the distinct words of the built-in English sentences, in first-seen order."""
    from tokenizers.pre_tokenizers import Whitespace

    seen: dict[str, None] = {}
    for sentence in ENGLISH_SENTENCES:
        for word, _ in Whitespace().pre_tokenize_str(sentence):
            seen.setdefault(word, None)
    return list(seen)


def write_word_tokenizer(path: Path, words: list[str]) -> Path:
    """Write an HF WordLevel tokenizer with `<s> </s> <unk> <pad>` then `words` at consecutive ids."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {piece: i for i, piece in enumerate([*SPECIALS, *words])}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = Whitespace()
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


def write_corpus(path: Path, repeats: int = 4) -> Path:
    """Write the English sample sentences `repeats` times (one per line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(list(ENGLISH_SENTENCES) * repeats) + "\n", encoding="utf-8")
    return path


def lm_config(workspace: Path, name: str, **overrides: Any) -> Path:
    """Write `runs_cfg/<name>.yaml`: a tiny LM run on the English corpus; return its path."""
    data: dict[str, Any] = {
        "preset": "tiny-lm",
        "name": name,
        "tokenizer": "tokenizers/en_words.json",
        "data": {"corpus": ["corpus/en.txt"], "val_ratio": 0.1},
        "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "max_text_tokens": 32},
        "batch": {"size": 8},
        "schedule": {"max_steps": 6, "val_every": 3, "save_every": 3, "keep_last": 2, "log_every": 1},
        "optim": {"lr": 3.0e-3, "warmup_steps": 2},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = workspace / "runs_cfg" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def lm_workspace(workspace: Path) -> None:
    """Put the English word tokenizer and corpus into `workspace`."""
    write_word_tokenizer(workspace / "tokenizers" / "en_words.json", english_words())
    write_corpus(workspace / "corpus" / "en.txt")


def extended_lm_workspace(workspace: Path) -> Path:
    """Put `lm_workspace`'s inputs and `tokenizers/en_plus.json` (the English words + NEW_WORDS) into `workspace`,
    train the English base run `en-base` (6 steps) and extend it to en_plus: `checkpoints/en_plus.pt`, whose
    first len(SPECIALS) + len(english_words()) rows are the base's. Returns `workspace`."""
    from core.config import load_settings
    from core.recipe import train
    from core.training.embeddings import extend_checkpoint
    from core.training.run_config import load_run_config

    lm_workspace(workspace)
    write_word_tokenizer(workspace / "tokenizers" / "en_plus.json", english_words() + NEW_WORDS)
    path = lm_config(workspace, "en-base")
    base = train(load_run_config(path), path, load_settings())
    extend_checkpoint(base.last_checkpoint, workspace / "tokenizers/en_words.json", workspace / "tokenizers/en_plus.json",
                      workspace / "checkpoints" / "en_plus.pt")
    return workspace


def tts_workspace(root: Path) -> Path:
    """Put the espeak sample (`datasets/sample`: 12 clips each of en and am, `en.jsonl` the English half), a 64-code
    codec (`codecs/c64.pt`) and en / en+am SentencePiece models (`tokenizers/en.model`, `en_am.model`) into the
    workspace `root`; return `root`."""
    import json

    from core.data.sample_text import AMHARIC_SENTENCES
    from core.tokenizers.sp_extend import extend_sentencepiece
    from core.tokenizers.train import train_tokenizer
    from tests.data_helpers import make_codec, make_espeak_dataset

    manifest = make_espeak_dataset(root / "datasets" / "sample", per_language=12)
    english = [line for line in manifest.read_text().splitlines() if json.loads(line)["language"] == "en"]
    (manifest.parent / "en.jsonl").write_text("\n".join(english) + "\n")
    (root / "codecs").mkdir()
    make_codec(manifest, root / "codecs" / "c64.pt", codebook_size=64, iterations=20)
    train_tokenizer(list(ENGLISH_SENTENCES), "sentencepiece", 200, root / "tokenizers" / "en.model")
    extend_sentencepiece(root / "tokenizers" / "en.model", list(AMHARIC_SENTENCES), 700,
                         root / "tokenizers" / "en_am.model", protect_lines=list(ENGLISH_SENTENCES))
    return root


def stop_file_at_step(monkeypatch: Any, family_class: type, stop_file: Path, step: int) -> None:
    """Make `family_class`'s training collate touch `stop_file` while preparing batch `step`.

    With `data.prefetch: 0` batch `step` is prepared inside step `step`, so the trainer finds the
    STOP file right after that step: a deterministic stop, no timing involved.
    """
    import dataclasses
    import itertools

    original = family_class.task_data

    def task_data(self: Any, family_run: Any, model_config: Any, cache_dir: Any) -> Any:
        data = original(self, family_run, model_config, cache_dir)
        calls = itertools.count(1)

        def collate(samples: list[Any]) -> Any:
            if next(calls) == step:
                stop_file.touch()
            return data.collate(samples)

        return dataclasses.replace(data, collate=collate)

    monkeypatch.setattr(family_class, "task_data", task_data)


def stopless_tts_checkpoint(workspace: Path, codes: int, codebook_size: int, shape: dict[str, Any], name: str,
                            griffin_lim_iters: int = 32, hop_length: int = 256) -> Path:
    """Write a real own TTS checkpoint (a word tokenizer, a random codec of `codebook_size` codes and
    `hop_length`, a model of `shape`) whose stop logit is suppressed, so each sentence yields exactly `codes`
    codes; return its path (`checkpoints/<name>`)."""
    import torch

    from core.checkpoint import CheckpointMeta, save_checkpoint
    from core.speech.codec import CodecConfig, SpeechCodec
    from core.tokenizers.tokenizer import load_tokenizer
    from models.registry import model_config
    from models.tts import GPTTTS

    tokenizer = load_tokenizer(write_word_tokenizer(workspace / "tokenizers" / "words.json", english_words()))
    codec = SpeechCodec(CodecConfig(codebook_size=codebook_size, n_mels=80, griffin_lim_iters=griffin_lim_iters,
                                    hop_length=hop_length),
                        torch.randn(codebook_size, 80) - 4.0)
    codec.save(workspace / "codecs" / f"c{codebook_size}.pt")
    torch.manual_seed(0)
    config = model_config("tts", {**shape, "max_speech_tokens": codes}, text_rows=tokenizer.size,
                          codebook_size=codebook_size, n_mels=80)
    model = GPTTTS(config)
    with torch.no_grad():
        model.mel_head.bias[config.stop_speech] = -1e4
    meta = CheckpointMeta(family="linguaforge", task="tts", tokenizer_fingerprint=tokenizer.fingerprint,
                          tokenizer_size=tokenizer.size, rows=tokenizer.size, base_size=tokenizer.size, init="trained",
                          codec_fingerprint=codec.fingerprint, model_config=config.to_dict(), step=0)
    return save_checkpoint(workspace / "checkpoints" / name, model.state_dict(), meta, {"step": 0})
