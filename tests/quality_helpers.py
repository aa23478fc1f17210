"""Constructed failures for the quality judge: LinguaForge's own tiny TTS GPT trained a few dozen steps
to fail in one way (a real model decoded by the real synthesizer), saved as a checkpoint `eval tts` reads."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import torch

from core.checkpoint import CheckpointMeta, save_checkpoint
from models.registry import build_model, model_config


def tiny_tts(tokenizer, codec, max_speech_tokens: int = 64, seed: int = 0) -> torch.nn.Module:
    """Return a random-initialised tiny TTS GPT sized for `tokenizer` and `codec`."""
    torch.manual_seed(seed)
    config = model_config("tts", {"d_model": 64, "n_layers": 2, "n_heads": 4, "max_text_tokens": 32,
                                  "max_speech_tokens": max_speech_tokens}, text_rows=tokenizer.size,
                          codebook_size=codec.codebook_size, n_mels=codec.n_mels)
    return build_model("tts", config)


def train_to_say(model: torch.nn.Module, texts: Sequence[list[int]], codes: Sequence[list[int]],
                 ref_mels: Sequence[torch.Tensor], steps: int, lr: float = 3e-3) -> float:
    """Train `model` (teacher forcing, full batch) to answer text i with reference i by `codes[i]`
    followed by the stop token; return the last mel loss."""
    from torch.nn.utils.rnn import pad_sequence

    batch = {
        "text_ids": pad_sequence([torch.tensor(t) for t in texts], batch_first=True),
        "text_lengths": torch.tensor([len(t) for t in texts]),
        "codes": pad_sequence([torch.tensor(c) for c in codes], batch_first=True),
        "code_lengths": torch.tensor([len(c) for c in codes]),
        "ref_mel": pad_sequence(list(ref_mels), batch_first=True),
        "ref_lengths": torch.tensor([len(m) for m in ref_mels]),
    }
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(steps):
        out = model(batch)
        loss = out["mel_loss"] + 0.1 * out["text_loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return float(out["mel_loss"].detach())


def save_tts(model: torch.nn.Module, path: Path, tokenizer, codec, codec_path: Path, step: int) -> Path:
    """Save `model` as a LinguaForge TTS checkpoint naming its tokenizer and codec."""
    meta = CheckpointMeta(family="linguaforge", task="tts", tokenizer_fingerprint=tokenizer.fingerprint,
                          tokenizer_size=tokenizer.size, rows=tokenizer.size, base_size=tokenizer.size,
                          codec_fingerprint=codec.fingerprint, model_config=asdict(model.config), step=step)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_checkpoint(path, model.state_dict(), meta,
                           {"tokenizer_path": str(tokenizer.path), "codec_path": str(codec_path)})
