"""Chunked cross-entropy: a head's fp32 logits and their loss, a chunk of positions at a time.

The plain loss materialises every scored position's logits in fp32 at once (B × T × rows: at Turbo's
50,276 text rows or a large auto batch, more than the backbone's activations), and autograd keeps them,
their log-probabilities and their gradient until the backward pass. `head_cross_entropy` runs the head
and the loss over `CHUNK_POSITIONS` positions at a time under activation checkpointing: the forward
keeps only each position's loss (and its argmax), and the backward recomputes one chunk's logits at a
time. The result is the same loss, per position, and the same gradients up to the summation order of
the head's weight gradient over chunks (tests/test_chunked_loss.py); it costs one more head matmul per
chunk. Up to `CHUNK_POSITIONS` positions it is the plain computation itself. Every model family's
training loss goes through it (text and speech heads); frozen head rows are buffers and stay untouched.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE = -100
CHUNK_POSITIONS = 2048  # positions whose fp32 logits are held at once (2048 × 50,276 rows × 4 B = 412 MB at Turbo's text head)


def _chunk_loss(head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, targets: torch.Tensor,
                ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()
    return F.cross_entropy(logits, targets, ignore_index=ignore_index, reduction="none"), logits.argmax(-1)


def head_cross_entropy(head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, targets: torch.Tensor,
                       ignore_index: int = IGNORE, chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (the cross-entropy of `head(hidden)` in fp32 against `targets`, 0 where a target is `ignore_index`;
    the logits' argmax), both shaped as `targets`. `hidden` is [..., width] with `targets`' leading shape.

    More than `chunk` positions (default `CHUNK_POSITIONS`) are computed `chunk` at a time (recomputed in the backward pass), so no more than
    one chunk's logits exist at once.
    """
    chunk = chunk or CHUNK_POSITIONS
    flat_hidden, flat_targets = hidden.reshape(-1, hidden.size(-1)), targets.reshape(-1)
    count = flat_targets.numel()
    if count <= chunk:
        losses, best = _chunk_loss(head, flat_hidden, flat_targets, ignore_index)
    else:
        recompute = torch.is_grad_enabled() and flat_hidden.requires_grad
        parts = [checkpoint(_chunk_loss, head, flat_hidden[start:start + chunk], flat_targets[start:start + chunk], ignore_index,
                            use_reentrant=False) if recompute
                 else _chunk_loss(head, flat_hidden[start:start + chunk], flat_targets[start:start + chunk], ignore_index)
                 for start in range(0, count, chunk)]
        losses, best = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    return losses.view(targets.shape), best.view(targets.shape)
