"""What differs between the LM and TTS tasks: their data, collation, loss and reported metrics.

`build_task_data(config, settings, tokenizer, codec, model_config)` returns a `TaskData` whose
`forward(module, batch)` returns `loss`, the task's metrics and the token count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from core.config import Settings
from core.errors import InputError
from core.training.run_config import RunConfig
from core.tokenizers.tokenizer import Tokenizer
from core.training.data import SampleSet, collate_lm, collate_tts, load_text_corpus, special_ids


@dataclass
class TaskData:
    """Train/val samples plus the task's collate, forward and metric hooks."""

    train: SampleSet
    val: SampleSet
    collate: Callable[[list[Any]], dict[str, torch.Tensor]]
    forward: Callable[[nn.Module, dict[str, torch.Tensor]], dict[str, torch.Tensor]]
    tokens_per_byte: float | None = None

    @property
    def filtered(self) -> int:
        """Return how many samples were dropped for exceeding the position limits."""
        return self.train.filtered + self.val.filtered

    def train_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Return the train metrics to log (LM: `bpb` added from the train tokens-per-byte ratio)."""
        if self.tokens_per_byte is not None:
            metrics["bpb"] = metrics["loss"] * self.tokens_per_byte / math.log(2)
        return metrics

    def finish_val(self, metrics: dict[str, float], tokens: int) -> dict[str, float]:
        """Return the val metrics to log (LM: exact `bpb` over the val bytes)."""
        if self.tokens_per_byte is not None and self.val.n_bytes:
            metrics["bpb"] = metrics["loss"] * tokens / (math.log(2) * self.val.n_bytes)
        return metrics


def lm_forward(module: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Return `loss` (nats per token) and `tokens` of a GPTLM on a collated batch."""
    out = module(batch["ids"], batch["targets"])
    return {"loss": out["loss"], "tokens": out["tokens"]}


def tts_forward(module: nn.Module, batch: dict[str, torch.Tensor], text_weight: float, mel_weight: float) -> dict[str, torch.Tensor]:
    """Return the weighted `loss`, `text_loss`, `mel_loss`, `mel_top1` and `tokens` of a GPTTTS."""
    out = module(batch)
    out["loss"] = text_weight * out["text_loss"] + mel_weight * out["mel_loss"]
    return out


def _lm_data(config: RunConfig, settings: Settings, tokenizer: Tokenizer, model_config: Any) -> TaskData:
    if not config.data.corpus:
        raise InputError(f"{config.source}: task lm needs data.corpus (a list of UTF-8 text files).")
    paths = [settings.resolve(p) for p in config.data.corpus]
    splits = load_text_corpus(paths, tokenizer, model_config.max_text_tokens, config.data.val_ratio)
    train = splits["train"]
    tokens = sum(train.lengths)
    _, eos = special_ids(tokenizer)
    return TaskData(train, splits["val"], partial(collate_lm, pad_id=eos), lm_forward, tokens / max(train.n_bytes, 1))


def build_task_data(
    config: RunConfig, settings: Settings, tokenizer: Tokenizer, codec: Any, model_config: Any, cache_dir: Path | None
) -> TaskData:
    """Return the TaskData of the run's task (tts reads the preprocessing cache at `cache_dir`).

    Raises InputError when the data section does not fit the task or the data cannot be read.
    """
    if config.task == "lm":
        return _lm_data(config, settings, tokenizer, model_config)
    from core.training.tts_data import tts_samples

    splits = tts_samples(config, settings, tokenizer, codec, model_config, cache_dir)
    forward = partial(tts_forward, text_weight=config.loss.text_weight, mel_weight=config.loss.mel_weight)
    return TaskData(splits["train"], splits["val"], partial(collate_tts, model_config=model_config), forward)
