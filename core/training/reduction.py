"""How a training step's and a validation's losses are reduced over micro-batches and ranks.

A family's forward returns `Scored` (`core.families.contract`): each loss or metric as its mean
over the tokens it scores and how many those are. The rule: under `torchrun` with W ranks, each
taking its share of a global batch, every number is what one process computes on the whole
global batch — each metric the mean over every scored token of it (Σ mean × count / Σ count over
the ranks), the loss Σ weight × that. Token-weighted means are not the mean of the ranks' means
(ranks score different token counts), so the ranks sum their (mean × count, count) pairs in one
`all_reduce` per micro-batch. DDP averages the gradients over the ranks, so each rank
back-propagates W × Σ weight × mean × count / global count: the average of those gradients is
the gradient of the global batch's loss.

With `batch.accumulate` A each micro-batch is reduced so and weighted 1/A, as in one process
(which takes the mean of its micro-batches' losses). One process (W = 1) computes exactly
Σ weight × mean, as before there were ranks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from core.families.contract import Scored


def step_loss(scored: Scored, weights: dict[str, float], world: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Return (the loss this rank back-propagates, the global batch's metrics as detached device tensors).

    The metrics are every entry of `scored` by name plus `loss` (Σ weight × mean), each the global
    batch's value and the same on every rank. Under several ranks every rank must call this for
    every micro-batch (one collective); nothing is read back to the host.
    """
    names = sorted(scored)
    if world == 1:
        metrics = {name: scored[name][0].detach() for name in names}
        loss = sum(weight * scored[name][0] for name, weight in weights.items())
    else:
        means = torch.stack([scored[name][0].float() for name in names])
        counts = torch.stack([torch.as_tensor(scored[name][1], device=means.device).float() for name in names])
        totals = torch.cat([means.detach() * counts, counts])
        dist.all_reduce(totals)
        global_sums, global_counts = totals.split(len(names))
        share = counts / global_counts * world
        position = {name: i for i, name in enumerate(names)}
        loss = sum(weight * means[position[name]] * share[position[name]] for name, weight in weights.items())
        metrics = dict(zip(names, global_sums / global_counts))
    metrics["loss"] = sum(weight * metrics[name] for name, weight in weights.items()).detach()  # type: ignore[union-attr]
    return loss, metrics  # type: ignore[return-value]


class ScoredSums:
    """Validation: each entry's Σ mean × count and Σ count over batches (float64, on the device), and the
    batches' real tokens; `means` reads them once, summed over the ranks when the batches were shared out."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, torch.Tensor] = {}
        self.tokens = 0

    def add(self, scored: Scored, tokens: int) -> None:
        """Add one batch's entries and its `tokens` (never synchronises)."""
        for name, (mean, count) in scored.items():
            count = torch.as_tensor(count, device=mean.device).to(torch.float64)
            value = mean.detach().to(torch.float64) * count
            self.sums[name] = self.sums[name] + value if name in self.sums else value
            self.counts[name] = self.counts[name] + count if name in self.counts else count
        self.tokens += tokens

    def means(self, weights: dict[str, float], device: torch.device, all_ranks: bool) -> tuple[dict[str, float], int]:
        """Return ({name: Σ mean × count / Σ count, `loss`: Σ weight × mean}, the tokens) — summed over every rank
        first when `all_ranks` (every rank must then call it, each having added at least one batch); ({}, 0)
        when nothing was added."""
        names = sorted(self.sums)
        if not names:
            return {}, 0
        tokens = torch.tensor(float(self.tokens), dtype=torch.float64, device=device)
        totals = torch.stack([*(self.sums[n] for n in names), *(self.counts[n] for n in names), tokens])
        if all_ranks:
            dist.all_reduce(totals)
        values = totals.tolist()
        metrics = {name: values[i] / values[len(names) + i] for i, name in enumerate(names)}
        metrics["loss"] = sum(weight * metrics[name] for name, weight in weights.items())
        return metrics, int(values[-1])
