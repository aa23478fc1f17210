"""Keeping the base language through a fine-tune.

`retention_record`: how much the teacher-forced loss on base-language validation samples
(`val_base_loss`) rose since step 0, with the words of the verdict (core.eval.quality.retention) and
the warning when it rose by more than a set share.

`retention_overlay`: the run-config keys of a retention strategy — how a fine-tune keeps the base
language — for the quickstart, `bench/retention.py` and the forms. `DEFAULT_RETENTION` is the strategy
`bench/retention.py` measured best for the quick preset's budget (docs/benchmarks.md, "Keeping English").
"""

from __future__ import annotations

from typing import Any

from core.errors import InputError
from core.eval.quality.retention import retention_verdict

# strategy → what it trains: `frozen` the whole model but the base text rows; `full` everything; `replay` as
# frozen with `share` of each batch from base-language clips; `lora` LoRA on the backbone + the new text rows;
# `lora+replay` both.
STRATEGIES = ("full", "frozen", "replay", "lora", "lora+replay")
DEFAULT_RETENTION: dict[str, Any] = {"strategy": "replay", "share": 0.25}
LORA = {"kind": "lora", "rank": 16, "alpha": 32.0, "dropout": 0.0}


def retention_overlay(strategy: str, replay_manifest: str | None = None, share: float | None = None) -> dict[str, Any]:
    """Return the run-config keys (`freeze`, `adapter`, `data.replay`) of a retention `strategy` (one of
    STRATEGIES); a replay strategy mixes `share` (default DEFAULT_RETENTION's) of each batch from
    `replay_manifest`. Raises InputError for an unknown strategy or a replay strategy without a manifest."""
    if strategy not in STRATEGIES:
        raise InputError(f"retention strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}.")
    overlay: dict[str, Any] = {"freeze": {"mode": "none" if strategy == "full" else "base-rows"}}
    if strategy.startswith("lora"):
        overlay["adapter"] = dict(LORA)
    if strategy.endswith("replay"):
        if not replay_manifest:
            raise InputError(f"retention strategy {strategy}: give the base language's manifest to replay "
                             "(data.replay.manifest).")
        overlay["data"] = {"replay": {"manifest": replay_manifest,
                                      "share": float(DEFAULT_RETENTION["share"] if share is None else share)}}
    return overlay


def retention_record(value: float, step: int, start: float | None, warn_share: float,
                     language: str = "base language") -> dict[str, Any]:
    """Return the `retention` record of status.json: `val_base_loss` now, `start` (step 0's; `value`
    itself when there is none yet), `change` (relative: (now − start) / start), `verdict` and `words`
    (core.eval.quality.retention, by the loss alone), `warn_share` and `warning` (words, or None when the
    rise is within `warn_share`)."""
    start = value if start is None else float(start)
    change = (value - start) / start if start > 0 else 0.0
    verdict = retention_verdict(language, loss_change=change)
    warning = None
    if change > warn_share:
        warning = (f"base-language loss (val_base_loss) rose {change:.0%} since step 0 ({start:.4f} → {value:.4f} at "
                   f"step {step}), more than eval.base_loss_warn {warn_share:.0%}: the model is forgetting the base "
                   "language. Mix base-language data back in, lower the learning rate or freeze more.")
    return {"val_base_loss": round(value, 6), "start": round(start, 6), "change": round(change, 4), "step": step,
            "verdict": verdict["verdict"], "words": verdict["words"], "warn_share": warn_share, "warning": warning}
