"""Regional compilation: `torch.compile` of the repeated transformer block, once, instead of the whole model.

Compiling a 30-layer T3 as one graph did not finish in 150 s on an H100 (docs/benchmarks.md); its 30
blocks are one class with one `forward`, so compiling each block in place (`nn.Module.compile`) traces
and optimises that forward once and every other block reuses the compiled code (dynamo inlines the
module's parameters as inputs). `transformer_blocks` finds the blocks without a family hook: the
`nn.ModuleList` of two or more modules of one class holding the most parameters (the own GPT's
`gpt.blocks`, T3's Llama `tfmr.layers`, Turbo's and IndexTTS2's GPT-2 `h`). The embeddings, heads and
the loss stay eager. `uncompile_blocks` puts the eager forward back (the trainer's fallback).

`compile: auto` compiles on CUDA only for the families whose compiled step was measured faster than the
eager one (`MEASURED_FASTER`); on the CPU it is off.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

#: families whose compiled training step was measured faster than eager on CUDA: the own GPT (compiled rows
#: of docs/benchmarks.md's GPU table). The published families' compiled rows are unmeasured: bench/device_table.py measures them.
MEASURED_FASTER = frozenset({"linguaforge"})


def compile_by_default(family: str, device_type: str) -> bool:
    """Return whether `compile: auto` compiles the blocks of `family` on `device_type` (CUDA and measured faster)."""
    return device_type == "cuda" and family in MEASURED_FASTER


def transformer_blocks(model: nn.Module) -> nn.ModuleList | None:
    """Return the model's repeated transformer blocks: the `nn.ModuleList` of ≥ 2 modules of one class with the most
    parameters (None when the model has none)."""
    best, best_size = None, 0
    for module in model.modules():
        if not isinstance(module, nn.ModuleList) or len(module) < 2 or len({type(m) for m in module}) != 1:
            continue
        size = sum(p.numel() for p in module.parameters()) + sum(b.numel() for b in module.buffers())
        if size > best_size:
            best, best_size = module, size
    return best


def compile_blocks(model: nn.Module, backend: Any) -> int:
    """Compile each repeated block of `model` in place (`dynamic=True`: one graph for every batch shape); return
    how many blocks (0 when the model has no repeated blocks: nothing is compiled)."""
    blocks = transformer_blocks(model)
    if blocks is None:
        return 0
    for block in blocks:
        block.compile(backend=backend, dynamic=True)
    return len(blocks)


def uncompile_blocks(model: nn.Module) -> None:
    """Put the eager forward back on every block `compile_blocks` compiled."""
    for module in model.modules():
        if getattr(module, "_compiled_call_impl", None) is not None:
            module._compiled_call_impl = None
    torch._dynamo.reset()
