"""Doctor check `memory.batch`: does the chosen batch fit the device's free memory?"""

from __future__ import annotations

from typing import Any

from core.checks.doctor import CheckResult, DoctorContext, register_check
from core.training.memory import HEADROOM, estimate_bytes, free_bytes, largest_fitting_batch

GIB = 1024**3


def _size(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / 1024**2:.1f} MiB"


def _model_config(ctx: DoctorContext) -> dict[str, Any] | None:
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


@register_check("memory.batch", order=80)
def check_memory(ctx: DoctorContext) -> CheckResult | None:
    """Return pass when the estimate for the run's batch fits 80 % of free memory, else fail with a batch that fits."""
    config = _model_config(ctx)
    if config is None or ctx.run_config is None:
        return None
    task, batch = ctx.run_config.task, ctx.run_config.batch.size
    device = ctx.device or "cpu"
    half = device.startswith("cuda") and ctx.run_config.precision in ("auto", "bf16", "fp16")
    estimate = estimate_bytes(config, task, batch, half)
    free = free_bytes(device)
    if free is None:
        return CheckResult("memory.batch", "warn", f"estimate {_size(estimate['total'])}; free memory of {device} unknown.")
    budget = int(free * HEADROOM)
    described = f"batch {batch} needs about {_size(estimate['total'])}; {device} has {_size(free)} free"
    if estimate["total"] <= budget:
        return CheckResult("memory.batch", "pass", described + ".")
    fits = largest_fitting_batch(config, task, half, budget, batch)
    if fits == 0:
        return CheckResult("memory.batch", "fail", described + "; even batch 1 does not fit.",
                           "Use a smaller model preset, shorter max_text_tokens / max_speech_tokens, or a larger device.")
    accumulate = -(-batch // fits)
    return CheckResult("memory.batch", "fail", described + f"; batch {fits} fits.",
                       f"Set batch.size: {fits} and batch.accumulate: {accumulate} to keep the effective batch.")
