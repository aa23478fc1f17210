"""The memory plan of a training run: what one optimiser step holds on its device, part by part.

Parameters are counted exactly: the family's model is built on the `meta` device (no memory, no
weights) with the run's frozen rows and its freeze mode or LoRA adapter applied, so what trains and
what stays frozen are the model's own tensors. What a step holds beyond them comes from the family's
`MemoryShape` (`core.families.base`): the backbone's block kind and size, the positions of a sample,
the rows of the two heads. The parts, in bytes:

- `trainable weights`, `gradients` and `optimizer state` (AdamW's two fp32 moments) of what trains;
- `frozen weights`: frozen parameters and buffers (frozen text rows, IndexTTS2's conditioning encoders);
- `16-bit weight copies` (bf16/fp16 autocast): every weight a block or head multiplies by, cast once per
  forward and kept for the backward pass;
- `activations`: what autograd keeps for the backward pass at the run's batch and its longest text and
  speech, block by block (`BLOCKS`, measured on the installed classes: tests/test_memory_plan.py), plus
  the embeddings, norms and head inputs around the blocks, the conditioning prompt, attention scores
  where the kernel does not fuse them (dropout on the CPU, `attention: naive`), and the copy of the text
  rows a split head multiplies by. With activation checkpointing only each block's input is kept, plus
  one block recomputed at a time;
- `logits`: the fp32 log-probabilities of the text and speech positions the loss holds at once, and their
  gradients: every position of a head up to `models.losses.CHUNK_POSITIONS`, one chunk of them beyond
  (the chunked cross-entropy recomputes a chunk's logits at a time in the backward pass);
- `base checkpoint in memory`: on the CPU, the base checkpoint the trainer keeps loaded beside the model;
- `DDP gradient buckets`: under several ranks (torchrun), DistributedDataParallel's flat buckets, one gradient
  per trainable weight (frozen ones get none), held from its start to the run's end. The trainer builds DDP with
  `gradient_as_bucket_view` (`core.training.trainer.data_parallel`): the gradients are views into the buckets,
  so they are no second copy — under DDP the `gradients` part is empty and the buckets hold them all step, unless
  the step accumulates (below).

The step's peak is the persistent parts plus the larger of what the start of the backward pass holds
(activations and logits) and what its end holds (the gradients): gradients grow while activations are freed.
A step that accumulates several micro-batches holds both at once — the first micro-batch's gradients stay while
the next one's activations are built — so its peak is their sum; under DDP those micro-batches run under `no_sync`
and make their gradients beside the buckets (`gradients` is then the trainable weights' size again).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch

from core.families.base import MemoryShape
from models.losses import CHUNK_POSITIONS

if TYPE_CHECKING:
    from core.families.base import ModelFamily

GIB = 1024**3
HEADROOM = 0.8  # share of a device's *free* memory a run may plan to use (others may grow into the rest)
NAMED_HEADROOM = 0.9  # share of a device size the user names (CUDA context and allocator fragmentation take the rest)
POSITION_FLOATS = 4  # values of `width` kept per position outside the blocks: embedding sums, final norm, head input
PROMPT_FLOATS = 16  # values of `width` kept per prompt token a sample encodes in the step (Chatterbox's perceiver)
LOGIT_COPIES = 3  # fp32 values per logit at the backward pass's start: the kept log-probabilities, their gradient, the logits' gradient
SCORE_BYTES = 12  # bytes per unfused attention score: probabilities, dropout mask and dropped probabilities
DROPOUT_FLOATS = 1  # values of `width` per position each block adds for its dropout masks (LinguaForge's own GPT)


@dataclass(frozen=True)
class BlockCost:
    """What autograd keeps per position of one transformer block, in bytes, for fp32 training and for
    16-bit autocast, as functions of (width, MLP width, heads); `matmul_params` the weights it multiplies by."""

    fp32: Callable[[int, int, int], int]
    half: Callable[[int, int, int], int]
    matmul_params: Callable[[int, int], int]


#: Measured with `saved_bytes` on the installed classes (CPU, 2 vs 1 layers, two lengths): HF `LlamaDecoderLayer`
#: (RMSNorm kept in fp32, SwiGLU MLP: gate, up, SiLU and product), HF `GPT2Block` as IndexTTS2 builds it
#: (dropout 0.1, the `gelu_new` MLP written out in elementwise steps), and LinguaForge's `models.gpt.Block`.
BLOCKS: dict[str, BlockCost] = {
    "llama": BlockCost(lambda d, f, h: 40 * d + 16 * f + 4 * h + 8, lambda d, f, h: 34 * d + 8 * f + 4 * h + 8,
                       lambda d, f: 4 * d * d + 3 * d * f),
    "gpt2": BlockCost(lambda d, f, h: 40 * d + 20 * f + 16, lambda d, f, h: 30 * d + 10 * f + 16,
                      lambda d, f: 4 * d * d + 2 * d * f),
    "linguaforge": BlockCost(lambda d, f, h: 32 * d + 8 * f + 4 * h + 16, lambda d, f, h: 20 * d + 4 * f + 4 * h + 16,
                             lambda d, f: 4 * d * d + 2 * d * f),
}


@dataclass(frozen=True)
class ParameterCount:
    """The model's tensors as the run trains them: all their elements, the trainable elements and bytes, the
    frozen bytes (parameters that do not train and buffers), and whether its text rows are split (frozen rows as buffers)."""

    elements: int
    trainable: int
    trainable_bytes: int
    frozen_bytes: int
    split_rows: bool


@dataclass(frozen=True)
class StepShape:
    """What one step is sized at: the micro-batch, the longest text and speech (tokens, without the
    layout's extra positions) a micro-batch holds, 16-bit autocast, activation checkpointing, the device type
    and the micro-batches one optimiser step accumulates (`batch.accumulate`)."""

    batch: int
    text_tokens: int
    speech_tokens: int
    half: bool
    checkpointing: bool
    device: str = "cuda"
    accumulate: int = 1


@dataclass
class MemoryPlan:
    """The plan of one step on each of `ranks` processes: its parts in bytes, the parameter count, the step's
    shape and a sample's positions."""

    parts: dict[str, int]
    parameters: ParameterCount
    step: StepShape
    positions: int
    ranks: int = 1

    @property
    def peak(self) -> int:
        """Return the step's peak: persistent parts + max(backward start: activations + logits, backward end: gradients);
        accumulating micro-batches, the sum: the first one's gradients stay while the next one's activations are built."""
        persistent = sum(v for k, v in self.parts.items() if k not in ("gradients", "activations", "logits"))
        backward = self.parts["activations"] + self.parts["logits"]
        if self.step.accumulate > 1:
            return persistent + backward + self.parts["gradients"]
        return persistent + max(backward, self.parts["gradients"])

    def describe(self) -> str:
        """Return the parts as `name SIZE` pairs, the empty ones left out."""
        return ", ".join(f"{name} {format_size(value)}" for name, value in self.parts.items() if value)

    def to_dict(self) -> dict[str, Any]:
        """Return the plan as JSON-ready data (bytes)."""
        return {"peak": self.peak, "parts": dict(self.parts), "trainable_parameters": self.parameters.trainable,
                "batch": self.step.batch, "text_tokens": self.step.text_tokens, "speech_tokens": self.step.speech_tokens,
                "positions": self.positions, "half": self.step.half, "checkpointing": self.step.checkpointing,
                "device": self.step.device, "accumulate": self.step.accumulate, "ranks": self.ranks}


def format_size(n: int | float) -> str:
    """Return `n` bytes as GiB (2 decimals) from 1 GiB up, else as MiB (1 decimal)."""
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / 1024**2:.1f} MiB"


