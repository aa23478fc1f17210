"""Base-language retention: how much the teacher-forced loss on base-language validation samples
(`val_base_loss`) rose since step 0, and the warning when it rose by more than a set share."""

from __future__ import annotations

from typing import Any


def retention_record(value: float, step: int, start: float | None, warn_share: float) -> dict[str, Any]:
    """Return the `retention` record of status.json: `val_base_loss` now, `start` (step 0's; `value`
    itself when there is none yet), `change` (relative: (now − start) / start), `warn_share` and
    `warning` (words, or None when the rise is within `warn_share`)."""
    start = value if start is None else float(start)
    change = (value - start) / start if start > 0 else 0.0
    warning = None
    if change > warn_share:
        warning = (f"base-language loss (val_base_loss) rose {change:.0%} since step 0 ({start:.4f} → {value:.4f} at "
                   f"step {step}), more than eval.base_loss_warn {warn_share:.0%}: the model is forgetting the base "
                   "language. Mix base-language data back in, lower the learning rate or freeze more.")
    return {"val_base_loss": round(value, 6), "start": round(start, 6), "change": round(change, 4), "step": step,
            "warn_share": warn_share, "warning": warning}
