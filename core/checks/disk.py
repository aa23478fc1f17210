"""Doctor check `disk.checkpoints`: does the disk of the run folder hold the checkpoints the run keeps?

A training checkpoint holds the fp32 weights and, for the trainable tensors, AdamW's two moments:
up to three times the weights. The run keeps `schedule.keep_last` of them, `best.pt` (a hard link to
one, or an older one whose step was rotated away) and the one being written before rotation. The
check fails when the disk cannot hold even the weights once (the first save would fail hours in)
and warns when it cannot hold what the run keeps at worst.
"""

from __future__ import annotations

import shutil

from core.checks.doctor import CheckResult, DoctorContext, register_check
from core.checks.memory import model_parameters
from core.fsutil import nearest_existing
from core.runs import run_folder
from core.training.memory import format_size

CHECK_ID = "disk.checkpoints"
FP32_BYTES = 4
WEIGHTS_AND_MOMENTS = 3


def _parameters(ctx: DoctorContext) -> int | None:
    loaded = ctx.checkpoint_or_none()
    if loaded is not None:
        return sum(tensor.numel() for tensor in loaded.state_dict.values())
    return model_parameters(ctx)


@register_check(CHECK_ID, order=85)
def check_checkpoint_disk(ctx: DoctorContext) -> CheckResult | None:
    """Return pass when the run folder's disk holds the worst case of what the run keeps, warn when it
    holds the weights but not that, fail when it cannot hold the weights once (None without a run config
    or a model whose size is known)."""
    if ctx.run_config is None:
        return None
    params = _parameters(ctx)
    if not params:
        return None
    run_dir = run_folder(ctx.get_settings(), ctx.run_config.name).path
    free = shutil.disk_usage(nearest_existing(run_dir)).free
    weights = params * FP32_BYTES
    keep_last = ctx.run_config.schedule.keep_last
    worst = weights * WEIGHTS_AND_MOMENTS * (keep_last + 2)
    fix = ("Free space on that disk, lower schedule.keep_last, or move the workspace (LINGUAFORGE_WORKSPACE) "
           "to a larger disk.")
    described = (f"{run_dir}: a checkpoint of {params:,} parameters is {format_size(weights)} to {format_size(weights * WEIGHTS_AND_MOMENTS)} "
                 f"(weights, then AdamW moments); the disk has {format_size(free)} free")
    if free < weights:
        return CheckResult(CHECK_ID, "fail", described + "; the first save would fail.", fix)
    if free < worst:
        return CheckResult(CHECK_ID, "warn", described + f"; keep_last {keep_last}, best.pt and the one being written "
                           f"need up to {format_size(worst)}.", fix)
    return CheckResult(CHECK_ID, "pass", described + f", more than the {format_size(worst)} the run keeps at worst.")