# ---------------------------------------------------------------- parameters


def _adapter_key(adapter: Any) -> tuple | None:
    if adapter is None or getattr(adapter, "kind", "none") == "none":
        return None
    return (adapter.kind, adapter.rank, adapter.alpha, adapter.dropout, tuple(adapter.targets))


def count_parameters(family: "ModelFamily", model_config: Mapping[str, Any], frozen_rows: int, freeze_mode: str,
                     adapter: Any = None) -> ParameterCount:
    """Return the trainable and frozen tensors of the family's model as the run trains it: built on the `meta`
    device from `model_config` (its `to_dict()`) with `frozen_rows` frozen text rows, then the run's LoRA
    `adapter` (`AdapterConfig`, kind `lora`) or its `freeze_mode` applied. Cached per configuration.

    Raises InputError as `inject_lora` does for targets that match no module.
    """
    key = json.dumps(model_config, sort_keys=True, default=str)
    return _count(family.name, key, frozen_rows, freeze_mode, _adapter_key(adapter))


@lru_cache(maxsize=32)
def _count(family_name: str, config_json: str, frozen_rows: int, freeze_mode: str, adapter: tuple | None) -> ParameterCount:
    from core.families.registry import get_model_family

    family = get_model_family(family_name)
    with torch.device("meta"):
        model = family.build_model(json.loads(config_json), frozen_rows)
        if adapter is None:
            family.apply_freeze(model, freeze_mode)
        else:
            from core.training.adapter import inject_lora
            from core.training.run_config import AdapterConfig

            kind, rank, alpha, dropout, targets = adapter
            inject_lora(model, family, AdapterConfig(kind, rank, alpha, dropout, list(targets)), "run config")
    trainable = [p for p in model.parameters() if p.requires_grad]
    frozen = [p for p in model.parameters() if not p.requires_grad] + list(model.buffers())
    split = any(getattr(m, "frozen", 0) or getattr(m, "frozen_tail", 0) for m in family.text_row_modules(model))
    return ParameterCount(elements=sum(t.numel() for t in trainable + frozen), trainable=sum(p.numel() for p in trainable),
                          trainable_bytes=sum(p.numel() * p.element_size() for p in trainable),
                          frozen_bytes=sum(t.numel() * t.element_size() for t in frozen), split_rows=bool(split))


# ---------------------------------------------------------------- the plan


