"""Freezing: how many text rows stay fixed, which other weights train, and the base-rows checksum.

Modes (run config `freeze.mode`):
- `base-rows`: rows below the base size are frozen buffers; everything else trains.
- `none`: every row and weight trains.
- `all-but-new-rows`: only the new text rows (embedding, head weight and bias) train.
"""

from __future__ import annotations

import hashlib

from torch import nn

from core.errors import InputError, InternalError
from core.training.run_config import FreezeConfig


def frozen_row_count(freeze: FreezeConfig, base_size: int | None, rows: int) -> int:
    """Return how many leading text rows to freeze for this run.

    `until: auto` takes `base_size` (from the base checkpoint's metadata); without a base
    checkpoint nothing is frozen. Raises InputError when the count exceeds the rows.
    """
    if freeze.mode == "none":
        return 0
    until = base_size if freeze.until == "auto" else int(freeze.until)
    if until is None:
        if freeze.mode == "all-but-new-rows":
            raise InputError(
                "freeze.mode all-but-new-rows needs a base size: set base_checkpoint (with metadata) or freeze.until."
            )
        return 0
    if until > rows:
        raise InputError(f"freeze.until {until} exceeds the model's {rows} text rows; lower it or use `auto`.")
    return until


def apply_freeze(model: nn.Module, mode: str) -> None:
    """Set `requires_grad` for `mode`; for `all-but-new-rows` only the `*_new` text tensors train."""
    for name, param in model.named_parameters():
        param.requires_grad = mode != "all-but-new-rows" or name.startswith(("text_embedding.", "text_head."))


def base_rows_sha256(model: nn.Module) -> str | None:
    """Return one sha256 over the frozen rows of the text embedding and head, or None if none are frozen."""
    embedding, head = model.text_embedding, model.text_head
    if embedding.frozen == 0:
        return None
    digest = hashlib.sha256()
    digest.update(embedding.base_sha256().encode())
    digest.update(head.base_sha256().encode())
    return digest.hexdigest()


def require_unchanged(start: str | None, now: str | None, where: str) -> None:
    """Return None when the checksums agree; raise InternalError (loudly) when frozen rows moved."""
    if start != now:
        raise InternalError(
            f"frozen base rows changed {where}: sha256 {start} at start, {now} now. Training stopped; "
            "this is a bug in LinguaForge, please report it with the run folder."
        )
