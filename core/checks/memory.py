"""Doctor check `memory.batch`: does one training step of the run fit its device, or a device size the user names?

The plan is `core.training.memory.plan_memory` for the run's family, model, freeze mode or LoRA adapter,
precision and activation checkpointing, part by part. The device: a size named with `--device-memory`
(a CUDA device unless `--device cpu`; 90 % of it usable), else the device the run will use (the
trainer's; for `doctor --config`, CUDA when present) and 80 % of its free memory. The lengths: the
feature cache's longest item when the cache is known, else the manifest's longest clip (its duration
× the family's speech tokens per second, or the own model's codec frame rate, its text through the tokenizer), else the model's position
limits. A passing check names the largest micro-batch that fits and the split of the same effective
batch into fewer, larger micro-batches; with `batch.size: auto` it names the micro-batch × accumulation
the run will take (`core.training.auto_batch.choose_batch`, the trainer's own choice). A failing one names what would fit (micro-batch + accumulation,
activation checkpointing, LoRA, bf16) and, when nothing does, the device size the run needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from core.checks.doctor import CheckResult, DoctorContext, register_check
from core.errors import InputError
from core.structured import read_json_file
from core.training.auto_batch import (
    MICRO_BATCH_CAP,
    Lengths,
    StepPlanner,
    cache_lengths,
    choose_batch,
    device_budget,
    manifest_lengths,
)
from core.training.memory import (
    NAMED_HEADROOM,
    MemoryPlan,
    count_parameters,
    format_size,
    largest_fitting_batch,
    micro_batch_plan,
)
from core.training.run_config import AUTO_EFFECTIVE

CHECK_ID = "memory.batch"


@dataclass
class RunModel:
    """What the plan needs of a run: its family, model config (`to_dict()`), frozen rows, the checkpoint it keeps
    loaded and its speech tokens per second (the family's, or its codec's frame rate; None when unknown)."""

    family: Any
    config: dict[str, Any]
    frozen_rows: int
    host_bytes: int
    speech_rate: float | None = None


def run_device(ctx: DoctorContext) -> str:
    """Return the device the run will train on: the context's, else CUDA when a size is named or CUDA is present, else the CPU."""
    if ctx.device:
        return ctx.device
    import torch

    return "cuda" if ctx.device_memory is not None or torch.cuda.is_available() else "cpu"


def _state_bytes(loaded: Any) -> int:
    return sum(t.numel() * t.element_size() for t in loaded.state_dict.values()) if loaded is not None else 0


def run_model(ctx: DoctorContext) -> RunModel | None:
    """Return the run's family, model config, frozen rows and loaded checkpoint size; None when they cannot be
    known yet (the checks that own the tokenizer, checkpoint and config report why)."""
    from core.families.registry import get_model_family
    from core.training.freeze import frozen_row_count
    from core.training.plan import plan_run

    run, tokenizer = ctx.run_config, ctx.tokenizer_or_none()
    if run is None or tokenizer is None:
        return None
    try:
        family = get_model_family(run.family)
        base, resume = ctx.checkpoint_or_none(), ctx.resume()
        config, rate = ctx.extras.get("model_config"), family.speech_tokens_per_second
        if not config or rate is None:
            plan = plan_run(run, ctx.get_settings(), ctx.config_path)
            family_run = plan.family_run(tokenizer, base if resume is None else resume)
            family_run.codec = family.load_codec(family_run)
            config = config or family.model_config(family_run).to_dict()
            rate = family.speech_rate(family_run)
        if resume is not None and "frozen_rows" in resume.extra:
            frozen = int(resume.extra["frozen_rows"])
        else:
            frozen = frozen_row_count(run.freeze, family.base_size(base), tokenizer.size)
    except InputError:
        return None
    return RunModel(family, dict(config), frozen, _state_bytes(base if base is not None else resume), rate)


def model_parameters(ctx: DoctorContext) -> int | None:
    """Return the number of elements of the run's model tensors (counted on the `meta` device), None when
    the model is not known yet."""
    model = run_model(ctx)
    if model is None:
        return None
    return count_parameters(model.family, model.config, model.frozen_rows, ctx.run_config.freeze.mode).elements