def positions_of(shape: MemoryShape, text_tokens: int, speech_tokens: int) -> tuple[int, int, int]:
    """Return (positions of a sample, text positions, speech positions) for its text and speech tokens."""
    text = text_tokens + shape.text_extra
    speech = speech_tokens + shape.speech_extra if shape.speech_rows else 0
    return shape.conditioning + text + speech, text, speech


def activation_bytes(shape: MemoryShape, step: StepShape, split_rows: bool) -> tuple[int, int]:
    """Return (activations, logits) in bytes of one micro-batch of `step` through a model of `shape`."""
    cost = BLOCKS[shape.block]
    d, f, h = shape.width, shape.mlp_width, shape.heads
    width = 2 if step.half else 4
    positions, text, speech = positions_of(shape, step.text_tokens, step.speech_tokens)
    per_block = (cost.half if step.half else cost.fp32)(d, f, h)
    if shape.output_dropout > 0:
        per_block += DROPOUT_FLOATS * d * width
    unfused = shape.naive_attention or (shape.attention_dropout > 0 and step.device == "cpu")
    scores = SCORE_BYTES * h * positions * positions if unfused else 0
    one_block = per_block * positions + scores
    blocks = shape.layers * 4 * d * positions + one_block if step.checkpointing else shape.layers * one_block
    around = POSITION_FLOATS * d * width * positions + PROMPT_FLOATS * d * width * shape.prompt_tokens
    rows = 2 * 4 * shape.text_rows * d if split_rows else 0  # the split head's full matrix, and its gradient
    held = shape.text_rows * min(step.batch * text, CHUNK_POSITIONS) + shape.speech_rows * min(step.batch * speech, CHUNK_POSITIONS)
    logits = LOGIT_COPIES * 4 * held
    return step.batch * (blocks + around) + rows, logits


def plan_memory(family: "ModelFamily", model_config: Mapping[str, Any], step: StepShape, *, frozen_rows: int,
                freeze_mode: str, adapter: Any = None, host_bytes: int = 0, ranks: int = 1) -> MemoryPlan | None:
    """Return the memory plan of one optimiser step of the family's model (`model_config`: its `to_dict()`) at
    `step`, with `frozen_rows` frozen text rows and the run's freeze mode or LoRA `adapter`; `host_bytes`
    (the base checkpoint the trainer keeps loaded) counts on the CPU. None when the family states no `memory_shape`.
    With `ranks` > 1 (DDP under torchrun) each rank's plan: the gradients live in DDP's buckets the whole step; when the
    step accumulates, the micro-batches before the last run under `no_sync` and make their gradients beside the buckets
    (the trainer sets them to None between steps), one more copy.

    With `step.checkpointing` False, a model that recomputes its blocks by itself (`MemoryShape.recomputes`) still does.
    """
    shape = family.memory_shape(model_config)
    if shape is None:
        return None
    if shape.recomputes and not step.checkpointing:
        step = replace(step, checkpointing=True)
    params = count_parameters(family, model_config, frozen_rows, freeze_mode, adapter)
    activations, logits = activation_bytes(shape, step, params.split_rows)
    cost = BLOCKS[shape.block]
    copied_blocks = 1 if step.checkpointing else shape.layers
    copies = 2 * (copied_blocks * cost.matmul_params(shape.width, shape.mlp_width) + (shape.text_rows + shape.speech_rows) * shape.width)
    ddp = ranks > 1
    parts = {
        "trainable weights": params.trainable_bytes,
        "gradients": 0 if ddp and step.accumulate == 1 else params.trainable_bytes,
        "optimizer state": 2 * 4 * params.trainable,
        "frozen weights": params.frozen_bytes,
        "16-bit weight copies": copies if step.half else 0,
        "activations": activations,
        "logits": logits,
        "base checkpoint in memory": host_bytes if step.device == "cpu" else 0,
        "DDP gradient buckets": params.trainable_bytes if ddp else 0,
    }
    return MemoryPlan(parts, params, step, positions_of(shape, step.text_tokens, step.speech_tokens)[0], ranks)


def largest_fitting_batch(plan_at: Callable[[int], MemoryPlan], budget: int, upper: int) -> int:
    """Return the largest micro-batch ≤ `upper` whose plan (`plan_at(batch)`) peaks within `budget` (0 when none does)."""
    if plan_at(1).peak > budget:
        return 0
    low, high = 1, upper
    while low < high:
        middle = (low + high + 1) // 2
        if plan_at(middle).peak <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def micro_batch_plan(effective: int, largest: int) -> tuple[int, int]:
    """Return (batch.size, batch.accumulate) with the largest micro-batch ≤ `largest` that divides
    the `effective` batch exactly, so the optimisation does not change."""
    size = max(d for d in range(1, min(effective, max(largest, 1)) + 1) if effective % d == 0)
    return size, effective // size


def free_bytes(device: str) -> int | None:
    """Return the free memory of `device` (CUDA: free device memory; CPU: MemAvailable), or None if unknown."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    if device.startswith("cuda"):
        return None
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None
