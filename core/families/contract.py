"""The contract between a model family and the trainer: the samples and hooks a family hands over.

A family's `task_data` returns a `TaskData`: train/val `SampleSet`s (lengths plus a loader), the
`collate` that pads a list of samples into a batch (with `n_tokens`, the batch's scored tokens as a
host int), `forward(module, batch)` returning the batch's `Scored` losses and metrics, and the
`loss_weights` that make the loss of them. The trainer batches, prefetches, steps and reduces on
these alone. This module is a leaf: it imports nothing of `core.training`, so families depend on
it, never on the trainer.

`module` is what the trainer hands the forward: the model, or under `torchrun` its DDP wrapper
(or a compiled module). The forward calls it — once, with the whole batch: `module(batch=batch)`
where the family's model takes a batch — and never reaches into its attributes: only a call
through the wrapper reduces the gradients over the ranks. Each entry of `Scored` is a mean over
the tokens it scores and how many those are, so the trainer can make one process on a batch of
2B and two ranks on B each compute the same numbers (`core.training.reduction`).
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


#: a batch's losses and metrics: name → (mean over the tokens it scores, how many tokens that is), tensors
Scored = dict[str, tuple[torch.Tensor, torch.Tensor]]


def weighted_loss(scored: Scored, weights: dict[str, float]) -> torch.Tensor:
    """Return Σ weight × mean over the entries `weights` names: the loss of one batch on its own."""
    return sum(weight * scored[name][0] for name, weight in weights.items())  # type: ignore[return-value]


@dataclass
class TaskData:
    """Train/val samples plus the task's collate, forward, loss weights and metric hooks.

    `forward(module, batch)` returns the batch's `Scored` entries; the loss is Σ `loss_weights[name]`
    × that entry's mean, and every entry is logged under its name (the loss as `loss`).
    """

    train: SampleSet
    val: SampleSet
    collate: Callable[[list[Any]], dict[str, Any]]
    forward: Callable[[nn.Module, dict[str, Any]], Scored]
    loss_weights: dict[str, float]
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
