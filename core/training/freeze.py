"""Freezing: how many text rows stay fixed, and the loud failure when frozen rows moved.

Which weights train per mode, and the base-rows checksum, are the model family's
(`core.families.base.ModelFamily.apply_freeze` / `base_rows_sha256`).

Modes (run config `freeze.mode`):
- `base-rows`: rows below the base size are frozen buffers; everything else trains.
- `none`: every row and weight trains.
- `all-but-new-rows`: only the new text rows (embedding, head weight and bias) train.
"""

from __future__ import annotations

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


def require_unchanged(start: str | None, now: str | None, where: str) -> None:
    """Return None when the checksums agree; raise InternalError (loudly) when frozen rows moved."""
    if start != now:
        raise InternalError(
            f"frozen base rows changed {where}: sha256 {start} at start, {now} now. Training stopped; "
            "this is a bug in LinguaForge, please report it with the run folder."
        )
