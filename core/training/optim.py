"""Optimiser and learning-rate schedule: AdamW parameter groups, warmup + cosine, new-row warmup.

Parameters whose name ends in `bias`, LayerNorm weights and other 1-D tensors get no weight
decay; matrices (including the trainable new text rows) decay. Frozen text rows are buffers,
so they never reach the optimiser. `RowWarmup` ramps the update of rows that a vocabulary
extension added mid-run, whose Adam moments start at zero.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from core.training.run_config import OptimConfig


def parameter_groups(model: nn.Module, weight_decay: float) -> tuple[list[dict], list[str]]:
    """Return AdamW groups `[decay, no_decay]` and the parameter names in optimiser order.

    Only parameters with `requires_grad` are included.
    """
    decay, no_decay, decay_names, no_decay_names = [], [], [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim < 2 or name.endswith("bias"):
            no_decay.append(param)
            no_decay_names.append(name)
        else:
            decay.append(param)
            decay_names.append(name)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return groups, decay_names + no_decay_names


def build_optimizer(model: nn.Module, config: OptimConfig) -> tuple[torch.optim.AdamW, list[str]]:
    """Return an AdamW over the trainable parameters of `model` and the names in state order.

    On CUDA the fused kernel (one launch for all parameters) is used when every parameter is a
    floating-point CUDA tensor, the multi-tensor `foreach` one otherwise; on the CPU torch's default.
    """
    groups, names = parameter_groups(model, config.weight_decay)
    params = [p for g in groups for p in g["params"]]
    kind: dict[str, bool] = {}
    if params and all(p.is_cuda and p.is_floating_point() for p in params):
        kind = {"fused": True}
    elif any(p.is_cuda for p in params):
        kind = {"foreach": True}
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=tuple(config.betas), **kind)
    return optimizer, names


def lr_factor(step: int, config: OptimConfig, max_steps: int) -> float:
    """Return the multiplier of the base lr at optimiser step `step` (0-based).

    Linear warmup over `warmup_steps`, then cosine decay to `min_lr_ratio` at `max_steps`
    (`schedule: constant` keeps 1.0 after warmup).
    """
    if config.warmup_steps > 0 and step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    span = max(1, max_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return config.min_lr_ratio + (1.0 - config.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, config: OptimConfig, max_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Return a LambdaLR applying `lr_factor` for this run."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, config, max_steps))


class RowWarmup:
    """Scale the optimiser's update of fresh rows of some parameters by a ramp 1/n … 1.

    `rows` maps a parameter name to its first fresh row; `steps` is the ramp length and `done`
    how much of it has run (saved in checkpoints, so a resume continues the ramp). Call
    `before()` ahead of `optimizer.step()` and `after()` right after it.
    """

    def __init__(self, params: dict[str, nn.Parameter], rows: dict[str, int], steps: int, done: int = 0) -> None:
        self.rows = {name: start for name, start in rows.items() if start < params[name].shape[0]}
        self.params = {name: params[name] for name in self.rows}
        self.steps = steps
        self.done = done
        self._saved: dict[str, torch.Tensor] = {}

    @property
    def active(self) -> bool:
        """Return True while the ramp is still running."""
        return bool(self.rows) and self.done < self.steps

    def before(self) -> None:
        """Remember the fresh rows' values before the update."""
        if self.active:
            self._saved = {n: self.params[n].detach()[start:].clone() for n, start in self.rows.items()}

    def after(self) -> None:
        """Blend the fresh rows between their old and updated values by the ramp factor."""
        if not self.active:
            return
        self.done += 1
        factor = self.done / self.steps
        with torch.no_grad():
            for name, start in self.rows.items():
                param, old = self.params[name], self._saved[name]
                param[start:].copy_(old + factor * (param[start:] - old))
        self._saved = {}

    def state_dict(self) -> dict:
        """Return the fresh rows by parameter name, the ramp length and its progress."""
        return {"rows": dict(self.rows), "steps": self.steps, "done": self.done}