def data_lengths(ctx: DoctorContext, model: RunModel) -> Lengths:
    """Return the longest text and speech of the run's micro-batches: the feature cache's longest item when the
    cache is known, else the manifest's longest clip, else the model's position limits."""
    config, run = model.config, ctx.run_config
    limits = (int(config.get("max_text_tokens", 128)), int(config.get("max_speech_tokens", 0)) if run.task == "tts" else 0)
    index = Path(ctx.cache_dir) / "index.json" if ctx.cache_dir else None
    try:
        entries = read_json_file(index).get("items", []) if index is not None and index.is_file() else []
    except (OSError, ValueError, AttributeError):  # an unreadable index: the cache checks name it
        entries = []
    found = cache_lengths(entries, limits)
    if found is not None:
        return found
    rate = model.speech_rate
    if run.task == "tts" and run.data.manifest and rate:
        path = ctx.get_settings().resolve(run.data.manifest)
        if path.is_file():
            stat = path.stat()
            found = manifest_lengths(str(path), (stat.st_size, stat.st_mtime_ns), ctx.tokenizer(), float(rate), limits)
            if found is not None:
                return found
    return Lengths(limits[0], limits[1], "the model's position limits")


def _half(precision: str, device: str) -> bool:
    """Return whether the trainer runs the step under 16-bit autocast (`precision`, `auto` = bf16 on CUDA)."""
    return precision in ("bf16", "fp16") or (precision == "auto" and device.startswith("cuda"))


@dataclass
class RunMemory:
    """A run's memory plan at any micro-batch, precision, recomputation and adapter: its model, its longest
    text and speech, the device type it trains on and its ranks (processes under torchrun)."""

    model: RunModel
    lengths: Lengths
    device: str
    run: Any
    ranks: int = 1

    @classmethod
    def of(cls, ctx: DoctorContext) -> "RunMemory | None":
        """Return the run's memory planner, None when its model is not known yet."""
        model = run_model(ctx)
        if model is None:
            return None
        return cls(model, data_lengths(ctx, model), run_device(ctx), ctx.run_config, ctx.ranks)

    @property
    def lora(self) -> Any:
        """Return the run's LoRA adapter config, None for a full fine-tune."""
        return self.run.adapter if self.run.adapter.kind != "none" else None

    @property
    def planner(self) -> StepPlanner:
        """Return the run's plan at any micro-batch (`core.training.auto_batch.StepPlanner`)."""
        return StepPlanner(self.model.family, self.model.config, self.model.frozen_rows, self.run.freeze.mode, self.lora,
                           self.model.host_bytes, self.lengths, "cuda" if self.device.startswith("cuda") else "cpu",
                           _half(self.run.precision, self.device), self.run.activation_checkpointing, self.ranks)

    def plan(self, batch: int, checkpointing: bool | None = None, half: bool | None = None, adapter: Any = "run",
             accumulate: int = 1) -> MemoryPlan | None:
        """Return the plan at micro-batch `batch`, `accumulate` a step, with the run's settings, or those given
        (`StepPlanner.plan`)."""
        return self.planner.plan(batch, checkpointing, half, adapter, accumulate)


@register_check(CHECK_ID, order=80)
def check_memory(ctx: DoctorContext) -> CheckResult | None:
    """Return pass when the plan of one step peaks within the device's usable memory (naming the largest
    micro-batch that fits), else fail naming what would fit; None when the run's model is not known yet."""
    from core.training.run_config import AdapterConfig

    memory = RunMemory.of(ctx)
    if memory is None:
        return None
    run, device, lengths, lora = memory.run, memory.device, memory.lengths, memory.lora
    auto = run.batch.auto
    batch = 1 if auto else run.batch.size  # auto: whether one sample fits decides pass or fail
    effective = (run.batch.effective or AUTO_EFFECTIVE) if auto else run.batch.size * run.batch.accumulate
    accumulate = effective // batch  # auto: micro-batch 1 accumulates to the samples a step asks for
    try:
        plan = memory.plan(batch, accumulate=accumulate)
    except InputError as exc:  # adapter targets that match no module: the adapter check names them
        return CheckResult(CHECK_ID, "warn", f"no memory plan: {exc}")
    if plan is None:
        return None
    budget_where = device_budget(device, ctx.device_memory)
    if budget_where is None:
        described = f"{_described(memory.model, plan, lengths, lora)}: peak {format_size(plan.peak)} ({plan.describe()})"
        return CheckResult(CHECK_ID, "warn", f"{described}; free memory of {device} unknown.",
                           "Name the device's size: doctor --device-memory 24GiB.")
    budget, where = budget_where
    usable = f"{where}, {format_size(budget)} usable"
    if plan.peak <= budget and auto:
        choice = choose_batch(memory.plan, budget, where, effective)
        plan = memory.plan(choice.size, accumulate=choice.accumulate)
        described = f"{_described(memory.model, plan, lengths, lora)}: peak {format_size(plan.peak)} ({plan.describe()})"
        return CheckResult(CHECK_ID, "pass", f"{described}; {choice.describe()}.")
    described = f"{_described(memory.model, plan, lengths, lora)}: peak {format_size(plan.peak)} ({plan.describe()})"
    if plan.peak <= budget:
        largest = largest_fitting_batch(lambda b: memory.plan(b, accumulate=2), budget, MICRO_BATCH_CAP)
        message = f"{described}; {usable}; micro-batches up to {largest} fit (accumulating)."
        choice = choose_batch(memory.plan, budget, where, effective)
        if choice.size > run.batch.size:
            message += (f" Faster with the same effective batch {effective}: batch.size: {choice.size}, "
                        f"batch.accumulate: {choice.accumulate}.")
        return CheckResult(CHECK_ID, "pass", message)
    fixes = _what_fits(memory.plan, budget, batch, effective, plan.step.device, lora is None, AdapterConfig(kind="lora"))
    return CheckResult(CHECK_ID, "fail", f"{described} does not fit: {usable}.", fixes)


