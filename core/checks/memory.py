"""Doctor check `memory.batch`: does the chosen batch fit the free memory of the device the run will use?

The device is the trainer's, or for `doctor --config` the one training would pick (CUDA when
present). A passing check names the largest micro-batch that fits and, when gradient accumulation
is on, the split of the same effective batch into fewer, larger micro-batches (faster on a GPU).
"""

from __future__ import annotations

from typing import Any

from core.checks.doctor import CheckResult, DoctorContext, register_check
from core.training.memory import HEADROOM, estimate_bytes, free_bytes, largest_fitting_batch, micro_batch_plan

GIB = 1024**3
MICRO_BATCH_CAP = 512


def format_size(n: int) -> str:
    """Return `n` bytes as GiB (2 decimals) from 1 GiB up, else as MiB (1 decimal)."""
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / 1024**2:.1f} MiB"


def own_model_config(ctx: DoctorContext) -> dict[str, Any] | None:
    """Return the shape of the run's own LinguaForge GPT for the estimates, or None for a model family run."""
    if ctx.extras.get("model_config"):
        config = dict(ctx.extras["model_config"])
        return config if "d_model" in config else None  # the estimate covers LinguaForge's own GPT shapes only
    tokenizer = ctx.tokenizer_or_none()
    if ctx.run_config is None or tokenizer is None or ctx.run_config.family != "linguaforge":
        return None
    from models.registry import model_shape

    try:
        shape = model_shape(ctx.run_config.model)
    except ValueError:
        return None
    shape.setdefault("max_text_tokens", 128)
    shape.setdefault("max_speech_tokens", 256)
    return {**shape, "text_rows": tokenizer.size, "codebook_size": 1024, "n_mels": 80}


def run_device(ctx: DoctorContext) -> str:
    """Return the device the run will train on: the trainer's, else CUDA when present, else the CPU."""
    if ctx.device:
        return ctx.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@register_check("memory.batch", order=80)
def check_memory(ctx: DoctorContext) -> CheckResult | None:
    """Return pass when the estimate for the run's batch fits 80 % of the free memory of the device the
    run will use (naming the largest micro-batch that fits), else fail with a batch that fits."""
    config = own_model_config(ctx)
    if config is None or ctx.run_config is None:
        return None
    run = ctx.run_config
    task, batch, accumulate = run.task, run.batch.size, run.batch.accumulate
    checkpointing = bool(getattr(run, "activation_checkpointing", False))
    device = run_device(ctx)
    half = device.startswith("cuda") and run.precision in ("auto", "bf16", "fp16")
    estimate = estimate_bytes(config, task, batch, half, checkpointing)
    free = free_bytes(device)
    if free is None:
        return CheckResult("memory.batch", "warn", f"estimate {format_size(estimate['total'])}; free memory of {device} unknown.")
    budget = int(free * HEADROOM)
    described = f"batch {batch} needs about {format_size(estimate['total'])}; {device} has {format_size(free)} free"
    effective = batch * accumulate
    if estimate["total"] <= budget:
        largest = largest_fitting_batch(config, task, half, budget, MICRO_BATCH_CAP, checkpointing)
        message = described + f"; micro-batches up to {largest} fit."
        size, steps = micro_batch_plan(effective, largest)
        if size > batch:
            message += (f" Faster with the same effective batch {effective}: batch.size: {size}, "
                        f"batch.accumulate: {steps}.")
        return CheckResult("memory.batch", "pass", message)
    fits = largest_fitting_batch(config, task, half, budget, batch, checkpointing)
    if fits == 0:
        fix = "Use a smaller model preset, shorter max_text_tokens / max_speech_tokens, or a larger device."
        if not checkpointing and largest_fitting_batch(config, task, half, budget, batch, True) > 0:
            fix = "Set activation_checkpointing: true (recomputes each block in the backward pass), or " + fix[0].lower() + fix[1:]
        return CheckResult("memory.batch", "fail", described + "; even batch 1 does not fit.", fix)
    size, steps = micro_batch_plan(effective, fits)
    return CheckResult("memory.batch", "fail", described + f"; batch {fits} fits.",
                       f"Set batch.size: {size} and batch.accumulate: {steps} to keep the effective batch.")
