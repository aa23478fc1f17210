"""`batch: {size: auto}`: the largest micro-batch the memory plan fits on the device, and the accumulation
that reaches the requested samples per step.

`StepPlanner` is a run's memory plan (`core.training.memory.plan_memory`) at any micro-batch: its family,
model, frozen rows, freeze mode or LoRA adapter, precision, activation checkpointing and the data's longest
text and speech (`Lengths`). The lengths are what the longest bucket of a run pads every sample of a
micro-batch to: the longest text and speech of the data (the feature cache's items, a manifest's longest clip
at the family's or the codec's speech-token rate, the corpus's longest line), and the model's position limits
only when the data is not known. `device_budget` is the memory a run may plan to use: 90 % of a size the user
names (`--device-memory`), else 80 % of the device's free memory. `choose_batch` takes the effective batch at
once when it fits, else bisects the largest micro-batch that fits with accumulation (its gradients held while the
next micro-batch's activations are built) and splits the effective batch into that many samples × accumulation
steps (`micro_batch_plan`: the optimisation does not change). The doctor's `memory.batch` check and the trainer
both decide through here, so the choice the doctor prints is the one the run takes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping

from core.errors import InputError
from core.training.memory import (
    HEADROOM,
    NAMED_HEADROOM,
    MemoryPlan,
    StepShape,
    format_size,
    free_bytes,
    largest_fitting_batch,
    micro_batch_plan,
    plan_memory,
)

MICRO_BATCH_CAP = 512  # the largest micro-batch the plan is asked about


@dataclass(frozen=True)
class Lengths:
    """The longest text and speech (tokens) a micro-batch of the run holds, and where they come from."""

    text: int
    speech: int
    source: str


@dataclass
class StepPlanner:
    """A run's memory plan at any micro-batch, precision, recomputation and adapter.

    `model_config` is the family's `to_dict()`; `adapter` the run's LoRA config (None: full fine-tune);
    `host_bytes` the base checkpoint the trainer keeps loaded (counted on the CPU); `device` `cuda` or `cpu`;
    `ranks` the processes the run trains on (DDP's gradient buckets on each, beyond one).
    """

    family: Any
    model_config: Mapping[str, Any]
    frozen_rows: int
    freeze_mode: str
    adapter: Any
    host_bytes: int
    lengths: Lengths
    device: str
    half: bool
    checkpointing: bool
    ranks: int = 1

    def plan(self, batch: int, checkpointing: bool | None = None, half: bool | None = None,
             adapter: Any = "run", accumulate: int = 1) -> MemoryPlan | None:
        """Return the plan at micro-batch `batch`, `accumulate` of them a step, with the run's settings, or those given
        (None: the family states no shape).

        Raises InputError for adapter targets that match no module of the model.
        """
        step = StepShape(batch, self.lengths.text, self.lengths.speech, self.half if half is None else half,
                         self.checkpointing if checkpointing is None else checkpointing, self.device, accumulate)
        return plan_memory(self.family, self.model_config, step, frozen_rows=self.frozen_rows, freeze_mode=self.freeze_mode,
                           adapter=self.adapter if adapter == "run" else adapter, host_bytes=self.host_bytes,
                           ranks=self.ranks)


@dataclass(frozen=True)
class BatchChoice:
    """What `batch: {size: auto}` chose: `size` samples per micro-batch × `accumulate` = `effective`;
    `largest` the largest micro-batch that fits (with accumulation, unless it is the whole `effective`); the plan's
    `peak` at `size` and `accumulate` and the `budget` it was held to."""

    size: int
    accumulate: int
    effective: int
    largest: int
    peak: int
    budget: int
    where: str

    @property
    def headroom(self) -> int:
        """Return the bytes the plan leaves unused within the budget at the chosen micro-batch."""
        return self.budget - self.peak

    def describe(self) -> str:
        """Return the choice as one line: micro-batch × accumulation, the largest that fits, peak and headroom."""
        return (f"batch.size auto: micro-batch {self.size} × accumulate {self.accumulate} = {self.effective} samples per step "
                f"(micro-batches up to {self.largest} fit); plan peak {format_size(self.peak)} of {format_size(self.budget)} "
                f"usable ({self.where}), headroom {format_size(self.headroom)}")

    def to_dict(self) -> dict[str, Any]:
        """Return the choice as JSON-ready data (bytes), as the run records it."""
        return {"size": self.size, "accumulate": self.accumulate, "effective": self.effective, "largest": self.largest,
                "peak": self.peak, "budget": self.budget, "headroom": self.headroom, "where": self.where}


def device_budget(device: str, device_memory: int | None) -> tuple[int, str] | None:
    """Return (bytes a run may plan to use, where they come from): 90 % of `device_memory` when named, else 80 %
    of `device`'s free memory; None when the free memory of `device` is unknown."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    if device_memory is not None:
        return int(device_memory * NAMED_HEADROOM), f"{format_size(device_memory)} named for {kind}"
    free = free_bytes(device)
    if free is None:
        return None
    return int(free * HEADROOM), f"{device} has {format_size(free)} free"


def choose_batch(plan_at: Callable[..., MemoryPlan], budget: int, where: str, effective: int) -> BatchChoice:
    """Return how to take `effective` samples per step within `budget`: all at once when their plan
    (`plan_at(batch)`) fits, else the largest micro-batch whose plan with accumulation (`plan_at(batch, accumulate=n)`,
    n > 1: gradients and activations held together) fits and divides `effective`, with the accumulation that
    reaches it.

    Raises InputError when not even a micro-batch of 1 fits (the doctor's `memory.batch` check names what would).
    """
    whole = plan_at(effective).peak if effective <= MICRO_BATCH_CAP else None
    if whole is not None and whole <= budget:
        return BatchChoice(effective, 1, effective, effective, whole, budget, where)
    upper = min(MICRO_BATCH_CAP, effective - 1)
    largest = largest_fitting_batch(lambda batch: plan_at(batch, accumulate=2), budget, upper) if upper >= 1 else 0
    if largest == 0:
        raise InputError(f"batch.size auto: not even a micro-batch of 1 fits {format_size(budget)} usable ({where}): "
                         f"plan peak {format_size(plan_at(1, accumulate=min(2, effective)).peak)}. "
                         "Run `doctor --config` for what would fit.")
    size, accumulate = micro_batch_plan(effective, largest)
    return BatchChoice(size, accumulate, effective, largest, plan_at(size, accumulate=accumulate).peak, budget, where)


def cache_lengths(entries: list[dict[str, Any]], limits: tuple[int, int]) -> Lengths | None:
    """Return the longest text and speech of the feature-cache index `entries` within the position `limits`
    (text, speech; longer items are filtered by training), None when none fits."""
    items = [i for i in entries if i.get("n_text", 0) <= limits[0] and i.get("n_codes", 0) <= limits[1]]
    if not items:
        return None
    return Lengths(max(i["n_text"] for i in items), max(i["n_codes"] for i in items), "the feature cache's longest item")


@lru_cache(maxsize=8)
def manifest_lengths(path: str, stamp: tuple[int, int], tokenizer: Any, rate: float, limits: tuple[int, int]) -> Lengths | None:
    """Return the longest speech (a clip's duration × `rate` speech tokens per second) and text (its tokens + 1) of
    the manifest at `path` within `limits`, None when no clip has a duration that fits. `stamp` (size, mtime) keys the cache."""
    from core.data.manifest import read_manifest

    rows, _ = read_manifest(path, check_audio=False)
    fitting = [(math.ceil(row.duration * rate), row) for row in rows if row.duration and math.ceil(row.duration * rate) <= limits[1]]
    if not fitting:
        return None
    speech, longest = max(fitting, key=lambda pair: pair[0])
    text = min(limits[0], max(len(tokenizer.encode(row.text)) + 1 for _, row in fitting))  # + 1: a language tag, where the family adds one
    return Lengths(text, speech, f"the manifest's longest clip, {longest.duration:.1f} s at {rate:g} speech tokens/s")