def _described(model: RunModel, plan: MemoryPlan, lengths: Lengths, lora: Any) -> str:
    step = plan.step
    kind = f"LoRA rank {lora.rank}" if lora is not None else "full fine-tune"
    extras = ", activation checkpointing" if step.checkpointing else ""
    if plan.ranks > 1:
        copies = ("the unsynchronised micro-batches' gradients beside its buckets" if step.accumulate > 1
                  else "the gradients are views into its buckets, no second copy")
        extras += f", each of {plan.ranks} ranks (DDP: {copies})"
    return (f"{model.family.name} {kind} ({plan.parameters.trainable / 1e6:.1f}M trainable), micro-batch {step.batch} × "
            f"{plan.positions} positions ({lengths.text} text + {lengths.speech} speech tokens: {lengths.source}), "
            f"{'bf16' if step.half else 'fp32'}{extras}")


def _what_fits(plan_at: Callable[..., MemoryPlan], budget: int, batch: int, effective: int, device: str, can_lora: bool,
               lora: Any) -> str:
    """Return the fix for micro-batch `batch` (`effective` samples a step): each change that alone makes the step fit,
    with its peak; else the changes together; else the size needed. A smaller micro-batch accumulates to `effective`
    and is planned so (gradients and activations held together)."""
    accumulate = effective // batch
    options: list[str] = []
    upper = min(batch, effective - 1)
    fits = largest_fitting_batch(lambda b: plan_at(b, accumulate=2), budget, upper) if upper >= 1 else 0
    if fits:
        size, steps = micro_batch_plan(effective, fits)
        options.append(f"batch.size: {size} with batch.accumulate: {steps}, the same effective batch {effective} "
                       f"→ peak {format_size(plan_at(size, accumulate=steps).peak)}")
    changes: list[tuple[str, dict[str, Any]]] = []
    if not plan_at(batch).step.checkpointing:
        changes.append(("activation_checkpointing: true", {"checkpointing": True}))
    if can_lora:
        changes.append(("adapter: {kind: lora} (rank 16, the default targets)", {"adapter": lora}))
    if device == "cuda" and not plan_at(batch).step.half:
        changes.append(("precision: bf16", {"half": True}))
    for label, change in changes:
        peak = plan_at(batch, accumulate=accumulate, **change).peak
        if peak <= budget:
            options.append(f"{label} → peak {format_size(peak)}")
    if options:
        return "Any one of these fits: " + "; ".join(options) + "."
    together = {k: v for _, change in changes for k, v in change.items()}
    labels = ", ".join(label for label, _ in changes)
    fits = largest_fitting_batch(lambda b: plan_at(b, accumulate=2, **together), budget, upper) if upper >= 1 else 0
    if fits and changes:
        size, steps = micro_batch_plan(effective, fits)
        return (f"Together, {labels} and batch.size: {size} with batch.accumulate: {steps} fit "
                f"→ peak {format_size(plan_at(size, accumulate=steps, **together).peak)}.")
    smallest = plan_at(1, accumulate=min(2, effective), **together).peak
    return (f"Even micro-batch 1{' with ' + labels if labels else ''} peaks at {format_size(smallest)}: use a device with at least "
            f"{format_size(math.ceil(smallest / NAMED_HEADROOM))}, or shorter clips.")
