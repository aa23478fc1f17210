"""The contract between a model family and the trainer: the samples and hooks a family hands over.

A family's `task_data` returns a `TaskData`: train/val `SampleSet`s (lengths plus a loader), the
`collate` that pads a list of samples into a batch, and `forward(module, batch)` returning
`loss`, the task's metrics and `tokens`. The trainer batches, prefetches and steps on these alone.
This module is a leaf: it imports nothing of `core.training`, so families depend on it, never on
the trainer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from core.tokenizers.tokenizer import Tokenizer


@dataclass
class SampleSet:
    """The samples of one split: `items[i]` is loaded by `load(i)`, `lengths[i]` is its token count.
    `extra["languages"]`, where a family gives it, is each sample's target language (`val_base_loss`).

    `load_many(indices)`, where given, reads many samples in one bulk pass (`take` uses it).
    """

    lengths: list[int]
    load: Callable[[int], Any]
    n_bytes: int = 0
    filtered: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    load_many: Callable[[list[int]], list[Any]] | None = None

    def __len__(self) -> int:
        return len(self.lengths)

    def take(self, indices: list[int]) -> list[Any]:
        """Return the samples at `indices`, read in bulk where the set supports it."""
        return self.load_many(indices) if self.load_many is not None else [self.load(i) for i in indices]


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


def special_ids(tokenizer: Tokenizer) -> tuple[int, int]:
    """Return (start, stop) text ids: the tokenizer's bos/eos, else 0 and 1 (the IndexTTS convention)."""
    bos = tokenizer.bos_id if tokenizer.bos_id is not None else 0
    eos = tokenizer.eos_id if tokenizer.eos_id is not None else 1
    return bos, eos
